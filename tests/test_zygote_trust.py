"""The zygote trusts nothing it did not check: who sends, which descriptor, which root, which fork.

Each test is an attack on the zygote, run by a real caller (a Python
program using the API, a process of its own): a caller that gives up root,
one that restricts itself with Landlock, one that closes every descriptor it
does not know, one that forks workers from another thread while it launches.
The chroot into a read-only bind mount is in the differential test
(``tests/test_zygote_inheritance.py``, ``[jail]``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, alive, api_caller, api_env, read_json, wait_gone


def _caller(script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return api_caller(["-c", script, *args], tmp_path)


def _landlock_abi() -> int:
    """Landlock's ABI version here (``landlock_create_ruleset(NULL, 0, VERSION)``); 0 without."""
    libc = ctypes.CDLL(None, use_errno=True)
    version: int = libc.syscall(444, None, 0, 1)
    return max(0, version)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving up root needs root")
needs_landlock = pytest.mark.skipif(
    _landlock_abi() < 1, reason="this kernel has no Landlock (or it is not enabled)"
)

_GAVE_UP_ROOT = """
import json, os, sys
import tether
from tether.caller import zygote

tether.run(["true"], record=False)
old = zygote.zygote_pid()
state = zygote.caller_state()
proof = getattr(zygote._zygote, "proof", None)
kept = None if proof is None else proof()  # the zygote's pipe, opened while root
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
# From here on, code running as nobody that sends the usual request over the
# root zygote's socket, past the caller's own checks.
zygote.caller_state = lambda: state
if kept is not None:
    zygote._Zygote.proof = lambda self: os.dup(kept)
try:
    ran = tether.run(["id", "-u"], record=False, capture_output=True).stdout.decode().strip()
except tether.LaunchError as error:
    ran = f"refused: {error}"
print(json.dumps({"ran": ran, "zygote": old}))
"""


@needs_root
def test_a_root_zygote_serves_no_sender_that_gave_up_root(tmp_path: Path) -> None:
    """The zygote checks the sender's credentials on every request (``SCM_CREDENTIALS``)."""
    said = json.loads(_caller(_GAVE_UP_ROOT, tmp_path).stdout)
    # As nobody, the plain path may not even start (the interpreter lives in
    # root's home here): refused or nobody's, never root's.
    assert said["ran"] != "0", said
    assert said["ran"] == "65534" or said["ran"].startswith("refused"), said


_LETS_GO = """
import json, os
import tether
from tether.caller import zygote

tether.run(["true"], record=False)
old = zygote.zygote_pid()
os.setgroups([])
os.setgid(65534)
os.setuid(65534)
try:
    tether.run(["true"], record=False)
except tether.LaunchError:
    pass  # the plain path as nobody (the interpreter may not be nobody's to run)
print(json.dumps({"zygote": old, "socket": zygote.socket_descriptor()}), flush=True)
input()
"""


@needs_root
def test_a_caller_that_gave_up_root_lets_go_of_its_root_zygote_at_its_next_launch(
    tmp_path: Path,
) -> None:
    """Fail closed: an identity that changed, or cannot be read, means no zygote kept."""
    caller = subprocess.Popen(
        [sys.executable, "-c", _LETS_GO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=api_env(tmp_path),
    )
    try:
        assert caller.stdout is not None
        said = json.loads(caller.stdout.readline())
        assert said["socket"] == -1
        # Its socket closed, the root zygote sees its end of file and exits,
        # while the caller still lives.
        assert wait_gone(said["zygote"])
        assert caller.poll() is None
    finally:
        caller.kill()
        caller.wait(timeout=BOUND)


_LANDLOCK = """
import ctypes, json, os, subprocess, sys
import tether
from tether.caller import zygote

libc = ctypes.CDLL(None, use_errno=True)
out, how = sys.argv[1], sys.argv[2]
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS, before the zygote starts
tether.run(["true"], record=False)
handled = ctypes.c_uint64(1 << 8)  # LANDLOCK_ACCESS_FS_MAKE_REG: no new regular file, anywhere
ruleset = libc.syscall(444, ctypes.byref(handled), ctypes.sizeof(handled), 0)
assert ruleset >= 0 and libc.syscall(446, ruleset, 0) == 0, ctypes.get_errno()
if how == "bypass":
    # Code in the restricted process that sends the usual request itself, with
    # any descriptor where the caller's proof would be.
    zygote._Zygote.proof = lambda self: os.open("/dev/null", os.O_RDONLY)


def made(name):
    return ["sh", "-c", f"touch {out}/{name} 2>/dev/null && echo made || echo refused"]


said = {
    "subprocess": subprocess.run(made("s"), capture_output=True, text=True).stdout.strip(),
    "tether": tether.run(made("t"), record=False, capture_output=True).stdout.decode().strip(),
}
print(json.dumps(said))
"""


@needs_landlock
@pytest.mark.parametrize("how", ["api", "bypass"])
def test_a_caller_confined_by_landlock_gets_commands_confined_as_subprocess_does(
    how: str, tmp_path: Path
) -> None:
    """Landlock shows nowhere in ``/proc``, but a restricted thread cannot look into the zygote.

    ``api``: the caller's next launch sees it, and starts a fresh zygote (in
    its domain). ``bypass``: code in the restricted process that sends the
    request itself cannot show the zygote its own pipe: refused.
    """
    out = tmp_path / "out"
    out.mkdir()
    said = json.loads(_caller(_LANDLOCK, tmp_path, str(out), how).stdout)
    assert said == {"subprocess": "refused", "tether": "refused"}
    assert not (out / "t").exists()


_CLOSED = """
import json, os, socket, sys, time
import tether

os.environ["MY_API_TOKEN"] = "s3cr3t-token-value"
tether.run(["true"], record=False)
long = tether.launch(["sleep", "600"], record=False)
os.closerange(3, 65536)  # as daemons do
pairs = [socket.socketpair() for _ in range(12)]  # they take the freed numbers
numbers = sorted(s.fileno() for pair in pairs for s in pair)
start = time.monotonic()
try:
    outcome = tether.run(["echo", "ran"], record=False, capture_output=True, deadline=3)
    ran = outcome.stdout.decode().strip()
except tether.LaunchError as error:
    ran = f"LaunchError: {error}"
took = time.monotonic() - start
long.cancel()  # its lifeline's number is a stranger's now: nothing written there
long.wait(timeout=10)
heard, closed = [], []
for pair in pairs:
    for end in pair:
        try:
            os.fstat(end.fileno())
        except OSError:
            closed.append(end.fileno())
            continue
        end.setblocking(False)
        try:
            heard.append(end.recv(1 << 20).decode("latin-1"))
        except BlockingIOError:
            pass
print(json.dumps({"ran": ran, "took": took, "heard": heard, "closed": closed}))
"""


def test_a_caller_that_closed_its_descriptors_never_writes_to_a_stranger(tmp_path: Path) -> None:
    """A descriptor is checked to be tether's (its inode) before each use; never a number."""
    said = json.loads(_caller(_CLOSED, tmp_path).stdout)
    assert said["heard"] == []  # no request, no secret, no cancel byte reached a stranger
    assert said["closed"] == []  # and none of the program's sockets was closed
    assert said["ran"] == "ran"  # a fresh zygote (or the plain path): the launch goes on
    assert said["took"] < 3


_FORKS_WHILE_STARTING = """
import json, os, signal, threading, time
import tether
from tether.caller import zygote

children = []
stop = threading.Event()


def fork_workers():
    while not stop.is_set():
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
        time.sleep(0.0005)


thread = threading.Thread(target=fork_workers)
thread.start()
time.sleep(0.01)
tether.run(["true"], record=False)  # the zygote starts while workers are forked
stop.set()
thread.join()
socket_name = f"socket:[{os.fstat(zygote.socket_descriptor()).st_ino}]"
holding = 0
for pid in children:
    try:
        held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        held = set()
    holding += socket_name in held
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(json.dumps({"children": len(children), "holding": holding}))
"""


@pytest.mark.timeout(120)
def test_no_worker_forked_while_the_zygote_starts_holds_its_socket(tmp_path: Path) -> None:
    """The zygote's socket is made and listed for closing in children under the fork lock."""
    for _ in range(3):
        said = json.loads(_caller(_FORKS_WHILE_STARTING, tmp_path).stdout)
        assert said["children"] > 10
        assert said["holding"] == 0, said


_FORKS_WHILE_LAUNCHING = """
import json, os, sys, threading, time
import tether

stop = threading.Event()


def fork_workers():  # multiprocessing's fork start method, in short
    while not stop.is_set():
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(0.02)


threading.Thread(target=fork_workers, daemon=True).start()
pids = [tether.launch(["sleep", "600"], record=False).pid for _ in range(int(sys.argv[1]))]
print(json.dumps(pids), flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(180)
def test_no_command_outlives_a_caller_that_forks_workers_while_it_launches(
    tmp_path: Path,
) -> None:
    """SIGKILLed while its workers live, the caller takes every command with it."""
    caller = subprocess.Popen(
        [sys.executable, "-c", _FORKS_WHILE_LAUNCHING, "30"],
        stdout=subprocess.PIPE,
        text=True,
        env=api_env(tmp_path),
        start_new_session=True,  # its workers too, for the clean-up below
    )
    pids: list[int] = []
    try:
        assert caller.stdout is not None
        pids = json.loads(caller.stdout.readline())
        caller.send_signal(signal.SIGKILL)
        caller.wait(timeout=BOUND)
        assert len(pids) == 30
        outlived = [pid for pid in pids if not wait_gone(pid)]
        assert outlived == []
    finally:
        with_signal = [pid for pid in pids if alive(pid)]
        for pid in with_signal:
            os.kill(pid, signal.SIGKILL)
        with_workers = caller.pid  # the session's processes: the workers, asleep
        with contextlib.suppress(ProcessLookupError):
            os.killpg(with_workers, signal.SIGKILL)
        caller.wait(timeout=BOUND)


_CLOSED_WITH_A_RECORD = """
import json, os, select, sys
import tether

runs, other = sys.argv[1], sys.argv[2]
long = tether.launch(["sleep", "600"], record=f"{runs}/long.json")
supervisor = long.supervisor_pid
os.closerange(3, 65536)  # as daemons do
# Directories of the program's own take the freed numbers (the held record directory's too).
held = [os.open(other, os.O_RDONLY | os.O_DIRECTORY) for _ in range(16)]
try:
    outcome = long.wait(timeout=10)
    said = outcome.reason.value
except Exception as error:
    said = type(error).__name__
try:  # the supervisor, which saw its lifeline end, writes its record and exits
    select.select([os.pidfd_open(supervisor)], [], [], 10)
except ProcessLookupError:
    pass
print(json.dumps({"said": said, "other": sorted(os.listdir(other))}))
"""


def test_a_caller_that_closed_its_descriptors_writes_no_record_into_a_stranger(
    tmp_path: Path,
) -> None:
    """The held record directory is checked too: no fallback record where it is not tether's."""
    runs, other = tmp_path / "runs", tmp_path / "other"
    runs.mkdir()
    other.mkdir()
    said = json.loads(_caller(_CLOSED_WITH_A_RECORD, tmp_path, str(runs), str(other)).stdout)
    assert said["other"] == []
    # The supervisor saw its lifeline end (the program closed it) and wrote its own record.
    assert read_json(runs / "long.json")["reason"] == "parent_lost"

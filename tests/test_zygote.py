"""The API's zygote: one fork server per caller, invisible to the command, never a lost launch.

Each test runs a real caller (a Python program using the API, started as a
process of its own) whose supervisors come from its zygote, and looks at
what the command saw, what is left running, and what the records say.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    alive,
    api_caller,
    hooked_env,
    read_json,
    skip_without_cgroup,
    validate_record,
    wait_gone,
    wait_gone_since,
)


def _caller(script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return api_caller(["-c", script, *args], tmp_path)


_STORM = """
import asyncio, json, sys, threading
import tether
from tether.caller import zygote

records = sys.argv[1]
outcomes = []
lock = threading.Lock()

def one(i):
    outcome = tether.run(["true"], record=f"{records}/thread-{i}.json")
    with lock:
        outcomes.append(outcome.reason.value)

first = tether.run(["true"], record=f"{records}/first.json")
threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
for thread in threads:
    thread.start()

async def tasks():
    runs = [tether.run_async(["true"], record=f"{records}/task-{i}.json") for i in range(50)]
    return [outcome.reason.value for outcome in await asyncio.gather(*runs)]

from_tasks = asyncio.run(tasks())
for thread in threads:
    thread.join()
print(json.dumps({"started": zygote.started, "threads": outcomes, "tasks": from_tasks}))
"""


@pytest.mark.timeout(240)
def test_fifty_threads_and_fifty_tasks_share_one_zygote(tmp_path: Path) -> None:
    records = tmp_path / "runs"
    result = _caller(_STORM, tmp_path, str(records))
    said = json.loads(result.stdout)
    assert said["started"] == 1
    assert said["threads"] == ["completed"] * 50
    assert said["tasks"] == ["completed"] * 50
    written = sorted(path.name for path in records.glob("*.json"))
    assert len(written) == 101
    supervisors = set()
    for path in records.glob("*.json"):
        data = read_json(path)
        assert data["reason"] == "completed"
        supervisors.add(data["supervisor_pid"])
    assert len(supervisors) == 101


_AT_REQUEST_TIME = """
import os, resource, sys
import tether
out = sys.argv[1]
tether.run(["true"], record=False)  # the zygote starts with the caller as it is now
os.environ["TETHER_TEST_WORD"] = "later"
os.umask(0o027)
os.chdir(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
with open(out, "w") as stream:
    tether.run(
        ["sh", "-c", "echo $TETHER_TEST_WORD; umask; pwd; ulimit -n"],
        record=False,
        stdout=stream,
    )
from tether.caller import zygote
print(zygote.started)
"""


def test_the_command_gets_the_caller_as_it_is_at_the_request(tmp_path: Path) -> None:
    out = tmp_path / "out"
    where = tmp_path / "elsewhere"
    where.mkdir()
    result = _caller(_AT_REQUEST_TIME, tmp_path, str(out), str(where))
    assert result.stdout.split() == ["1"]
    assert out.read_text().split() == ["later", "0027", str(where), "200"]


_NEW_GROUPS = """
import os, sys
import tether
from tether.caller import zygote
out = sys.argv[1]
tether.run(["true"], record=False)
os.setgroups([4242])
with open(out, "w") as stream:
    tether.run(["id", "-G"], record=False, stdout=stream)
print(zygote.started)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="changing groups needs root")
def test_new_credentials_mean_a_fresh_zygote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _caller(_NEW_GROUPS, tmp_path, str(out))
    assert result.stdout.split() == ["2"]
    assert "4242" in out.read_text().split()


_LOST = """
import os, signal, sys
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
lost = zygote.zygote_pid()
os.kill(lost, signal.SIGKILL)
pidfd = os.pidfd_open(lost)
import select
select.select([pidfd], [], [], 10)
after = tether.run(["true"], record=sys.argv[1])
again = tether.run(["true"], record=False)
print(lost, after.reason.value, again.reason.value, zygote.started, zygote.zygote_pid())
"""


def test_a_lost_zygote_means_the_plain_path_then_a_fresh_zygote(tmp_path: Path) -> None:
    record = tmp_path / "after.json"
    result = _caller(_LOST, tmp_path, str(record))
    lost, after, again, started, fresh = result.stdout.split()
    assert (after, again, started) == ("completed", "completed", "2")
    assert fresh != lost
    assert not alive(int(lost))
    validate_record(read_json(record))


_HOLD = """
import os, sys
import tether
from tether.caller import zygote
handles = [
    tether.launch(["sleep", "600"], record=f"{sys.argv[2]}/run-{i}.json") for i in range(3)
]
said = {
    "zygote": zygote.zygote_pid(),
    "pids": [h.pid for h in handles],
    "supervisors": [h.supervisor_pid for h in handles],
}
print(json.dumps(said), flush=True)
sys.stdin.read()  # until the test kills this caller
"""


def test_the_caller_killed_takes_its_zygote_and_every_command(
    tmp_path: Path, processes: Processes
) -> None:
    runs = tmp_path / "runs"
    caller = processes.api_program(["-c", "import json\n" + _HOLD, "unused", str(runs)], tmp_path)
    assert caller.stdout is not None
    said = json.loads(caller.stdout.readline())
    zygote, pids, supervisors = said["zygote"], said["pids"], said["supervisors"]
    processes.track(zygote, *pids, *supervisors)
    caller.send_signal(signal.SIGKILL)
    caller.wait(timeout=BOUND)
    assert all(wait_gone(pid) for pid in pids)
    assert all(wait_gone(pid) for pid in supervisors)
    assert wait_gone(zygote)
    records = sorted(runs.glob("run-*.json"))
    assert len(records) == 3
    for path in records:
        data = read_json(path)
        validate_record(data)
        assert data["reason"] == "parent_lost"


_WITHOUT_IT = """
import os, select, signal, sys
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
# On a loaded machine a zygote slower than its answer's bound is abandoned (its
# launch takes the plain path): then there is no zygote to lose, and the case
# is tried again with a fresh one, each try with a record of its own.
# The zygote is signalled through a pidfd opened first: once killed, it may be
# reaped (and its pid free) before this script could open one.
for attempt in range(5):
    record = f"{sys.argv[1]}.{attempt}.json"
    handle = tether.launch(["sleep", "600"], record=record)
    pid = zygote.zygote_pid()
    try:
        if pid is None:  # abandoned already: no zygote to lose
            raise ProcessLookupError
        gone = os.pidfd_open(pid)
        signal.pidfd_send_signal(gone, signal.SIGKILL)
        break
    except ProcessLookupError:
        handle.cancel()
        handle.wait()
select.select([gone], [], [], 10)
handle.cancel()
outcome = handle.wait()
print(outcome.reason.value, handle.pid, record)
"""


def test_a_supervisor_does_not_depend_on_its_zygote(tmp_path: Path) -> None:
    result = _caller(_WITHOUT_IT, tmp_path, str(tmp_path / "r"))
    reason, pid, record = result.stdout.split()
    assert reason == "cancelled"
    assert not alive(int(pid))
    assert read_json(Path(record))["reason"] == "cancelled"


def test_tether_zygote_0_spawns_every_supervisor(tmp_path: Path) -> None:
    script = (
        "import os, tether\n"
        "from tether.caller import zygote\n"
        "os.environ['TETHER_ZYGOTE'] = '0'\n"
        "print(tether.run(['true'], record=False).reason.value, zygote.started)\n"
    )
    assert _caller(script, tmp_path).stdout.split() == ["completed", "0"]


_NAMED = """
import json
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
pid = zygote.zygote_pid()
with open(f"/proc/{pid}/comm") as comm, open(f"/proc/{pid}/cmdline", "rb") as cmdline:
    print(json.dumps({"comm": comm.read(), "args": cmdline.read().decode().split("\\0")}))
"""


def test_the_zygote_is_named_tether_zygote_in_ps(tmp_path: Path) -> None:
    said = json.loads(_caller(_NAMED, tmp_path).stdout)
    assert said["comm"] == "tether-zygote\n"
    assert said["args"][1:3] == ["-X", "tether-zygote"]  # ``ps -f`` shows it early


_IGNORED = """
import signal, sys
import tether
def ignored_by_the_command():
    with open(sys.argv[1], "w") as out:
        tether.run(["grep", "SigIgn", "/proc/self/status"], record=False, stdout=out)
    with open(sys.argv[1]) as said:
        return int(said.read().split()[1], 16) >> (signal.SIGTTOU - 1) & 1
# SIGTTOU: a signal the supervisor neither handles nor lets go by itself.
signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # the zygote starts with it ignored
tether.run(["true"], record=False)
first = ignored_by_the_command()
signal.signal(signal.SIGTTOU, signal.SIG_DFL)
print(first, ignored_by_the_command())
"""


def test_the_command_ignores_what_the_caller_ignores_at_the_request(tmp_path: Path) -> None:
    assert _caller(_IGNORED, tmp_path, str(tmp_path / "out")).stdout.split() == ["1", "0"]


_HUGE = """
import os, sys
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
# More than one message on the socket holds (each variable within what exec takes).
for i in range(3):
    os.environ[f"TETHER_TEST_HUGE_{i}"] = "x" * 100_000
with open(sys.argv[1], "w") as out:
    huge = tether.run(["sh", "-c", "echo ${#TETHER_TEST_HUGE_2}"], record=False, stdout=out)
for i in range(3):
    del os.environ[f"TETHER_TEST_HUGE_{i}"]
after = tether.run(["true"], record=False)
print(huge.reason.value, after.reason.value, zygote.started)
"""


def test_a_request_too_big_for_the_zygote_takes_the_plain_path_and_keeps_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    result = _caller(_HUGE, tmp_path, str(out))
    assert result.stdout.split() == ["completed", "completed", "1"]
    assert out.read_text().split() == ["100000"]


_CONTAINMENT_AT_REQUEST = """
import json, os, sys
import tether
from tether.caller import zygote
records, out = sys.argv[1], sys.argv[2]
said = {}
tether.run(["true"], record=f"{records}/first.json")
with open(out, "w") as stream:
    tether.run(["cat", "/proc/self/cgroup"], record=f"{records}/auto.json", stdout=stream)
os.environ["TETHER_CONTAINMENT"] = "sweep"
tether.run(["true"], record=f"{records}/sweep.json")
os.environ["TETHER_CONTAINMENT"] = "bogus"
try:
    tether.run(["true"], record=False)
except tether.LaunchError as error:
    said["bogus"] = str(error)
said["started"] = zygote.started
said["zygote"] = zygote.zygote_pid()
print(json.dumps(said))
"""


@pytest.mark.timeout(120)
def test_the_cgroup_is_made_as_the_request_says(tmp_path: Path) -> None:
    """The run's cgroup is made from the request's setting, by the run's own supervisor.

    ``TETHER_CONTAINMENT`` as the caller has it at the request, not as it was
    when the zygote (or its spare supervisor) started: a cgroup, then the sweep,
    then a refusal. The second run's supervisor is the zygote's spare, which
    makes the cgroup itself, named after itself.
    """
    skip_without_cgroup()
    out = tmp_path / "cgroup"
    result = _caller(_CONTAINMENT_AT_REQUEST, tmp_path, str(tmp_path), str(out))
    said = json.loads(result.stdout)
    assert said["started"] == 1
    assert read_json(tmp_path / "auto.json")["containment"] == "cgroup"
    line = next(line for line in out.read_text().splitlines() if line.startswith("0::"))
    supervisor = read_json(tmp_path / "auto.json")["supervisor_pid"]
    assert Path(line[3:]).name.startswith(f"tether-{supervisor}-")
    assert read_json(tmp_path / "sweep.json")["containment"] == "sweep"
    assert "TETHER_CONTAINMENT must be one of" in said["bogus"]


_LOST_WITH_THE_REQUEST = """
import os, platform, signal, sys, threading, time
import tether
from tether.caller import zygote

ran = sys.argv[1]
# Where the launching thread waits for the zygote's answer: poll, ppoll (bounded), recvfrom.
WAITS = {"x86_64": {"7", "271", "45"}, "aarch64": {"73", "207"}}[platform.machine()]
tether.run(["true"], record=False)
lost = zygote.zygote_pid()
os.kill(lost, signal.SIGSTOP)  # it cannot take the request, which waits in its socket
waiting = threading.Event()
outcome = []

def launch():
    waiting.tid = threading.get_native_id()
    waiting.set()
    outcome.append(tether.run(["sh", "-c", "echo once >> " + ran], record=False))

thread = threading.Thread(target=launch)
thread.start()
waiting.wait(10)
end = time.monotonic() + 10
syscall = f"/proc/self/task/{waiting.tid}/syscall"
while time.monotonic() < end:  # until the request is sent and the answer awaited
    with open(syscall) as said:
        if said.read().split()[0] in WAITS and zygote._lock.locked():
            break
    time.sleep(0.001)
else:
    raise SystemExit("the launch never waited for the zygote's answer")
os.kill(lost, signal.SIGKILL)
thread.join(30)
print(outcome[0].reason.value, zygote.started)
"""


@pytest.mark.skipif(
    os.uname().machine not in ("x86_64", "aarch64"), reason="reads poll's syscall number"
)
def test_a_zygote_lost_holding_a_request_means_the_plain_path_and_one_command(
    tmp_path: Path,
) -> None:
    """The zygote dies with the request in its socket, unread: the launch takes the plain path.

    The caller cannot know whether the zygote forked; the status channel says
    it did not (nobody holds its write end), so the command starts once, from
    a fresh interpreter, and a later launch starts a fresh zygote.
    """
    ran = tmp_path / "ran"
    result = _caller(_LOST_WITH_THE_REQUEST, tmp_path, str(ran))
    assert result.stdout.split() == ["completed", "1"]
    assert ran.read_text() == "once\n"


_TWO_RUNS = """
import json, sys
import tether
from tether.caller import zygote
tether.run(["true"], record=f"{sys.argv[1]}/first.json")  # forked before the zygote loads
second = tether.launch(["true"], record=f"{sys.argv[1]}/second.json")
second.wait()
print(json.dumps({"zygote": zygote.zygote_pid(), "supervisor": second.supervisor_pid}))
# Let go of it and wait for its end: at this caller's own end, its parent-death
# signal (SIGKILL) would come before it could note what it had loaded.
import os, select
pidfd = os.pidfd_open(zygote.zygote_pid())
zygote.forget()
select.select([pidfd], [], [], 10)
"""


def test_a_supervisor_forked_from_the_zygote_loads_nothing_of_its_own(tmp_path: Path) -> None:
    """Every module a forked supervisor uses was loaded in the zygote, and is shared.

    A module the supervisor imported itself (a lazy import the zygote never
    made: ``pathlib`` for a record, the ``prctl`` binding) is private memory
    in each of a hundred supervisors. The hook in ``fixtures/exit_modules``
    notes what each process had loaded when it ended: the zygote's own list
    (it ends when its caller does) must hold the supervisor's.
    """
    snapshots = tmp_path / "modules"
    env = hooked_env(tmp_path, "exit_modules", TETHER_TEST_EXIT_MODULES=str(snapshots))
    env.pop("TETHER_ZYGOTE", None)
    done = subprocess.run(
        [sys.executable, "-c", _TWO_RUNS, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND * 3,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert wait_gone(said["zygote"])
    # A supervisor notes its modules at its exit, after it told its caller.
    for words in (line.split() for line in snapshots.read_text().splitlines()):
        if words[0] == "parent" and int(words[2]) == said["supervisor"]:
            assert wait_gone_since(int(words[2]), int(words[3]))
    ends = {
        int(pid): set(names)
        for when, pid, *names in (line.split() for line in snapshots.read_text().splitlines())
        if when == "exit"
    }
    supervisor, zygote = ends[said["supervisor"]], ends[said["zygote"]]
    assert "tether.supervisor.loop" in supervisor
    assert sorted(supervisor - zygote) == []

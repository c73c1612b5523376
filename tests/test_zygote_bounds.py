"""The API's fast path keeps its promises under stress: forks, stops, signal handlers.

Each test runs a real caller (a Python program using the API, a process of its
own) and does to it what an unlucky program or a hostile command would: fork
workers while it launches, stop its zygote, launch again from a signal
handler, kill it while its zygote is stopped. Every wait is bounded: a pidfd,
a line on a pipe, the caller's own exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BOUND, Processes, api_env, fixture, wait_gone


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", ["zygote", "plain", "in-exchange"])
def test_a_worker_forked_during_launches_keeps_no_command_alive(
    tmp_path: Path, processes: Processes, path: str
) -> None:
    """60 launches while another thread forks every 20 ms; the caller SIGKILLed: none is left.

    A lifeline is close-in-child from the moment it exists: a worker forked
    while a launch is under way (its channels made, not yet handed over)
    holds none of it, so every command sees its caller die. ``in-exchange``:
    the other thread forks at that moment in every launch, not by chance.
    """
    options = ["--in-exchange"] if path == "in-exchange" else []
    caller = processes.start(
        fixture("api_fork_while_launching", "60", *options, "--", "sleep", "1000"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=api_env(tmp_path, zygote=path != "plain"),
    )
    assert caller.stdout is not None
    said = json.loads(caller.stdout.readline())
    pids, workers = said["pids"], said["workers"]
    processes.track(*pids, *workers)
    assert len(pids) == 60
    assert workers  # the storm did fork while launching
    caller.send_signal(signal.SIGKILL)
    caller.wait(timeout=BOUND)
    end = time.monotonic() + BOUND
    left = [pid for pid in pids if not wait_gone(pid, max(0.0, end - time.monotonic()))]
    assert left == []


def _caller(
    processes: Processes, tmp_path: Path, script: str, *args: str
) -> subprocess.Popen[bytes]:
    """Start a caller running ``script``; its first line names its zygote (tracked)."""
    caller = processes.start(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=api_env(tmp_path),
        bufsize=0,  # unbuffered: communicate() later reads the pipe itself, past any read-ahead
    )
    assert caller.stdout is not None
    processes.track(int(caller.stdout.readline()))
    return caller


def _said(caller: subprocess.Popen[bytes]) -> list[str]:
    """The rest of what the caller printed, once it has exited (bounded: it must not hang)."""
    out, _ = caller.communicate(timeout=BOUND * 2)
    assert caller.returncode == 0
    return out.decode().split()


_STOPPED = """
import os, signal, sys
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
stopped = zygote.zygote_pid()
print(stopped, flush=True)
os.kill(stopped, signal.SIGSTOP)
ran = tether.run(["sh", "-c", "echo once >> " + sys.argv[1]], record=False, deadline=2)
after = tether.run(["true"], record=False)
print(ran.reason.value, after.reason.value, zygote.started, zygote.zygote_pid() != stopped)
"""


def test_a_stopped_zygote_is_abandoned_and_the_launch_takes_the_plain_path(
    tmp_path: Path, processes: Processes
) -> None:
    """``kill -STOP`` the zygote: the next launch, with a deadline, is not held up by it.

    The exchange is bounded (and by the deadline): the zygote that does not
    answer is SIGKILLed, the status channel says it had not forked, and the
    command runs once, by the plain path; the launch after starts a new zygote.
    """
    ran = tmp_path / "ran"
    caller = _caller(processes, tmp_path, _STOPPED, str(ran))
    assert _said(caller) == ["completed", "completed", "2", "True"]
    assert ran.read_text() == "once\n"


_STOPPED_BY_ITS_COMMAND = """
import os, sys
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
print(zygote.zygote_pid(), flush=True)
# The command finds its caller's zygote in /proc (the caller's child whose
# command line names the zygote; its supervisors are copies of it, but not the
# caller's children) and stops it.
find_and_stop = '''
import os, signal, sys
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline, open(f"/proc/{pid}/stat") as stat:
            words, parent = cmdline.read(), stat.read().rsplit(")", 1)[1].split()[1]
    except OSError:
        continue
    if parent == sys.argv[1] and b"tether.supervisor.zygote" in words:
        os.kill(int(pid), signal.SIGSTOP)
        print(pid)
'''
with open(sys.argv[1], "w") as out:
    tether.run([sys.executable, "-c", find_and_stop, str(os.getpid())], record=False, stdout=out)
ran = tether.run(["true"], record=False, deadline=2)
after = tether.run(["true"], record=False)
print(ran.reason.value, after.reason.value, zygote.started)
"""


def test_a_zygote_stopped_by_a_command_does_not_hold_up_the_next_launch(
    tmp_path: Path, processes: Processes
) -> None:
    stopped = tmp_path / "stopped"
    caller = _caller(processes, tmp_path, _STOPPED_BY_ITS_COMMAND, str(stopped))
    assert _said(caller) == ["completed", "completed", "2"]
    assert len(stopped.read_text().split()) == 1  # the command did find and stop it


_HOLD = """
import sys
import tether
from tether.caller import zygote
tether.run(["true"], record=False)
print(zygote.zygote_pid(), flush=True)
sys.stdin.read()
"""


def test_a_stopped_zygote_dies_with_its_caller(tmp_path: Path, processes: Processes) -> None:
    """A stopped zygote cannot read its socket's end of file; its parent-death signal ends it."""
    caller = processes.api_program(["-c", _HOLD], tmp_path)
    assert caller.stdout is not None
    zygote = int(caller.stdout.readline())
    processes.track(zygote)
    os.kill(zygote, signal.SIGSTOP)
    caller.send_signal(signal.SIGKILL)
    caller.wait(timeout=BOUND)
    assert wait_gone(zygote)


_HANDLER_LAUNCHES = """
import os, signal, sys, threading, time
import tether
from tether.caller import zygote

out = sys.argv[1]
command = ["sh", "-c", "echo ran >> " + out]
from_handler = []

def launch_too(number, frame):
    from_handler.append(tether.run(command, record=False).reason.value)

signal.signal(signal.SIGUSR1, launch_too)
tether.run(["true"], record=False)
print(zygote.zygote_pid(), flush=True)
main = threading.main_thread().ident
armed, done = threading.Event(), threading.Event()
hits = 0

def poke():
    global hits
    while not done.is_set():
        if not armed.wait(0.1):
            continue
        # The main thread's launch is in its exchange with the zygote: interrupt it there.
        while armed.is_set() and not zygote._lock.locked():
            time.sleep(0.0001)
        if armed.is_set():
            signal.pthread_kill(main, signal.SIGUSR1)
            hits += 1
        armed.clear()

poker = threading.Thread(target=poke)
poker.start()
from_main = []
for _ in range(50):
    armed.set()
    from_main.append(tether.run(command, record=False).reason.value)
    armed.clear()
done.set()
poker.join()
# A signal sent just as the last launch ended may still be on its way.
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])
with open(out) as said:
    lines = len(said.read().splitlines())
print(hits > 0, set(from_main), set(from_handler), lines == len(from_main) + len(from_handler))
"""


@pytest.mark.timeout(120)
def test_a_launch_from_a_signal_handler_never_waits_on_the_exchange_it_interrupted(
    tmp_path: Path, processes: Processes
) -> None:
    """50 launches, each interrupted in its exchange by a handler that launches: no hang.

    The handler's launch takes the plain path (its thread is in an exchange
    already), every command runs once, and the interrupted exchange goes on.
    """
    caller = _caller(processes, tmp_path, _HANDLER_LAUNCHES, str(tmp_path / "ran"))
    assert _said(caller) == ["True", "{'completed'}", "{'completed'}", "True"]

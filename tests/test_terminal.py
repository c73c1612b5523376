"""Both CLI doors on a pseudo-terminal: Ctrl-Z stops the whole tree, ``fg`` continues it,
Ctrl-C ends the command, and a command can read the terminal through its standard input.

The test plays the terminal and the shell: it types ``^Z`` and ``^C`` on the
pty's master (the kernel turns them into SIGTSTP and SIGINT for the
foreground process group, tether's), and continues the stopped job with
SIGCONT to its group, as ``fg`` does.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BOUND, Processes, ReadyPipe, tether_argv, wait_for_state, wait_gone

try:
    _MASTER, _SLAVE = os.openpty()
    os.close(_MASTER)
    os.close(_SLAVE)
    HAVE_PTY = True
except OSError:
    HAVE_PTY = False

pytestmark = pytest.mark.skipif(not HAVE_PTY, reason="no pseudo-terminal on this machine")


class Terminal:
    """A pty whose slave is the controlling terminal of one program's new session."""

    def __init__(self, argv: list[str], processes: Processes) -> None:
        self.master, slave = os.openpty()

        def take_the_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = processes.start(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=take_the_terminal,
        )
        os.close(slave)
        os.set_blocking(self.master, False)
        self.output = b""

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def read_until(self, needle: bytes) -> bytes:
        end = time.monotonic() + BOUND
        while needle not in self.output and time.monotonic() < end:
            try:
                self.output += os.read(self.master, 4096)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break
        assert needle in self.output, self.output
        return self.output

    def close(self) -> None:
        os.close(self.master)


@pytest.fixture
def terminal(processes: Processes) -> Iterator[list[Terminal]]:
    made: list[Terminal] = []
    yield made
    for each in made:
        each.close()


def sleeper_script(ready: ReadyPipe) -> list[str]:
    return ["sh", "-c", f'sleep 60 & echo "ready $$ $!" >"{ready.path}"; wait']


DOORS = {
    "run": ["run", "--no-record"],
    "timeout": ["timeout", "60"],
}


@pytest.mark.parametrize("door", DOORS)
def test_ctrl_z_stops_the_whole_tree_and_fg_continues_it(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, terminal: list[Terminal], door: str
) -> None:
    term = Terminal(tether_argv(*DOORS[door], *sleeper_script(ready)), processes)
    terminal.append(term)
    pids = ready.ready_pids()
    processes.track(*pids)
    term.type(b"\x1a")  # ^Z
    wait_for_state(term.process.pid, "T")
    for pid in pids:
        wait_for_state(pid, "T")
    os.killpg(term.process.pid, signal.SIGCONT)  # fg
    for pid in pids:
        wait_for_state(pid, "S")
    term.type(b"\x03")  # ^C
    status = term.process.wait(timeout=BOUND)
    # tether run cancels (130); tether timeout passes SIGINT on and dies of it, as GNU does.
    assert status == (130 if door == "run" else -signal.SIGINT)
    assert all(wait_gone(pid) for pid in pids)


@pytest.mark.parametrize("door", DOORS)
def test_a_command_reads_a_line_from_the_terminal(
    processes: Processes, terminal: list[Terminal], door: str
) -> None:
    script = 'printf "name? "; read answer; echo "got:$answer"'
    term = Terminal(tether_argv(*DOORS[door], "sh", "-c", script), processes)
    terminal.append(term)
    term.read_until(b"name? ")
    term.type(b"tether\n")
    term.read_until(b"got:tether")
    assert term.process.wait(timeout=BOUND) == 0


@pytest.mark.parametrize("door", DOORS)
def test_a_command_can_open_the_terminal_and_is_its_foreground(
    processes: Processes, terminal: list[Terminal], door: str
) -> None:
    # What ssh and sudo do to prompt: open /dev/tty, read a line, and check the foreground.
    script = (
        'printf "password? " >/dev/tty; read answer </dev/tty; '
        'python3 -c \'import os; print("fg" if os.tcgetpgrp(0) == os.getpgrp() else "bg")\'; '
        'echo "got:$answer"'
    )
    term = Terminal(tether_argv(*DOORS[door], "sh", "-c", script), processes)
    terminal.append(term)
    term.read_until(b"password? ")
    term.type(b"s3cret\n")
    term.read_until(b"got:s3cret")
    assert b"fg" in term.output
    assert term.process.wait(timeout=BOUND) == 0


@pytest.mark.parametrize("door", DOORS)
def test_a_killed_caller_on_a_terminal_still_takes_the_tree_along(
    processes: Processes, ready: ReadyPipe, terminal: list[Terminal], door: str
) -> None:
    term = Terminal(tether_argv(*DOORS[door], *sleeper_script(ready)), processes)
    terminal.append(term)
    pids = ready.ready_pids()
    processes.track(*pids)
    # The command shares the caller's group, as a terminal's job does.
    assert os.getpgid(pids[0]) == term.process.pid
    term.process.kill()
    assert all(wait_gone(pid) for pid in pids)


def test_the_deadline_stops_a_command_on_a_terminal(
    processes: Processes, ready: ReadyPipe, terminal: list[Terminal]
) -> None:
    term = Terminal(tether_argv("timeout", "0.5", *sleeper_script(ready)), processes)
    terminal.append(term)
    pids = ready.ready_pids()
    processes.track(*pids)
    assert term.process.wait(timeout=BOUND) == 124
    assert all(wait_gone(pid) for pid in pids)


@pytest.mark.parametrize("door", DOORS)
@pytest.mark.parametrize("stop", [signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU])
def test_without_a_terminal_a_stopped_caller_stops_the_tree_in_its_own_group(
    processes: Processes, ready: ReadyPipe, door: str, stop: int
) -> None:
    # No terminal: the command leads a group of its own, which no ^Z reaches; the
    # caller stops it (SIGSTOP to the tree) and continues it (SIGCONT) with itself.
    caller = processes.start(
        tether_argv(*DOORS[door], *sleeper_script(ready)), stdin=subprocess.DEVNULL
    )
    pids = ready.ready_pids()
    processes.track(*pids)
    assert os.getpgid(pids[0]) == pids[0]
    caller.send_signal(stop)
    wait_for_state(caller.pid, "T")
    for pid in pids:
        wait_for_state(pid, "T")
    caller.send_signal(signal.SIGCONT)
    for pid in pids:
        wait_for_state(pid, "S")
    caller.send_signal(signal.SIGTERM)
    assert caller.wait(timeout=BOUND) in (130, -signal.SIGTERM)
    assert all(wait_gone(pid) for pid in pids)


def test_a_lost_supervisors_fallback_never_kills_the_callers_own_group() -> None:
    # On a terminal the command is in the caller's group: the caller, and maybe the
    # rest of its pipeline, are in it too. Run in a child of its own group, so that
    # a mistake kills that child, not the test.
    probe = (
        "import os; from tether.caller.fallback import _stop_what_is_left; "
        "from tether.shared.protocol import Placement; "
        "_stop_what_is_left(Placement(supervisor_pid=1, pid=None, pgid=os.getpgrp(), "
        "cgroups=[])); print('alive')"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=BOUND,
        process_group=0,
    )
    assert (result.returncode, result.stdout) == (0, "alive\n")

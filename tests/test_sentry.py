"""Nothing blind after launch: the run is watched while the supervisor is still loading its loop.

The supervisor starts the command before it imports ``transitions``,
``structlog`` and the loop. These tests hold it in that import for as long as
they like (``fixtures/slow_loop/sitecustomize.py``: the import of
``tether.supervisor.loop`` waits at a gate the test opens), and show that the
caller's death, the deadline and a cancel reach the command *while the gate
is still closed*: the order of events proves it, not a timing. Once the gate
opens, the loop takes over from the sentry and the record tells the same
story, the stop signal sent once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    hooked_env,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)


class Gate:
    """The gate the supervisor's import of its loop waits at, until :meth:`open`."""

    def __init__(self, directory: Path, home: Path) -> None:
        self.directory = directory
        directory.mkdir()
        os.mkfifo(directory / "open")
        # Held open for reading too, so opening it for writing never blocks.
        self._keep = os.open(directory / "open", os.O_RDWR | os.O_NONBLOCK)
        self.opened = False
        #: The environment of a door whose supervisor is to wait at this gate.
        self.env = hooked_env(home, "slow_loop", TETHER_TEST_LOOP_GATE=str(directory))

    def held(self) -> list[int]:
        """The pids of the processes that reached the gate."""
        with contextlib.suppress(FileNotFoundError):
            return [int(line) for line in (self.directory / "held").read_text().split()]
        return []

    def open(self) -> None:
        if not self.opened:
            self.opened = True
            os.write(self._keep, b"go\n")

    def close(self) -> None:
        self.open()
        os.close(self._keep)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    held = Gate(tmp_path / "gate", tmp_path)
    yield held
    held.close()


def _announced(ready: ReadyPipe, processes: Processes) -> tuple[int, int]:
    """The command that announced itself, and its supervisor; both cleaned up after the test."""
    (pid,) = ready.ready_pids()
    supervisor = parent_of(pid)
    assert supervisor is not None
    processes.track(pid, supervisor)
    return pid, supervisor


def _term_noted(ready: ReadyPipe, pid: int) -> None:
    assert ready.line() == ["term", str(pid)]


def _signals(record: dict[str, object]) -> list[str]:
    signals = record["signals"]
    assert isinstance(signals, list)
    return [sent["signal"] for sent in signals]


def _held(processes: Processes, gate: Gate, *argv: str) -> subprocess.Popen[bytes]:
    """``tether ARGV``, its supervisor's loop held at ``gate`` once the command runs."""
    return processes.start(tether_argv(*argv), env=gate.env, stdout=subprocess.DEVNULL)


def test_caller_killed_while_the_supervisor_loads(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, gate: Gate
) -> None:
    record = tmp_path / "r.json"
    caller = _held(
        processes,
        gate,
        *("run", "--record", str(record), "--grace", "0.2", "--"),
        *fixture("sleeper", str(ready.path), "--note-term"),
    )
    pid, supervisor = _announced(ready, processes)
    caller.kill()
    caller.wait(timeout=BOUND)
    _term_noted(ready, pid)
    assert not gate.opened
    gate.open()
    assert wait_gone(pid)
    assert wait_gone(supervisor)
    assert gate.held() == [supervisor]  # its loop really did wait at the gate
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "parent_lost"
    # Sent once to the group (by the sentry), then SIGKILL after the grace.
    assert _signals(data) == ["SIGTERM", "SIGCONT", "SIGKILL"]
    assert data["escalated_to_sigkill"] is True


def test_deadline_passes_while_the_supervisor_loads(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, gate: Gate
) -> None:
    record = tmp_path / "r.json"
    # A deadline long enough for the command to announce itself first, even under load.
    caller = _held(
        processes,
        gate,
        *("run", "--record", str(record), "--deadline", "2", "--grace", "5", "--"),
        *fixture("sleeper", str(ready.path)),
    )
    pid, supervisor = _announced(ready, processes)
    # The command dies of SIGTERM while the loop is still held at the gate.
    assert wait_gone(pid)
    assert not gate.opened
    gate.open()
    assert caller.wait(timeout=BOUND) == 124
    assert gate.held() == [supervisor]
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "deadline_exceeded"
    assert _signals(data) == ["SIGTERM", "SIGCONT"]
    assert data["escalated_to_sigkill"] is False
    # The story's stamps are in order: the signals the sentry sent are stamped when
    # the group had them, not when the loop, let through the gate, got round to
    # the rest of the tree (after lines stamped with what the sentry saw).
    log = record.with_suffix(".events.jsonl").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in log.splitlines()]
    stamps = [line["mono"] for line in lines]
    assert stamps == sorted(stamps), [(line["event"], line["mono"]) for line in lines]


def test_the_sentry_sends_the_stop_signal_asked_for_a_real_time_one_too(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, gate: Gate
) -> None:
    """``timeout -s RTMIN+2``: the deadline passes while the loop is held, and the command dies
    of that signal, not of a SIGTERM the sentry put in for a name it could not read."""
    record = tmp_path / "r.json"
    # A deadline long enough for the command to announce itself first, even under load.
    caller = _held(
        processes,
        gate,
        *("timeout", "--record", str(record), "-s", "RTMIN+2", "2"),
        *fixture("sleeper", str(ready.path)),
    )
    pid, supervisor = _announced(ready, processes)
    assert wait_gone(pid)  # the deadline's signal, while the loop is still held
    assert not gate.opened
    gate.open()
    assert caller.wait(timeout=BOUND) == 124
    assert gate.held() == [supervisor]
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "deadline_exceeded"
    assert data["eval_exit_code"] == -(signal.SIGRTMIN + 2)
    assert _signals(data) == ["SIGRTMIN+2", "SIGCONT"]


@pytest.mark.parametrize("how", ["signal", "kill-byte"])
def test_seed_door_cancel_while_the_supervisor_loads(
    tmp_path: Path,
    processes: Processes,
    ready: ReadyPipe,
    gate: Gate,
    how: str,
) -> None:
    record = tmp_path / "r.json"
    lifeline_r, lifeline_w = os.pipe()
    supervisor = processes.start(
        [
            sys.executable,
            "-m",
            "tether.supervisor",
            "--variant",
            "held",
            "--parent-fd",
            str(lifeline_r),
            "--record",
            str(record),
            "--deadline-seconds",
            "60",
            "--grace-seconds",
            "0.5",
            "--",
            *fixture("sleeper", str(ready.path), "--note-term"),
        ],
        pass_fds=(lifeline_r,),
        env=gate.env,
    )
    os.close(lifeline_r)
    try:
        (pid,) = ready.ready_pids()
        processes.track(pid)
        if how == "signal":
            supervisor.send_signal(signal.SIGTERM)
            _term_noted(ready, pid)
        else:
            os.write(lifeline_w, b"k")
            assert wait_gone(pid)
        assert not gate.opened
        gate.open()
        status = supervisor.wait(timeout=BOUND)
    finally:
        os.close(lifeline_w)
    assert gate.held() == [supervisor.pid]
    assert status == 130
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "cancelled"
    if how == "signal":
        # The loop escalates after the grace, from the time the sentry sent SIGTERM.
        assert _signals(data) == ["SIGTERM", "SIGCONT", "SIGKILL"]
    else:
        assert _signals(data) == ["SIGKILL"]


def test_escapees_are_stopped_and_counted_once_the_loop_takes_over(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, gate: Gate
) -> None:
    # The sentry stops the group at once; those who left it are the loop's.
    record = tmp_path / "r.json"
    command = fixture("tree", str(ready.path), "--group", "1", "--setsid", "1", "--daemon", "1")
    caller = _held(processes, gate, "run", "--record", str(record), "--", *command)
    leader, *others = ready.ready_pids()
    supervisor = parent_of(leader)
    assert supervisor is not None
    processes.track(leader, *others, supervisor)
    caller.kill()
    caller.wait(timeout=BOUND)
    assert wait_gone(leader)
    assert not gate.opened
    gate.open()
    assert wait_gone(supervisor)
    assert all(wait_gone(pid) for pid in others)
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "parent_lost"
    assert data["descendants_stopped"] == 4
    assert _signals(data) == ["SIGTERM", "SIGCONT"]
    assert gate.held() == [supervisor]


def test_on_a_terminal_the_sentry_stops_the_command_never_its_callers_group(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, gate: Gate
) -> None:
    """A command on its caller's terminal is in the caller's group, with whatever else is there.

    A shell on a pseudo-terminal runs a bystander and ``tether run`` in its
    own process group (no job control), as a script would; ``tether run`` is
    killed while its supervisor still loads. The sentry stops the command, by
    its pid, and the shell and the bystander live on (a signal to the group
    would have ended them).
    """
    try:
        master, slave = os.openpty()
    except OSError:
        pytest.skip("no pseudo-terminal on this machine")
    pids = tmp_path / "pids"
    shell = f'sleep 600 & by=$!; "$@" </dev/tty & echo "$by $!" > "{pids}"; wait'
    command = fixture("sleeper", str(ready.path), "--note-term")

    def take_the_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        session = processes.start(
            ["sh", "-c", shell, "sh", *tether_argv("run", "--no-record", "--", *command)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=take_the_terminal,
            env=gate.env,
        )
    finally:
        os.close(slave)
    try:
        (pid,) = ready.ready_pids()
        bystander, caller = (int(word) for word in pids.read_text().split())
        supervisor = parent_of(pid)
        assert supervisor is not None
        processes.track(pid, bystander, caller, supervisor)
        assert os.getpgid(pid) == os.getpgid(bystander) == session.pid  # one group
        os.kill(caller, signal.SIGKILL)
        _term_noted(ready, pid)
        assert not gate.opened
        gate.open()
        assert wait_gone(supervisor)
        assert alive(bystander)
        assert alive(session.pid)
        assert gate.held() == [supervisor]
    finally:
        os.close(master)

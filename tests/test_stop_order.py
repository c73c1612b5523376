"""Act first, then tell: the command's group gets its signal before the event log hears why.

The command (``fixtures/told_after.py``) blocks SIGTERM and watches its own
event log against its pending signals, once the supervisor's loop (not the
sentry, which writes nothing) has the watch: a line about the event in the
log while SIGTERM is not yet pending proves the supervisor told before it
acted. Each event that stops the tree is tried: the caller lost, a cancel,
a signal the caller relays, the deadline, a signal to the seed door.

Nor does the group wait on the core: a stop the core will certainly decide
goes to the group before the core is fed (and so before its step and the
walk of ``/proc`` that follows from it). The command
(``fixtures/term_pending.py``) blocks SIGTERM, and the test hook
``fixtures/slow_loop`` (``TETHER_TEST_LOOP_FED``) reads the command's pending
signals each time the loop is about to feed the core: SIGTERM must already be
pending when ``CallerLost`` is fed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    EVENTS_SUFFIX,
    Processes,
    ReadyPipe,
    fixture,
    hooked_env,
    parent_of,
    read_json,
    seed_door_true,
    tether_argv,
    wait_gone,
)


def _command(ready: ReadyPipe, record: Path, result: Path, *markers: str) -> list[str]:
    events = record.with_suffix(EVENTS_SUFFIX)
    return fixture("told_after", str(ready.path), str(events), str(result), *markers)


def _verdict(result: Path, record: Path) -> str:
    log = record.with_suffix(EVENTS_SUFFIX).read_text().splitlines()
    sent = [line for line in map(json.loads, log) if line["event"] == "signal_sent"]
    assert sent, log  # the story is still told, after the fact
    return result.read_text()


@pytest.mark.parametrize(
    ("door", "how", "markers", "reason"),
    [
        ("run", "kill caller", ("lifeline_closed", "CallerLost"), "parent_lost"),
        ("run", "cancel", ("lifeline_request", "CancelRequested"), "cancelled"),
        ("run", "deadline", ('"input": "Tick"',), "deadline_exceeded"),
        ("timeout", "relay", ("lifeline_request", "SignalRequested"), None),
    ],
)
def test_the_group_is_signalled_before_the_log_is_written(  # noqa: PLR0917 - parametrized
    tmp_path: Path,
    processes: Processes,
    ready: ReadyPipe,
    door: str,
    how: str,
    markers: tuple[str, ...],
    reason: str | None,
) -> None:
    record, result = tmp_path / "r.json", tmp_path / "result"
    command = _command(ready, record, result, *markers)
    if door == "run":
        # Long enough for the loop to take the watch first on a loaded machine: a
        # deadline the sentry meets leaves the command no time to say it is ready.
        deadline = ("--deadline", "5") if how == "deadline" else ()
        argv = tether_argv("run", "--record", str(record), *deadline, "--", *command)
    else:
        argv = tether_argv("timeout", "--record", str(record), "60", *command)
    caller = processes.start(argv, stdout=subprocess.DEVNULL)
    (pid,) = ready.ready_pids()
    supervisor = parent_of(pid)
    assert supervisor is not None
    processes.track(pid, supervisor)
    if how == "kill caller":
        caller.kill()
    elif how in ("cancel", "relay"):
        caller.send_signal(signal.SIGTERM)
    assert wait_gone(pid)
    assert wait_gone(supervisor)
    caller.wait(timeout=BOUND)
    assert _verdict(result, record) == "acted first"
    if reason is not None:
        assert read_json(record)["reason"] == reason


def test_the_seed_door_signals_before_it_logs_a_signal_it_received(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record, result = tmp_path / "r.json", tmp_path / "result"
    read_end, write_end = os.pipe()
    command = _command(ready, record, result, "signal_received", "CancelRequested")
    argv = seed_door_true(read_end, record, tuple(command))
    try:
        supervisor = processes.start(argv, pass_fds=(read_end,))
        os.close(read_end)
        processes.track(*ready.ready_pids())
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=BOUND) == 130
    finally:
        os.close(write_end)
    assert _verdict(result, record) == "acted first"
    assert read_json(record)["reason"] == "cancelled"


@pytest.mark.parametrize("door", ["run", "seed"])
def test_the_group_is_signalled_before_the_core_is_fed_the_callers_death(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, door: str
) -> None:
    record, fed = tmp_path / "r.json", tmp_path / "fed"
    running = ReadyPipe(tmp_path / "running.fifo")
    env = hooked_env(
        tmp_path,
        "slow_loop",
        TETHER_TEST_LOOP_RUNNING=str(running.path),
        TETHER_TEST_LOOP_FED=str(fed),
    )
    command = fixture("term_pending", str(ready.path), str(fed))
    if door == "run":
        argv = tether_argv("run", "--record", str(record), "--", *command)
    else:
        argv = fixture("seed_caller", str(record), "--", *command)
    caller = processes.start(argv, env=env, stdout=subprocess.DEVNULL)
    (pid,) = ready.ready_pids()
    supervisor = parent_of(pid)
    assert supervisor is not None
    processes.track(pid, supervisor)
    try:
        assert running.line()[0] == "running"  # the loop has the watch, not the sentry
    finally:
        running.close()
    caller.kill()
    caller.wait(timeout=BOUND)
    assert wait_gone(pid)
    assert wait_gone(supervisor)
    lines = [line.split() for line in fed.read_text().splitlines()]
    fed_events = [event for event, _ in lines]
    # The wake the caller's death caused is the turn that hears it: no turn
    # in between (a stale hand-over from the sentry once made it a Tick).
    assert fed_events[fed_events.index("Launched") + 1] == "CallerLost", lines
    [pending] = [mask for event, mask in lines if event == "CallerLost"]
    assert pending != "gone"
    assert int(pending, 16) & (1 << (signal.SIGTERM - 1)), lines
    data = read_json(record)
    assert data["reason"] == "parent_lost"
    signals = data["signals"]
    assert isinstance(signals, list)
    assert [entry["signal"] for entry in signals] == ["SIGTERM", "SIGCONT"]
    assert data["eval_exit_code"] == -signal.SIGTERM

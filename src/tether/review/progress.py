"""Runs in progress, told from the evidence they already leave: their event logs and ``/proc``.

A record appears when a run ends; its event log appears the moment the
command is launched, with a ``launched`` line naming the supervisor's pid, the
command's pid and group, the label, the deadline and when the run was asked
for. So a log without its record is a run that is either still going or whose
supervisor was lost (SIGKILLed, out of memory, the machine rebooted). No
registry, no daemon: which of the two is read from ``/proc``.

**A pid is never trusted alone.** Pids are reused: the supervisor of a run
lost last week may share its pid with some shell today. A process counts as
the run's only if it is alive (not a zombie) *and* it started no later than
the ``launched`` line was written: the supervisor and the command both exist
before that line, and a process that took over the pid later started after
the original was gone, so after the line. The start time is
``/proc/<pid>/stat``'s field 22, in clock ticks since boot on the boot clock
(which counts suspend); it is brought onto the monotonic clock the log uses
with the boot clock's current lead, which can only make the real process look
earlier, never a newcomer look old enough (short of a suspend between the
newcomer's start and the look, a window of a few milliseconds of pid reuse).
When the launch line carries the supervisor's own start time
(``supervisor_start_ticks``), the ticks are compared exactly instead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, timedelta
from pathlib import Path
from typing import Final

from tether.review._text import _number, _parse_time
from tether.shared.process_start import start_ticks

__all__ = ["LOST", "RUNNING", "in_progress"]

RUNNING: Final = "running"
LOST: Final = "lost"

#: Clock ticks per second, as ``/proc/<pid>/stat`` counts start times.
_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: How much later than the launch line a start time may read and still be the
#: run's own: float rounding only (the kernel rounds start times down).
_SLACK_SECONDS: Final = 0.001


def _boot_lead() -> float:
    """How far the boot clock is ahead of the monotonic one now (time spent suspended)."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)
    except (AttributeError, OSError):
        return 0.0


def alive_since(pid: object, launched_mono: float, exact_ticks: object = None) -> bool:
    """Whether ``pid`` is alive and is the process that existed when the launch line was written."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    ticks = start_ticks(pid)
    if ticks is None:
        return False
    if isinstance(exact_ticks, int) and not isinstance(exact_ticks, bool):
        return ticks == exact_ticks
    started = ticks / _TICKS - _boot_lead()
    return started <= launched_mono + _SLACK_SECONDS


def _command_name(pid: int) -> str | None:
    """The name the running command goes by (``/proc/<pid>/comm``): never its arguments."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            return comm.read(64).decode("utf-8", "replace").strip() or None
    except (OSError, ValueError):
        return None


def _started_at(written: object, seconds_before: float) -> str | None:
    """The wall-clock time ``seconds_before`` the line written at ``written``, as records say it."""
    moment = _parse_time(written)
    if moment is None:
        return None
    try:
        return (
            (moment - timedelta(seconds=seconds_before))
            .astimezone(UTC)
            .strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        )
    except (OverflowError, ValueError):  # a hostile log's times
        return None


def in_progress(
    log_path: Path, events: Sequence[Mapping[str, object]], *, now: float | None = None
) -> dict[str, object] | None:
    """What the log of a run without a record says about it now, or ``None`` if it cannot tell.

    The answer has the record's field names where there is one (``variant``,
    ``command``, ``started_at``, ``supervisor_pid``, ``eval_pid``,
    ``eval_process_group``, ``deadline_seconds``), ``reason`` and ``state``
    (:data:`RUNNING` or :data:`LOST`), and what only a run in progress has:
    ``supervisor_alive``, ``command_alive``, ``elapsed_seconds`` and
    ``deadline_left_seconds`` (``None``: no deadline, or nobody left to keep
    it), the state the supervisor last logged (``last_state``), and
    ``events_path``. ``None`` for a log with no usable ``launched`` line (a
    launch that failed, a log that is not one) or one that says its record
    was written (the record was moved: there is nothing running to show).
    """
    launched = next((e for e in events if e.get("event") == "launched"), None)
    if launched is None or any(e.get("event") == "record_written" for e in events):
        return None
    mono = _number(launched.get("mono"))
    if mono is None:
        return None
    now = time.monotonic() if now is None else now
    asked = _number(launched.get("started_mono"))
    origin = mono if asked is None else asked
    supervisor, pid = launched.get("supervisor_pid"), launched.get("pid")
    supervisor_alive = alive_since(supervisor, mono, launched.get("supervisor_start_ticks"))
    command_alive = alive_since(pid, mono)
    state = RUNNING if supervisor_alive else LOST
    deadline = _number(launched.get("deadline_seconds")) or None
    left = None
    if deadline is not None and state == RUNNING:
        left = max(0.0, origin + deadline - now)
    command = launched.get("command")
    if not isinstance(command, str) and command_alive:
        assert isinstance(pid, int)
        command = _command_name(pid)
    steps = [e.get("state_after") for e in events if e.get("event") == "step"]
    started_at = _started_at(launched.get("ts"), mono - origin)
    return {
        "state": state,
        "reason": state,
        "variant": launched.get("label"),
        "command": command if isinstance(command, str) else None,
        "script": script if isinstance(script := launched.get("script"), str) else None,
        "started_at": started_at,
        "supervisor_pid": supervisor,
        "eval_pid": pid,
        "eval_process_group": launched.get("pgid"),
        "supervisor_alive": supervisor_alive,
        "command_alive": command_alive,
        "deadline_seconds": deadline,
        "deadline_left_seconds": left,
        "elapsed_seconds": max(0.0, now - origin) if state == RUNNING else None,
        "last_state": steps[-1] if steps and isinstance(steps[-1], str) else None,
        "events_path": os.fsdecode(log_path),
    }

"""Runs in progress, told from their event logs and ``/proc`` (docs/operators.md, "Runs with no
record yet").
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

_TICKS: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: How much later than the launch line a start time may read: float rounding only.
_SLACK_SECONDS: Final = 0.001


def _boot_lead() -> float:
    """How far the boot clock is ahead of the monotonic one (time spent suspended)."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)
    except (AttributeError, OSError):
        return 0.0


def alive_since(pid: object, launched_mono: float, exact_ticks: object = None) -> bool:
    """Whether ``pid`` is alive and the process that existed when the launch line was written."""
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
    """The name the command goes by (``/proc/<pid>/comm``): never its arguments."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            return comm.read(64).decode("utf-8", "replace").strip() or None
    except (OSError, ValueError):
        return None


def _started_at(written: object, seconds_before: float) -> str | None:
    """The wall-clock time ``seconds_before`` ``written``, as records write it."""
    moment = _parse_time(written)
    if moment is None:
        return None
    try:
        earlier = moment - timedelta(seconds=seconds_before)
        return earlier.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    except (OverflowError, ValueError):  # a hostile log's times
        return None


def in_progress(
    log_path: Path, events: Sequence[Mapping[str, object]], *, now: float | None = None
) -> dict[str, object] | None:
    """What the log of a run without a record says of it now (the fields: docs/operators.md);
    ``None`` without a usable ``launched`` line, or once the log says its record was written."""
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
    left = max(0.0, origin + deadline - now) if deadline is not None and state == RUNNING else None
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

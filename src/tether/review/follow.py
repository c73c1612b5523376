"""``tether show --follow``: a run's event log, line by line as it is written, until the run
ends; a bounded sleep-poll (docs/operators.md, "Following a run in progress")."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tether.review._text import ReviewError, _number
from tether.review.files import _is_events_name, _open_regular, _parse_event, _record_candidates
from tether.review.progress import alive_since
from tether.shared.paths import events_path_for

#: How long the follower sleeps when the log has nothing new.
POLL_SECONDS: Final = 0.25

_LAST_EVENTS: Final = frozenset({"record_written", "record_failed"})

#: A log with no launch line after this long without growing is a lost run's.
_SILENT_LAUNCH_SECONDS: Final = 10.0

_MAX_LINE_BYTES: Final = 1 << 20


@dataclass
class Followed:
    """How following ended: ``finished``, or ``lost`` (no record, no supervisor); lines skipped."""

    finished: bool = False
    lost: bool = False
    skipped: int = 0


def log_to_follow(path: Path) -> Path:
    return path if _is_events_name(path) else events_path_for(path)


def _record_exists(log: Path, events: list[Mapping[str, object]]) -> bool:
    return any(os.path.isfile(c) and c != log for c in _record_candidates(log, events))


def _lines(fd: int, pending: bytearray) -> Iterator[bytes]:
    """The whole lines readable now; a partial last line stays in ``pending``."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            chunk = b""
        if not chunk:
            return
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            line = bytes(pending[:end])
            del pending[: end + 1]
            yield line
        if len(pending) > _MAX_LINE_BYTES:  # no event is that long: drop it to its newline
            pending.clear()


def follow(
    path: Path,
    emit: Callable[[Mapping[str, object]], None],
    *,
    poll_seconds: float = POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Followed:
    """Hand each event of the run at ``path`` to ``emit`` as it is written; return when it ends."""
    log = log_to_follow(path)
    if not os.path.lexists(log):
        if os.path.lexists(path) and path != log:
            # A record without its log: nothing to follow.
            return Followed(finished=True)
        raise ReviewError(f"{path}: no such run (neither a record nor its event log exists)")
    fd = _open_regular(log, "an event log")
    events: list[Mapping[str, object]] = []
    followed = Followed()
    pending = bytearray()
    last_growth = clock()
    try:
        while True:
            if _take(_lines(fd, pending), emit, events, followed):
                last_growth = clock()
            if followed.finished:
                return followed
            silent = clock() - last_growth > _SILENT_LAUNCH_SECONDS
            if _record_exists(log, events) or _supervisor_gone(events, silent=silent):
                # Once more: what the supervisor wrote before it went.
                _take(_lines(fd, pending), emit, events, followed)
                followed.finished = followed.finished or _record_exists(log, events)
                followed.lost = not followed.finished
                return followed
            sleep(poll_seconds)
    finally:
        os.close(fd)


def _take(
    lines: Iterator[bytes],
    emit: Callable[[Mapping[str, object]], None],
    events: list[Mapping[str, object]],
    followed: Followed,
) -> bool:
    any_line = False
    for line in lines:
        any_line = True
        if not line.strip():
            continue
        event, _why = _parse_event(line)
        if event is None:
            followed.skipped += 1
            continue
        if event.get("event") in ("launched", "launch_failed", "record_written"):
            events.append(event)
        emit(event)
        if event.get("event") in _LAST_EVENTS:
            followed.finished = True
    return any_line


def _supervisor_gone(events: list[Mapping[str, object]], *, silent: bool) -> bool:
    """Whether the launch line's supervisor is gone; without one, whether the log is ``silent``."""
    launched = next((e for e in events if e.get("event") in ("launched", "launch_failed")), None)
    if launched is None:
        return silent
    mono = _number(launched.get("mono"))
    if mono is None:
        return False
    ticks = launched.get("supervisor_start_ticks")
    return not alive_since(launched.get("supervisor_pid"), mono, ticks)


def format_event(event: Mapping[str, object], origin: list[float]) -> str:
    """One event as ``tether show``'s timeline prints it; ``origin`` holds the time 0 once known."""
    from tether.review._text import _safe
    from tether.review.show import _describe

    mono = _number(event.get("mono"))
    if not origin:
        asked = _number(event.get("started_mono"))
        start = asked if asked is not None else mono
        if start is not None:
            origin.append(start)
    at = "?" if mono is None or not origin else f"{mono - origin[0]:+.3f}"
    return f"{at.rjust(9)}  {_safe(event.get('event')).ljust(16)}  {_describe(event)}"

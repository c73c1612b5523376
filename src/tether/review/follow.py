"""``tether show --follow``: a run's event log, line by line as it is written, until the run ends.

As ``tail -f`` and ``journalctl -f`` do, with an end: the follower stops once
the run is over, which it learns from the log itself (the supervisor's last
lines are ``record_written`` or ``record_failed``), from the record appearing
beside the log, or from the supervisor being gone (a lost run: SIGKILLed, out
of memory; told as ``tether ls`` tells it, by pid *and* start time, see
:mod:`tether.review.progress`).

**How it waits.** The standard library has no ``inotify``, and a follower is
one person's terminal, not a supervisor: so it reads what is new, and when
there is nothing, sleeps :data:`POLL_SECONDS` (a quarter of a second) before
looking again — a bounded sleep-poll, about four wake-ups a second while it
follows, none once it ends. A run already finished is printed whole and the
follower ends at once. Lines are read in whole lines only: a line the
supervisor is still writing waits for its newline. The log is opened once and
read by descriptor (a log renamed under it is still followed); a line that is
not an event is skipped, as :func:`tether.review.files.read_events` does.
"""

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

__all__ = ["POLL_SECONDS", "Followed", "follow", "format_event", "log_to_follow"]

#: How long the follower sleeps when the log has nothing new.
POLL_SECONDS: Final = 0.25

#: The supervisor's last lines: after one of them, the run is over.
_LAST_EVENTS: Final = frozenset({"record_written", "record_failed"})

#: A log with no launch line after this long without growing is a lost run's.
_SILENT_LAUNCH_SECONDS: Final = 10.0

#: A line longer than this is no event: it is skipped, not kept.
_MAX_LINE_BYTES: Final = 1 << 20


@dataclass
class Followed:
    """How following ended: ``finished`` (the run ended and says so), ``lost`` (its
    supervisor is gone without a record), and the lines that were not events."""

    finished: bool = False
    lost: bool = False
    skipped: int = 0


def log_to_follow(path: Path) -> Path:
    """The event log of the run at ``path`` (a record or its log); the log need not exist yet."""
    if _is_events_name(path):
        return path
    return events_path_for(path)


def _record_exists(log: Path, events: list[Mapping[str, object]]) -> bool:
    return any(
        os.path.isfile(candidate) and candidate != log
        for candidate in _record_candidates(log, events)
    )


def _lines(fd: int, pending: bytearray) -> Iterator[bytes]:
    """The whole lines readable from ``fd`` now; a partial last line stays in ``pending``."""
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
    """Hand each event of the run at ``path`` to ``emit`` as it is written; return when it ends.

    Raise :class:`ReviewError` if there is no such run: neither its log nor its
    record exists, or the log is not a regular file.
    """
    log = log_to_follow(path)
    if not os.path.lexists(log):
        if os.path.lexists(path) and path != log:
            # A record without its log (a run whose log could not be written): nothing to follow.
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
                # Read once more: what the supervisor wrote before it went is in the file now.
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
    """Hand each event of ``lines`` to ``emit``; return whether there was any line."""
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
    """Whether the supervisor the launch line names is gone; with no launch line, whether the
    log has been ``silent`` too long for a supervisor that is still starting."""
    launched = next((e for e in events if e.get("event") in ("launched", "launch_failed")), None)
    if launched is None:
        return silent
    mono = _number(launched.get("mono"))
    if mono is None:
        return False
    return not alive_since(
        launched.get("supervisor_pid"), mono, launched.get("supervisor_start_ticks")
    )


def format_event(event: Mapping[str, object], origin: list[float]) -> str:
    """One followed event as ``tether show``'s timeline prints it.

    Times count from the launch line's ``started_mono`` (when the run was
    asked for, as the record's do), else from the first line followed;
    ``origin`` holds that time once known.
    """
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

"""Reading one run's files defensively: its record and its event log, whichever exist.

A supervisor that was SIGKILLed leaves a log with no record, perhaps with a
last line cut in half; a record's log may be gone. Whatever parses is kept,
whatever does not is named in a warning, and nothing a file holds can make
the reader hang (a FIFO named ``x.json``) or read without bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tether.review._text import (
    ReviewError,
    _path_text,
    _safe,
)
from tether.shared.paths import EVENTS_SUFFIX, events_path_for
from tether.shared.record_file import RecordError, read_record

#: An event log is a few kilobytes; past this much, the rest is not read (and
#: the operator is told), so that pointing ``show`` at a huge file stays cheap.
_MAX_LOG_BYTES: Final = 64 << 20

_RECORD_PROBLEM_PREFIX: Final = "cannot read the record: "


# -- reading event logs -----------------------------------------------------------


def _open_regular(path: Path, what: str) -> int:
    """Open ``path`` for reading, refusing anything but a regular file (never blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise ReviewError(f"{_path_text(path)}: {error.strerror or error}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ReviewError(f"{_path_text(path)}: {kind}, not {what}")
    return fd


def _read_limited(fd: int) -> tuple[bytes, bool]:
    """Read at most :data:`_MAX_LOG_BYTES` from ``fd``; say whether there was more."""
    chunks: list[bytes] = []
    size = 0
    while size <= _MAX_LOG_BYTES and (chunk := os.read(fd, 1 << 16)):
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    return data[:_MAX_LOG_BYTES], size > _MAX_LOG_BYTES


def _parse_event(line: bytes) -> dict[str, object] | None:
    """One log line as an event (a JSON object with a string ``event``), or ``None``."""
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(value, dict) and isinstance(value.get("event"), str):
        return value
    return None


def read_events(path: Path) -> tuple[list[dict[str, object]], list[str]]:
    """Return the events of the log at ``path`` and warnings about lines that did not parse.

    A last line cut short (a supervisor killed mid-write) and a garbled line
    are skipped with a warning; raise :class:`ReviewError` if the file cannot be
    read or if no line at all is a tether event (it is not an event log).
    """
    fd = _open_regular(path, "an event log")
    try:
        data, cut = _read_limited(fd)
    except OSError as error:
        raise ReviewError(f"{_path_text(path)}: {error.strerror or error}") from None
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    ends_cleanly = lines[-1] == b""
    if ends_cleanly:
        lines.pop()
    events: list[dict[str, object]] = []
    bad: list[int] = []
    for number, line in enumerate(lines, start=1):
        event = _parse_event(line) if line.strip() else None
        if event is not None:
            events.append(event)
        elif line.strip():
            bad.append(number)
    if bad and not events:
        raise ReviewError(f"{_path_text(path)}: not a tether event log (no line is an event)")
    warnings = [
        _line_warning(path, number, number == len(lines) and not ends_cleanly) for number in bad
    ]
    if cut:
        warnings.append(
            f"{_path_text(path)}: longer than {_MAX_LOG_BYTES >> 20} MiB; only the start is shown"
        )
    return events, warnings


def _line_warning(path: Path, number: int, truncated: bool) -> str:
    if truncated:
        return (
            f"{_path_text(path)}: line {number} is cut short (the supervisor was probably "
            "killed while writing it); showing the lines before it"
        )
    return f"{_path_text(path)}: line {number} is not a tether event; skipped"


# -- one run: record and log ---------------------------------------------------------


@dataclass
class RunFiles:
    """What is known about one run: its record and event log, each possibly missing.

    ``record_note`` and ``log_note`` say, for a person, why one of them is
    absent; ``warnings`` are problems found while reading (garbled log lines).
    """

    record_path: Path | None
    record: dict[str, object] | None
    log_path: Path | None
    events: list[dict[str, object]]
    record_note: str | None = None
    log_note: str | None = None
    warnings: list[str] = field(default_factory=list)


def _is_events_name(path: Path) -> bool:
    return path.name.endswith(EVENTS_SUFFIX) and len(path.name) > len(EVENTS_SUFFIX)


def _record_candidates(log_path: Path, events: Sequence[Mapping[str, object]]) -> list[Path]:
    """Where the record of the log at ``log_path`` may be, most likely first.

    ``x.events.jsonl`` belongs to ``x.json`` (or to ``x``, for a record named
    without a suffix); failing those, the path the supervisor said it wrote.
    """
    candidates: list[Path] = []
    if _is_events_name(log_path):
        stem = log_path.name[: -len(EVENTS_SUFFIX)]
        candidates += [log_path.with_name(stem + ".json"), log_path.with_name(stem)]
    for event in events:
        written = event.get("path")
        if event.get("event") == "record_written" and isinstance(written, str) and written:
            candidates.append(Path(written))
    return candidates


def _read_record_quietly(path: Path) -> tuple[dict[str, object] | None, str | None]:
    """The record at ``path``, or ``None`` and why not (``None``: there is no file)."""
    if not os.path.lexists(path):
        return None, None
    try:
        return read_record(path), None
    except RecordError as error:
        return None, str(error)


def _load_from_log(log_path: Path) -> RunFiles:
    events, warnings = read_events(log_path)
    candidates = _record_candidates(log_path, events)
    for candidate in candidates:
        if os.path.isfile(candidate) and candidate.resolve() != log_path.resolve():
            record, problem = _read_record_quietly(candidate)
            if record is not None:
                return RunFiles(candidate, record, log_path, events, warnings=warnings)
            if problem is not None:
                warnings.append(problem)
    expected = candidates[0] if candidates else None
    run = RunFiles(expected, None, log_path, events, warnings=warnings)
    run.record_note = _why_no_record(expected, events)
    return run


def _why_no_record(expected: Path | None, events: Sequence[Mapping[str, object]]) -> str:
    names = [event.get("event") for event in events]
    if "record_failed" in names:
        failed = next(e for e in events if e.get("event") == "record_failed")
        return f"the supervisor could not write the record: {_safe(failed.get('error'))}"
    where = "beside the log" if expected is None else f"at {_path_text(expected)}"
    if "record_written" in names:
        return f"no record {where}, although the log says it was written (moved or deleted?)"
    return (
        f"no record {where}: the supervisor stopped before writing one "
        "(killed, or out of memory?); what it logged is below"
    )


def _load_from_record(path: Path, record: dict[str, object]) -> RunFiles:
    log_path = events_path_for(path)
    if not os.path.lexists(log_path):
        return RunFiles(
            path, record, log_path, [], log_note=f"no event log at {_path_text(log_path)}"
        )
    try:
        events, warnings = read_events(log_path)
    except ReviewError as error:
        return RunFiles(path, record, log_path, [], log_note=str(error))
    return RunFiles(path, record, log_path, events, warnings=warnings)


def load_run(path: Path) -> RunFiles:
    """Load the run that ``path`` (a record or its ``.events.jsonl``) belongs to.

    Raise :class:`ReviewError` if ``path`` is neither a tether record nor a
    tether event log.
    """
    if not os.path.lexists(path):
        raise ReviewError(f"{_path_text(path)}: no such file")
    if os.path.isdir(path):
        raise ReviewError(f"{_path_text(path)}: a directory (tether ls DIR lists its runs)")
    if _is_events_name(path):
        return _load_from_log(path)
    try:
        record = read_record(path)
    except RecordError as error:
        # Perhaps an event log under another name: show it if it is one.
        with contextlib.suppress(ReviewError):
            run = _load_from_log(path)
            if run.events:
                return run
        raise ReviewError(_record_problem(error)) from None
    return _load_from_record(path, record)


def _record_problem(error: RecordError) -> str:
    """A :class:`RecordError` message without its ``cannot read the record:`` preamble."""
    message = str(error)
    return message.removeprefix(_RECORD_PROBLEM_PREFIX)

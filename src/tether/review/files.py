"""One run's files read defensively, within budgets: its record and its event log, whichever
exist (docs/operators.md, "What counts as a record").
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tether.review._text import ReviewError, _path_text, _safe
from tether.review.progress import RUNNING, in_progress
from tether.shared.paths import EVENTS_SUFFIX, events_path_for
from tether.shared.record_file import JSONRefused, RecordError, parse_bounded_json, read_record

#: The budgets: a log's bytes, one line's bytes, the values and keys kept (a real event holds
#: about fifteen: about 100 MiB in all), the lines read, and the bad lines named one by one.
_MAX_LOG_BYTES: Final = 64 << 20
_MAX_LINE_BYTES: Final = 1 << 20
_MAX_LOG_VALUES: Final = 1_000_000
_MAX_LOG_LINES: Final = 100_000
_MAX_LINE_WARNINGS: Final = 10
_CHUNK_BYTES: Final = 1 << 16

#: Why a last line without its newline did not parse: the writer was killed mid-line.
_CUT_SHORT: Final = "cut short"
_RECORD_PROBLEM_PREFIX: Final = "cannot read the record: "


def _open_regular(path: Path, what: str) -> int:
    """Open ``path``, refusing anything but a regular file, checked before opening and after."""
    try:
        if not stat.S_ISREG(mode := os.stat(path).st_mode):
            raise ReviewError(_not_regular(path, mode, what))
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise ReviewError(f"{_path_text(path)}: {_os_problem(error)}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as error:
        os.close(fd)
        raise ReviewError(f"{_path_text(path)}: {_os_problem(error)}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ReviewError(_not_regular(path, mode, what))
    return fd


def _not_regular(path: Path, mode: int, what: str) -> str:
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
    return f"{_path_text(path)}: {kind}, not {what}"


def _os_problem(error: OSError | ValueError) -> str:
    if isinstance(error, OSError):
        return error.strerror or type(error).__name__
    return "not a usable path"


def _parse_event(line: bytes) -> tuple[dict[str, object] | None, str]:
    """One log line as an event (a JSON object with a string ``event``), or why it is not one."""
    try:
        value = parse_bounded_json(line)
    except JSONRefused as refusal:
        return None, str(refusal)
    if isinstance(value, dict) and isinstance(value.get("event"), str):
        return value, ""
    return None, 'no "event" name' if isinstance(value, dict) else "not a JSON object"


def _cost(line: bytes) -> int:
    """How many values and keys the JSON ``line`` holds, counted on its bytes: never too few."""
    return 1 + sum(line.count(mark) for mark in (b",", b":", b"[", b"{"))


@dataclass
class _LogContents:
    events: list[dict[str, object]] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)
    bad_count: int = 0
    values: int = 0
    stopped: str | None = None

    def take(self, number: int, line: bytes | None, *, last: bool) -> None:
        """Keep line ``number`` if it is an event; ``None``: too long to keep."""
        if number > _MAX_LOG_LINES:
            self.stopped = f"longer than {_MAX_LOG_LINES} lines"
            return
        if line is not None and not line.strip():
            return
        if line is None:
            why = f"longer than {_MAX_LINE_BYTES >> 20} MiB"
        else:
            event, why = _parse_event(line)
            if event is not None:
                self._keep(event, _cost(line))
                return
            if last:
                why = _CUT_SHORT
        self.bad_count += 1
        if len(self.bad) < _MAX_LINE_WARNINGS:
            self.bad.append((number, why))

    def _keep(self, event: dict[str, object], size: int) -> None:
        if self.values + size > _MAX_LOG_VALUES:
            self.stopped = f"holds more than {_MAX_LOG_VALUES} values"
            return
        self.values += size
        self.events.append(event)


def _read_log(fd: int) -> _LogContents:
    contents = _LogContents()
    line = bytearray()
    overlong = False  # the line being read is too long: its bytes are dropped
    number, total = 1, 0
    while contents.stopped is None:
        chunk = os.read(fd, min(_CHUNK_BYTES, _MAX_LOG_BYTES - total) or 1)
        if not chunk:
            break
        if total >= _MAX_LOG_BYTES:
            contents.stopped = f"longer than {_MAX_LOG_BYTES >> 20} MiB"
            return contents
        total += len(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) != -1 and contents.stopped is None:
            overlong = overlong or len(line) + end - start > _MAX_LINE_BYTES
            contents.take(number, None if overlong else bytes(line + chunk[start:end]), last=False)
            line.clear()
            overlong = False
            number += 1
            start = end + 1
        if not overlong and len(line) + len(chunk) - start > _MAX_LINE_BYTES:
            overlong = True
            line.clear()
        if not overlong:
            line += chunk[start:]
    if contents.stopped is None and (line or overlong):
        # No newline at the end: a supervisor killed while writing its last line.
        contents.take(number, None if overlong else bytes(line), last=True)
    return contents


def read_events(path: Path) -> tuple[list[dict[str, object]], list[str]]:
    """The events of the log at ``path``, and warnings for the lines skipped;
    :class:`ReviewError` if it cannot be read or no line is an event."""
    fd = _open_regular(path, "an event log")
    try:
        contents = _read_log(fd)
    except OSError as error:
        raise ReviewError(f"{_path_text(path)}: {_os_problem(error)}") from None
    finally:
        os.close(fd)
    if contents.bad_count and not contents.events:
        raise ReviewError(f"{_path_text(path)}: not a tether event log (no line is an event)")
    warnings = [_line_warning(path, number, why) for number, why in contents.bad]
    unnamed = contents.bad_count - len(contents.bad)
    if unnamed:
        warnings.append(
            f"{_path_text(path)}: {unnamed} more line{'s' if unnamed > 1 else ''} "
            "that are not tether events; skipped"
        )
    if contents.stopped is not None:
        warnings.append(f"{_path_text(path)}: {contents.stopped}; only the start is shown")
    return contents.events, warnings


def _line_warning(path: Path, number: int, why: str) -> str:
    if why == _CUT_SHORT:
        return (
            f"{_path_text(path)}: line {number} is cut short (the supervisor was probably "
            "killed while writing it); showing the lines before it"
        )
    return f"{_path_text(path)}: line {number} is not a tether event ({why}); skipped"


@dataclass
class RunFiles:
    """One run's record and event log, each possibly missing (the notes say why, for a person)."""

    record_path: Path | None
    record: dict[str, object] | None
    log_path: Path | None
    events: list[dict[str, object]]
    record_note: str | None = None
    log_note: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: For a log without its record: :func:`tether.review.progress.in_progress`.
    progress: dict[str, object] | None = None


def _is_events_name(path: Path) -> bool:
    return path.name.endswith(EVENTS_SUFFIX) and len(path.name) > len(EVENTS_SUFFIX)


def _record_candidates(log_path: Path, events: Sequence[Mapping[str, object]]) -> list[Path]:
    """Where the log's record may be: ``x.json`` or ``x`` beside it, then the path it logged."""
    candidates: list[Path] = []
    if _is_events_name(log_path):
        stem = log_path.name[: -len(EVENTS_SUFFIX)]
        candidates += [log_path.with_name(stem + ".json"), log_path.with_name(stem)]
    # The last such line counts (a log claiming thousands costs no more than one).
    for event in reversed(events):
        written = event.get("path")
        if event.get("event") == "record_written" and isinstance(written, str) and written:
            candidates.append(Path(written))
            break
    return candidates


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except (OSError, ValueError):
        return False


def _read_record_quietly(path: Path) -> tuple[dict[str, object] | None, str | None]:
    """The record at ``path``, or ``None`` and why not (``None``: no file)."""
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
        if os.path.isfile(candidate) and not _same_file(candidate, log_path):
            record, problem = _read_record_quietly(candidate)
            if record is not None:
                return RunFiles(candidate, record, log_path, events, warnings=warnings)
            if problem is not None:
                warnings.append(problem)
    expected = candidates[0] if candidates else None
    run = RunFiles(expected, None, log_path, events, warnings=warnings)
    run.progress = in_progress(log_path, events)
    if run.progress is None or run.progress["state"] != RUNNING:
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
    """The run ``path`` (a record or its event log) belongs to; :class:`ReviewError` if neither."""
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
    return str(error).removeprefix(_RECORD_PROBLEM_PREFIX)

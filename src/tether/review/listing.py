"""``tether ls``: many runs as a table, newest first, filtered; or as JSON for ``jq``
(docs/operators.md, "tether ls").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final

from tether.core.durations import DurationError, parse_duration
from tether.core.reasons import Reason
from tether.review._text import (
    _CONVERSION_ERRORS,
    ReviewError,
    _brief,
    _cell,
    _instant,
    _int,
    _local,
    _oom_lead,
    _Paint,
    _path_text,
    _safe,
    _seconds_text,
    _time_instant,
    _what_ran,
    describe_unexpected,
)
from tether.review.files import _is_events_name, _record_problem, read_events
from tether.review.progress import LOST, RUNNING, in_progress
from tether.shared.paths import EVENTS_SUFFIX, events_name_for
from tether.shared.record_file import RecordError, read_record


@dataclass
class Listing:
    """What a records directory holds: records (unordered), the files ``skipped`` and why, runs
    ``in_progress`` (their log, :mod:`tether.review.progress`'s word), other logs without record."""

    records: list[tuple[Path, dict[str, object]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    orphan_logs: list[Path] = field(default_factory=list)
    in_progress: list[tuple[Path, dict[str, object]]] = field(default_factory=list)


def _ignored(name: str) -> bool:
    return name.startswith(".") or name.endswith(".tmp")


def scan(directory: Path) -> Listing:
    """Read every record in ``directory`` (not recursively); :class:`ReviewError` if it cannot."""
    try:
        with os.scandir(directory) as found:
            entries = sorted(found, key=lambda entry: entry.name)
    except (OSError, ValueError) as error:
        problem = error.strerror if isinstance(error, OSError) else None
        raise ReviewError(f"{_path_text(directory)}: {problem or error}") from None
    listing = Listing()
    logs: list[Path] = []
    for entry in entries:
        if _ignored(entry.name) or _is_directory(entry):
            continue
        path = Path(entry.path)
        if _is_events_name(path):
            logs.append(path)
            continue
        try:
            listing.records.append((path, read_record(path)))
        except RecordError as error:
            listing.skipped.append(_record_problem(error))
        except Exception as error:  # a bug, not the file's fault: it must not cost the listing
            listing.skipped.append(f"{_path_text(path)}: {describe_unexpected(error)}")
    # The stem as the log's writer takes it (events_name_for): pathlib's differs on 3.14 (``x.``).
    stems = {events_name_for(path.name)[: -len(EVENTS_SUFFIX)] for path, _ in listing.records}
    stems |= {path.name for path, _ in listing.records}
    for log in logs:
        if log.name[: -len(EVENTS_SUFFIX)] not in stems:
            _take_unrecorded(listing, log)
    return listing


def _take_unrecorded(listing: Listing, log: Path) -> None:
    """A log without its record: a run in progress, lost, or (read again) just finished."""
    try:
        events, _warnings = read_events(log)
        found = in_progress(log, events)
    except Exception:  # ReviewError, or a bug (not the file's fault): never the listing's cost
        found = None
    if found is None:
        listing.orphan_logs.append(log)
        return
    if found["state"] != RUNNING:
        # A run that ended after the directory was read has its record now: not lost.
        record_path = _record_path_of(log)
        try:
            listing.records.append((record_path, read_record(record_path)))
            return
        except RecordError:
            pass
    listing.in_progress.append((log, found))


def _record_path_of(log: Path) -> Path:
    return log.with_name(log.name[: -len(EVENTS_SUFFIX)] + ".json")


def _is_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a link loop, for one: read_record names the problem
        return False


@dataclass(frozen=True)
class Filters:
    """Which runs ``tether ls`` shows (``None``: any); ``label`` is a shell pattern."""

    reasons: frozenset[str] | None = None
    since: datetime | None = None
    label: str | None = None
    until: datetime | None = None

    def admit(self, record: Mapping[str, object]) -> bool:
        if self.reasons is not None:
            reason = record.get("reason")
            if not isinstance(reason, str) or reason not in self.reasons:
                return False
        if self.since is not None or self.until is not None:
            started = _time_instant(record.get("started_at"))
            if started is None:
                return False
            if self.since is not None and started < _instant(self.since):
                return False
            if self.until is not None and started > _instant(self.until):
                return False
        if self.label is not None:
            label = record.get("variant")
            return isinstance(label, str) and fnmatchcase(label, self.label)
        return True


#: What ``--reason`` takes: why a run ended, or ``running``/``lost`` for one without a record.
REASON_CHOICES: Final = (*(reason.value for reason in Reason), RUNNING, LOST)


def parse_reasons(values: Iterable[str]) -> frozenset[str] | None:
    """``--reason`` values (repeated, or comma-separated) as a set; ``None`` if none given."""
    wanted = {part.strip() for value in values for part in value.split(",") if part.strip()}
    if not wanted:
        return None
    unknown = sorted(wanted - set(REASON_CHOICES))
    if unknown:
        raise ReviewError(
            f"--reason: unknown reason {', '.join(map(repr, unknown))} "
            f"(one of: {', '.join(REASON_CHOICES)})"
        )
    return frozenset(wanted)


def parse_since(text: str, *, now: datetime | None = None, flag: str = "--since") -> datetime:
    """``--since``/``--until``: a duration ago (``90m``) or an ISO date/time (local if naive)."""
    now = datetime.now(UTC) if now is None else now
    try:
        seconds = parse_duration(text, flag=flag)
    except DurationError:
        pass
    else:
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:  # further back than year 1
            return datetime.min.replace(tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReviewError(
            f"{flag}: invalid value {_brief(text)} (use a duration such as 30m, "
            "12h or 7d, or an ISO date or time such as 2024-05-01 or 2024-05-01T12:00)"
        ) from None
    if moment.utcoffset() is not None:
        return moment
    try:
        return moment.astimezone()
    except _CONVERSION_ERRORS:
        return moment.replace(tzinfo=UTC)


def parse_count(text: str) -> int:
    """``-n``: how many runs at most, a whole number >= 0."""
    stripped = text.strip()
    if stripped.isascii() and stripped.isdigit() and len(stripped) <= 18:
        return int(stripped)
    raise ReviewError(f"-n: not a whole number >= 0: {_brief(text)}")


def select(
    records: Iterable[tuple[Path, dict[str, object]]], filters: Filters
) -> list[tuple[Path, dict[str, object]]]:
    """The records ``filters`` admits, newest first (by ``started_at``; unknown times last)."""

    def newest_first(item: tuple[Path, dict[str, object]]) -> tuple[bool, timedelta, str]:
        started = _time_instant(item[1].get("started_at"))
        return (started is not None, started or timedelta(0), item[0].name)

    admitted = (item for item in records if filters.admit(item[1]))
    return sorted(admitted, key=newest_first, reverse=True)


#: Runs to show, each with its file (a record, or the log of a run in progress).
_Rows = Sequence[tuple[Path, Mapping[str, object]]]

_COLUMNS: Final = ("WHEN", "LABEL", "COMMAND", "REASON", "EXIT", "DURATION", "ESCALATED", "RECORD")
_REASON, _EXIT, _ESCALATED = 3, 4, 6

#: The widest a padded cell gets, and the REASON cell (an OOM kill leads it).
_CELL_WIDTH: Final = 64
_REASON_WIDTH: Final = 96


def _reason_cell(record: Mapping[str, object]) -> str:
    oom = _oom_lead(record)
    reason = _safe(record.get("reason"))
    return reason if oom is None else f"{oom} ({reason})"


def _row(
    path: Path, record: Mapping[str, object], directory: Path | None, *, host: bool = False
) -> list[str]:
    status = _int(record.get("supervisor_exit_code"))
    escalated = record.get("escalated_to_sigkill")
    cells = [
        _local(record.get("started_at")),
        _label_cell(record),
        _what_ran(record.get("command"), record.get("script")),
        _reason_cell(record),
        "?" if status is None else str(status),
        _seconds_text(record.get("elapsed_seconds")),
        {True: "yes", False: "no"}.get(escalated, "?") if isinstance(escalated, bool) else "?",
    ]
    if host:
        cells.append(_safe(record.get("hostname")))
    widths = [_REASON_WIDTH if column == _REASON else _CELL_WIDTH for column in range(len(cells))]
    cut = [_cell(cell, width) for cell, width in zip(cells, widths, strict=True)]
    return [*cut, _path_cell(path, directory)]


def _label_cell(run: Mapping[str, object]) -> str:
    label = run.get("variant")
    return _safe(label) if isinstance(label, str) else "-"


def _path_cell(path: Path, directory: Path | None) -> str:
    """A file directly in ``directory`` by its name alone; any other by its path."""
    return _safe(path.name if directory is not None and path.parent == directory else str(path))


def render_table(rows: _Rows, *, directory: Path | None = None, colour: bool = False) -> str:
    """An aligned table of ``rows`` (in order); a HOST column when they come from several hosts."""
    paint = _Paint(colour)
    host = len({str(record.get("hostname")) for _, record in rows}) > 1
    columns = (*_COLUMNS[:-1], "HOST", _COLUMNS[-1]) if host else _COLUMNS
    cells = [list(columns)] + [_row(path, record, directory, host=host) for path, record in rows]

    def colours(number: int, line: list[str]) -> dict[int, str]:
        record = rows[number - 1][1]
        meaning = paint.meaning(record.get("reason"), _int(record.get("supervisor_exit_code")))
        chosen = {_REASON: meaning, _EXIT: meaning}
        if line[_ESCALATED] == "yes":
            chosen[_ESCALATED] = "33"
        return chosen

    return _aligned(cells, paint, colours)


def _aligned(
    cells: list[list[str]], paint: _Paint, colours: Callable[[int, list[str]], dict[int, str]]
) -> str:
    """``cells`` aligned, the header bold, the cells of each row in ``colours`` (row number,
    cells) coloured; the last column not padded."""
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    lines = []
    for number, line in enumerate(cells):
        padded = [cell.ljust(width) for cell, width in zip(line, widths, strict=True)]
        padded[-1] = line[-1]
        if number == 0:
            padded = [paint.bold(cell) for cell in padded]
        else:
            for column, code in colours(number, line).items():
                padded[column] = paint(line[column], code) + padded[column][len(line[column]) :]
        lines.append("  ".join(padded))
    return "\n".join(lines) + "\n"


_PROGRESS_HEADER = ("STATE", "SINCE", "FOR", "LEFT", "LABEL", "COMMAND", "SUPERVISOR", "PID", "LOG")


def _pid_cell(pid: object, alive: object) -> str:
    shown = _int(pid)
    if shown is None:
        return "?"
    return str(shown) if alive is True else f"{shown} (gone)"


def _left_cell(run: Mapping[str, object]) -> str:
    left = run.get("deadline_left_seconds")
    if run.get("state") != RUNNING:
        return "-"
    if not isinstance(left, int | float) or isinstance(left, bool):
        return "none"
    stopping = run.get("last_state") in ("terminating", "killing")
    return _seconds_text(left) + (" (stopping)" if stopping else "")


def _progress_row(path: Path, run: Mapping[str, object], directory: Path | None) -> list[str]:
    elapsed = run.get("elapsed_seconds")
    cells = [
        _safe(run.get("state")),
        _local(run.get("started_at")),
        "-" if elapsed is None else _seconds_text(elapsed),
        _left_cell(run),
        _label_cell(run),
        _what_ran(run.get("command"), run.get("script")),
        _pid_cell(run.get("supervisor_pid"), run.get("supervisor_alive")),
        _pid_cell(run.get("eval_pid"), run.get("command_alive")),
    ]
    return [_cell(cell, _CELL_WIDTH) for cell in cells] + [_path_cell(path, directory)]


def render_progress_table(
    rows: _Rows, *, directory: Path | None = None, colour: bool = False
) -> str:
    """The runs without a record yet, running or lost, as :func:`render_table` shows records."""
    paint = _Paint(colour)
    cells = [list(_PROGRESS_HEADER)] + [_progress_row(p, run, directory) for p, run in rows]

    def colours(_number: int, line: list[str]) -> dict[int, str]:
        return {0: "32" if line[0] == RUNNING else "1;31"}

    return _aligned(cells, paint, colours)


def rows_as_json(rows: _Rows, in_progress: _Rows = ()) -> str:
    """The runs as a JSON array, those in progress first, each with its ``record_path``."""
    runs = [{**run, "record_path": os.fsdecode(_record_path_of(log))} for log, run in in_progress]
    runs += [{**record, "record_path": os.fsdecode(path)} for path, record in rows]
    return json.dumps(runs, indent=2) + "\n"

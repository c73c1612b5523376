"""``tether ls``: many runs as a table, newest first, filtered; or as JSON for ``jq``.

A records directory collects files that are not records; they are skipped
and named, never fatal: whatever goes wrong with one file (it vanished, it is
a FIFO, a socket, a link into ``/dev``) costs that file, never the listing.
Times are compared as offsets from the epoch, which cannot overflow, so a
record dated year 1 or 9999 sorts and filters like any other. A table cell is
cut to a width, so one record with a megabyte-long label cannot pad every line
of the table to a megabyte. Listing 500 records took about 90 ms from the
command line on the development machine, most of it the interpreter's start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
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
    _Paint,
    _path_text,
    _safe,
    _seconds_text,
    _time_instant,
    describe_unexpected,
)
from tether.review.files import (
    _is_events_name,
    _record_problem,
)
from tether.shared.paths import EVENTS_SUFFIX
from tether.shared.record_file import RecordError, read_record

# -- many runs: ls ----------------------------------------------------------------------


@dataclass
class Listing:
    """What a records directory holds.

    ``records`` are (path, record) pairs in no particular order; ``skipped``
    names each file that is not a tether record, with why; ``orphan_logs``
    are event logs whose record is missing (a supervisor that died).
    """

    records: list[tuple[Path, dict[str, object]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    orphan_logs: list[Path] = field(default_factory=list)


def _ignored(name: str) -> bool:
    """Hidden files (tether's temporary files among them) are never records."""
    return name.startswith(".") or name.endswith(".tmp")


def scan(directory: Path) -> Listing:
    """Read every record in ``directory`` (not recursively).

    Raise :class:`ReviewError` if the directory itself cannot be read; a file
    that cannot is skipped and named in :attr:`Listing.skipped`.
    """
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
    stems = {path.stem for path, _ in listing.records} | {path.name for path, _ in listing.records}
    listing.orphan_logs = [log for log in logs if log.name[: -len(EVENTS_SUFFIX)] not in stems]
    return listing


def _is_directory(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a directory (or a link to one): not entered, not reported."""
    try:
        return entry.is_dir()
    except OSError:  # a link loop, for one: read_record names the problem
        return False


@dataclass(frozen=True)
class Filters:
    """Which runs ``tether ls`` shows: any reason in ``reasons``, started at or after
    ``since``, whose label matches the shell pattern ``label``; ``None`` means any."""

    reasons: frozenset[str] | None = None
    since: datetime | None = None
    label: str | None = None

    def admit(self, record: Mapping[str, object]) -> bool:
        """Whether ``record`` passes every filter."""
        if self.reasons is not None:
            reason = record.get("reason")
            if not isinstance(reason, str) or reason not in self.reasons:
                return False
        if self.since is not None:
            started = _time_instant(record.get("started_at"))
            if started is None or started < _instant(self.since):
                return False
        if self.label is not None:
            label = record.get("variant")
            return isinstance(label, str) and fnmatchcase(label, self.label)
        return True


def parse_reasons(values: Iterable[str]) -> frozenset[str] | None:
    """``--reason`` values (repeated, or comma-separated) as a set; ``None`` if none given.

    Raise :class:`ReviewError` naming the valid reasons for anything else.
    """
    wanted = {part.strip() for value in values for part in value.split(",") if part.strip()}
    if not wanted:
        return None
    known = {reason.value for reason in Reason}
    unknown = sorted(wanted - known)
    if unknown:
        raise ReviewError(
            f"--reason: unknown reason {', '.join(map(repr, unknown))} "
            f"(one of: {', '.join(reason.value for reason in Reason)})"
        )
    return frozenset(wanted)


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """``--since``: a duration (``90m``, ``2d``: within the last that long) or an ISO date/time.

    A date or time without a UTC offset is local time. Raise :class:`ReviewError`
    for anything else.
    """
    now = datetime.now(UTC) if now is None else now
    try:
        seconds = parse_duration(text, flag="--since")
    except DurationError:
        pass
    else:
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:  # further back than year 1: every run is that recent
            return datetime.min.replace(tzinfo=UTC)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReviewError(
            f"--since: invalid value {_brief(text)} (use a duration such as 30m, "
            "12h or 7d, or an ISO date or time such as 2024-05-01 or 2024-05-01T12:00)"
        ) from None
    if moment.utcoffset() is not None:
        return moment
    try:
        return moment.astimezone()
    except _CONVERSION_ERRORS:
        # Local time cannot say it (year 1 west of Greenwich): hours do not matter there.
        return moment.replace(tzinfo=UTC)


def select(
    records: Iterable[tuple[Path, dict[str, object]]], filters: Filters
) -> list[tuple[Path, dict[str, object]]]:
    """The records ``filters`` admits, newest first (by ``started_at``; unknown times last)."""

    def newest_first(item: tuple[Path, dict[str, object]]) -> tuple[bool, timedelta, str]:
        started = _time_instant(item[1].get("started_at"))
        return (started is not None, started or timedelta(0), item[0].name)

    return sorted(
        (item for item in records if filters.admit(item[1])), key=newest_first, reverse=True
    )


_COLUMNS: Final = (
    "WHEN",
    "LABEL",
    "COMMAND",
    "REASON",
    "EXIT",
    "DURATION",
    "ESCALATED",
    "RECORD",
)
_REASON, _EXIT, _ESCALATED = 3, 4, 6

#: The widest a padded cell gets: wider than any time, label or reason tether
#: writes; what a hostile file puts there is cut (``tether show`` has it whole).
_CELL_WIDTH: Final = 64


def _row(
    path: Path, record: Mapping[str, object], directory: Path | None, *, host: bool = False
) -> list[str]:
    label = record.get("variant")
    command = record.get("command")
    status = _int(record.get("supervisor_exit_code"))
    escalated = record.get("escalated_to_sigkill")
    shown_path = path.name if directory is not None and path.parent == directory else str(path)
    cells = [
        _local(record.get("started_at")),
        _safe(label) if isinstance(label, str) else "-",
        _safe(command) if isinstance(command, str) and command else "-",
        _safe(record.get("reason")) + (" (oom)" if record.get("oom_killed") is True else ""),
        "?" if status is None else str(status),
        _seconds_text(record.get("elapsed_seconds")),
        {True: "yes", False: "no"}.get(escalated, "?") if isinstance(escalated, bool) else "?",
    ]
    if host:
        cells.append(_safe(record.get("hostname")))
    return [_cell(cell, _CELL_WIDTH) for cell in cells] + [_safe(shown_path)]


def render_table(
    rows: Sequence[tuple[Path, Mapping[str, object]]],
    *,
    directory: Path | None = None,
    colour: bool = False,
) -> str:
    """An aligned table of ``rows`` (already in order), with a header line.

    Records directly in ``directory`` are named by file name alone. A HOST
    column (the record's ``hostname``) comes before RECORD when the records
    come from more than one host (gathered from a cluster's nodes).
    """
    paint = _Paint(colour)
    host = len({str(record.get("hostname")) for _, record in rows}) > 1
    columns = (*_COLUMNS[:-1], "HOST", _COLUMNS[-1]) if host else _COLUMNS
    cells = [list(columns)] + [_row(path, record, directory, host=host) for path, record in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = []
    for number, line in enumerate(cells):
        padded = [cell.ljust(width) for cell, width in zip(line, widths, strict=True)]
        padded[-1] = line[-1]
        if number == 0:
            padded = [paint.bold(cell) for cell in padded]
        else:
            record = rows[number - 1][1]
            meaning = paint.meaning(record.get("reason"), _int(record.get("supervisor_exit_code")))
            for column in (_REASON, _EXIT):
                padded[column] = paint(line[column], meaning) + " " * (
                    widths[column] - len(line[column])
                )
            if line[_ESCALATED] == "yes":
                padded[_ESCALATED] = paint("yes", "33") + " " * (widths[_ESCALATED] - 3)
        lines.append("  ".join(padded))
    return "\n".join(lines) + "\n"


def rows_as_json(rows: Sequence[tuple[Path, Mapping[str, object]]]) -> str:
    """The records of ``rows`` as a JSON array, each with its ``record_path`` added."""
    return (
        json.dumps(
            [{**record, "record_path": os.fsdecode(path)} for path, record in rows], indent=2
        )
        + "\n"
    )

"""How long the default record directory keeps runs, and the pruning that keeps it so
(docs/operators.md, "How long runs are kept").
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path

from tether.core.numbers import decimal_text, shown, whole_number
from tether.core.values import DeclaredValue
from tether.shared.in_progress import in_progress
from tether.shared.paths import EVENTS_SUFFIX, is_record_name
from tether.shared.paths import PRUNE_MARKER as MARKER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

__all__ = [
    "DEFAULT_KEEP_DAYS",
    "DEFAULT_KEEP_RUNS",
    "MARKER",
    "Pruned",
    "Retention",
    "prune",
    "retention_from",
]

#: The most runs the default directory keeps, unless ``TETHER_KEEP_RUNS`` says otherwise.
DEFAULT_KEEP_RUNS: Final = 10_000
#: The most days a run stays in the default directory, unless ``TETHER_KEEP_DAYS`` says otherwise.
DEFAULT_KEEP_DAYS: Final = 30.0
_STAMP_FORMAT: Final = "%Y%m%dT%H%M%S.%fZ"


class Retention(DeclaredValue):
    """What a directory keeps: at most ``runs`` runs, none older than ``seconds``; ``None``: any."""

    runs: int | None = DEFAULT_KEEP_RUNS
    seconds: float | None = DEFAULT_KEEP_DAYS * 86400


class Pruned(DeclaredValue, kw_only=True):
    """What a pass removed (or, dry, would remove): record names, oldest first, and files."""

    records: tuple[str, ...]
    files: int


def retention_from(environ: Mapping[str, str]) -> tuple[Retention, list[str]]:
    """The retention from ``TETHER_KEEP_RUNS``/``TETHER_KEEP_DAYS``, and what was not a number."""
    problems: list[str] = []
    runs: int | None = DEFAULT_KEEP_RUNS
    days: float | None = DEFAULT_KEEP_DAYS
    raw_runs = environ.get("TETHER_KEEP_RUNS", "").strip()
    if raw_runs:
        number = whole_number(raw_runs)
        if number is not None:
            runs = number or None
        else:
            problems.append(f"TETHER_KEEP_RUNS={shown(raw_runs)} is not a whole number >= 0")
    raw_days = environ.get("TETHER_KEEP_DAYS", "").strip()
    if raw_days:
        try:
            value = float(raw_days) if decimal_text(raw_days) else -1.0
        except ValueError:
            value = -1.0
        if 0 <= value < 1e6:
            days = value or None
        else:
            problems.append(f"TETHER_KEEP_DAYS={shown(raw_days)} is not a number of days >= 0")
    return Retention(runs=runs, seconds=None if days is None else days * 86400), problems


def prune(
    directory: Path, retention: Retention, *, dry_run: bool = False, now: float | None = None
) -> Pruned:
    """Remove the runs ``retention`` does not keep (a file that cannot be removed is skipped)."""
    now = time.time() if now is None else now
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        names = sorted(_record_names(fd), reverse=True)  # newest first
        doomed = set(names[retention.runs :]) if retention.runs is not None else set()
        if retention.seconds is not None:
            cutoff = now - retention.seconds
            # Names start with the UTC start time and sort as it does: compared as text.
            older = _name_at(cutoff)
            doomed.update(
                n for n in names if n not in doomed and n < older and _mtime(fd, n) < cutoff
            )
        removed: list[str] = []
        files = 0
        for name in sorted(doomed):
            if in_progress(fd, _log_name(name)) or not _is_record(directory / name):
                continue  # a run going on under an old record's name, or no record
            if dry_run:
                removed.append(name)
                files += 1 + _is_regular(fd, _log_name(name))
                continue
            gone = _remove(fd, name)
            if gone:
                removed.append(name)
                files += gone
        if not dry_run:
            _touch_marker(fd)
        return Pruned(records=tuple(removed), files=files)
    finally:
        os.close(fd)


def _record_names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [
            e.name for e in entries if is_record_name(e.name) and e.is_file(follow_symlinks=False)
        ]


def _name_at(moment: float) -> str:
    """The start of a record name for a run started at ``moment`` (epoch seconds)."""
    try:
        return datetime.fromtimestamp(moment, UTC).strftime(_STAMP_FORMAT)
    except (OverflowError, OSError, ValueError):  # before year 1: nothing is that old
        return ""


def _mtime(fd: int, name: str) -> float:
    """When the record was written: a run that started long ago may have just ended."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False).st_mtime
    except OSError:
        return float("inf")


def _is_record(path: Path) -> bool:
    from tether.shared.record_file import RecordError, read_record

    try:
        read_record(path)
    except (RecordError, OSError):
        return False
    return True


def _log_name(name: str) -> str:
    return name.removesuffix(".json") + EVENTS_SUFFIX


def _is_regular(fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _remove(fd: int, name: str) -> int:
    """Remove the run's event log, then its record (both regular files); return how many went."""
    gone = 0
    for file in (_log_name(name), name):
        if not _is_regular(fd, file):
            continue
        try:
            os.unlink(file, dir_fd=fd)
        except OSError:
            if file == name:
                return gone
            continue
        gone += 1
    return gone


def _touch_marker(fd: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    with contextlib.suppress(OSError):
        marker = os.open(MARKER, flags, 0o600, dir_fd=fd)
        try:
            os.utime(marker)
        finally:
            os.close(marker)

"""Which run ``tether show TARGET`` means: a path, a name in the records directory, a label, or
``--last``, tried in that order (docs/operators.md, "tether show").
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.review._text import ReviewError, _path_text, _safe
from tether.shared.paths import EVENTS_SUFFIX, events_name_for
from tether.shared.record_file import RecordError, read_record


def find_run(target: str, directory: Path | None) -> tuple[Path, list[str]]:
    """The record or event log ``target`` names, and warnings; ``directory`` ``None``: no home."""
    if os.path.lexists(target):
        return Path(target), []
    if directory is None:
        raise ReviewError(f"{_safe(target)}: no such file")
    if _is_name(target):
        # A run in progress has only its log: its record's name finds the log.
        log = target if target.endswith(EVENTS_SUFFIX) else events_name_for(target)
        for name in (target, f"{target}.json", log):
            candidate = directory / name
            if os.path.lexists(candidate):
                return candidate, []
    return _by_label(target, directory)


def find_last(directory: Path) -> Path:
    """The newest record in ``directory`` by name; :class:`ReviewError` if there is none."""
    for name in sorted(_record_names(directory), reverse=True):
        path = directory / name
        try:
            read_record(path)
        except RecordError:
            continue
        return path
    raise ReviewError(f"no runs recorded in {_path_text(directory)}")


def find_newest(directory: Path) -> Path:
    """The newest run in ``directory`` by name, finished or not: its record or its event log."""
    logs = _names(directory, EVENTS_SUFFIX, missing_ok=False)
    return directory / max(logs) if logs else find_last(directory)


def _is_name(target: str) -> bool:
    return bool(target) and "/" not in target and target not in (".", "..")


def _record_names(directory: Path) -> list[str]:
    return _names(directory, ".json", missing_ok=True)


def _names(directory: Path, suffix: str, *, missing_ok: bool) -> list[str]:
    """The regular files in ``directory`` named ``*suffix``, hidden ones aside."""
    try:
        with os.scandir(directory) as entries:
            return [
                entry.name
                for entry in entries
                if entry.name.endswith(suffix)
                and not entry.name.startswith(".")
                and entry.is_file(follow_symlinks=False)
            ]
    except (OSError, ValueError) as error:
        if missing_ok and isinstance(error, FileNotFoundError):
            return []
        problem = error.strerror if isinstance(error, OSError) else None
        raise ReviewError(f"{_path_text(directory)}: {problem or error}") from None


def _unrecorded_with_label(label: str, directory: Path) -> list[tuple[str, Path]]:
    """The event logs without a record whose ``launched`` line has ``label`` (runs in progress)."""
    from tether.review.files import read_events

    found: list[tuple[str, Path]] = []
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if e.name.endswith(EVENTS_SUFFIX)]
    except (OSError, ValueError):
        return []
    for name in names:
        record = directory / (name[: -len(EVENTS_SUFFIX)] + ".json")
        if name.startswith(".") or os.path.lexists(record):
            continue
        try:
            events, _ = read_events(directory / name)
        except ReviewError:
            continue
        launched = next((e for e in events if e.get("event") == "launched"), None)
        if launched is not None and launched.get("label") == label:
            found.append((name, directory / name))
    return found


def _by_label(label: str, directory: Path) -> tuple[Path, list[str]]:
    matches: list[tuple[str, Path]] = []
    for name in _record_names(directory):
        if name.endswith(EVENTS_SUFFIX):
            continue
        path = directory / name
        try:
            record = read_record(path)
        except RecordError:
            continue
        if record.get("variant") == label:
            started = record.get("started_at")
            matches.append((started if isinstance(started, str) else "", path))
    if not matches:
        matches = _unrecorded_with_label(label, directory)
    if not matches:
        raise ReviewError(
            f"{_safe(label)}: no such file, and no run of that name or label in "
            f"{_path_text(directory)} (tether ls lists them)"
        )
    matches.sort(reverse=True)
    warnings = []
    if len(matches) > 1:
        warnings.append(
            f"{len(matches)} runs are labelled {_safe(label)!r}; showing the newest "
            f"(tether ls --label {_safe(label)} lists them all)"
        )
    return matches[0][1], warnings

"""Finding the run ``tether show`` is asked about: by path, by name, by label, or the last one.

An operator rarely has the record's full path at hand. ``tether ls`` prints a
record's *name*; a script knows the *label* it gave (``--label nightly``); a
person who just ran something wants *the last run*. So ``tether show TARGET``
takes any of them, tried in this order, so that nothing the operator can
see on disk is ever shadowed:

1. a path that exists (relative to the working directory, as any command);
2. a name in the records directory (default: where ``tether run`` writes),
   with or without ``.json``, or the ``.events.jsonl`` beside it: it resolves
   from any directory, as ``tether ls`` promised;
3. a label: the newest run in the records directory with exactly that label
   (``variant``), with a warning when there are several; failing a record, a
   run still in progress (an event log without its record) with that label.

``--last`` is the newest run in the records directory by its name, which
starts with the UTC start time (:mod:`tether.shared.paths`), so it costs one
directory listing and reading one record, not reading them all.

Nothing here follows a name out of the records directory: a name with a
``/`` is a path, and ``..`` is not a name.
"""

from __future__ import annotations

import os
from pathlib import Path

from tether.review._text import ReviewError, _path_text, _safe
from tether.shared.paths import EVENTS_SUFFIX, events_name_for
from tether.shared.record_file import RecordError, read_record

__all__ = ["find_last", "find_newest", "find_run"]


def find_run(target: str, directory: Path | None) -> tuple[Path, list[str]]:
    """The record or event log ``target`` names, and warnings to print; see the module.

    ``directory`` is the records directory (``None``: there is none, no home).
    Raise :class:`ReviewError` if nothing matches.
    """
    if os.path.lexists(target):
        return Path(target), []
    if directory is None:
        raise ReviewError(f"{_safe(target)}: no such file")
    if _is_name(target):
        # A run in progress has its log and no record yet: its record's name finds the log.
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
    """The newest run in ``directory`` by name, finished or not: its record, or, for a run in
    progress, its event log. :class:`ReviewError` if there is none."""
    try:
        with os.scandir(directory) as entries:
            logs = [
                entry.name
                for entry in entries
                if entry.name.endswith(EVENTS_SUFFIX)
                and not entry.name.startswith(".")
                and entry.is_file(follow_symlinks=False)
            ]
    except (OSError, ValueError) as error:
        problem = error.strerror if isinstance(error, OSError) else None
        raise ReviewError(f"{_path_text(directory)}: {problem or error}") from None
    if not logs:
        return find_last(directory)
    return directory / max(logs)


def _is_name(target: str) -> bool:
    return bool(target) and "/" not in target and target not in (".", "..")


def _record_names(directory: Path) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return [
                entry.name
                for entry in entries
                if entry.name.endswith(".json")
                and not entry.name.startswith(".")
                and entry.is_file(follow_symlinks=False)
            ]
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        problem = error.strerror if isinstance(error, OSError) else None
        raise ReviewError(f"{_path_text(directory)}: {problem or error}") from None


def _unrecorded_with_label(label: str, directory: Path) -> list[tuple[str, Path]]:
    """The event logs without a record whose ``launched`` line has ``label``: runs in
    progress (or lost), found by label as ``tether ls`` shows them; by name, newest last."""
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

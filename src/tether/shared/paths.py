"""Where records and their event logs live by default, and how they are named.

Every door that writes records by default (``tether run``, ``tether timeout``,
the Python API) writes them to the same place, so that ``tether ls`` finds
them all: ``$XDG_STATE_HOME/tether/runs/`` (``~/.local/state/tether/runs/``
when the variable is unset), which is what the XDG base directory
specification sets aside for state worth keeping but not worth backing up.

A name starts with the UTC time down to the microsecond, so a directory
listing sorts by start time, and ends with random hex, so two runs started in
the same microsecond (or on two hosts sharing a directory) cannot collide.

Caller side: standard library only.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "EVENTS_SUFFIX",
    "default_records_dir",
    "events_path_for",
    "new_record_name",
    "new_record_path",
]

#: The event log's name is the record's stem with this suffix.
EVENTS_SUFFIX = ".events.jsonl"


def default_records_dir() -> Path:
    """``$XDG_STATE_HOME/tether/runs``, or ``~/.local/state/tether/runs``.

    A relative ``XDG_STATE_HOME`` is ignored, as the XDG specification says:
    it would put records wherever the caller happens to be. For the same
    reason the home directory must be an absolute path: ``HOME`` if it is set,
    else the user's entry in the password database. Without one (``HOME``
    empty or relative, or unset for a user the database does not know, as in a
    container run under a bare uid), there is no default directory, and
    :class:`~tether.shared.record_file.RecordError` says so: the records would
    otherwise land in ``./~/.local/state`` or ``/.local/state``.

    The home must also exist: tether makes ``.local/state/tether/runs`` inside
    a home, never the home itself. ``HOME=/nonexistent`` (the ``nobody``
    user's, and many service accounts') would otherwise have root create
    ``/nonexistent/.local/state``. An ``XDG_STATE_HOME`` that is set is the
    user's explicit choice, and is made if missing, as the specification asks.
    """
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(_home(), ".local", "state")
    return Path(state) / "tether" / "runs"


def _home() -> str:
    """The user's home directory, an absolute path; :class:`RecordError` if there is none."""
    home = os.environ.get("HOME")
    if home is None:
        home = os.path.expanduser("~")  # the password database's, or "~" unchanged
    if not os.path.isabs(home):
        from tether.shared.record_file import RecordError

        raise RecordError(
            "no default directory for records: neither XDG_STATE_HOME nor HOME is an absolute "
            "path (set one of them, or name the record's path or directory)",
            path=Path(home),
        )
    if not os.path.isdir(home):
        from tether.shared.record_file import RecordError

        raise RecordError(
            f"no default directory for records: the home directory {home!r} does not exist",
            path=Path(home),
        )
    return home


def new_record_name() -> str:
    """A record file name that sorts by time and cannot collide."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{stamp}-{os.urandom(4).hex()}.json"


def new_record_path() -> Path:
    """A fresh record path in the default directory."""
    return default_records_dir() / new_record_name()


def events_path_for(record_path: Path) -> Path:
    """Where the event log of the record at ``record_path`` lives.

    ``runs/abc.json`` -> ``runs/abc.events.jsonl``: beside the record, so the two
    travel together, and named after it, so either one finds the other.
    """
    return record_path.with_name(record_path.stem + EVENTS_SUFFIX)

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
    it would put records wherever the caller happens to be.
    """
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "tether" / "runs"


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

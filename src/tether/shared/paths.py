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
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "EVENTS_SUFFIX",
    "PRUNE_MARKER",
    "default_records_dir",
    "events_name_for",
    "events_path_for",
    "is_record_name",
    "maybe_prune",
    "new_record_name",
    "new_record_path",
    "new_record_path_text",
    "normal_path",
    "parent_and_name",
    "records_dir",
    "with_name",
]

#: The event log's name is the record's stem with this suffix.
EVENTS_SUFFIX = ".events.jsonl"

#: The file in the default directory whose modification time is the last pruning's.
PRUNE_MARKER = ".pruned"
#: A pruning pass at most this often, unless chance calls for one.
_PRUNE_INTERVAL_SECONDS = 3600.0
#: The chance of a pass at any run, one in this many (256 is a multiple: a fair draw).
_PRUNE_ONE_IN = 64


def default_records_dir() -> Path:
    """:func:`records_dir` as a :class:`~pathlib.Path`."""
    from pathlib import Path

    return Path(records_dir())


def records_dir() -> str:
    """``$XDG_STATE_HOME/tether/runs``, or ``~/.local/state/tether/runs``, as a normal path.

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
    return normal_path(os.path.join(state, "tether", "runs"))


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
            path=home,
        )
    if not os.path.isdir(home):
        from tether.shared.record_file import RecordError

        raise RecordError(
            f"no default directory for records: the home directory {home!r} does not exist",
            path=home,
        )
    return home


def new_record_name() -> str:
    """A record file name that sorts by time and cannot collide.

    The time by :mod:`time`, not :mod:`datetime`: every run that keeps a
    record names it before its command is launched, and ``datetime`` would
    cost that path milliseconds to import.
    """
    seconds, microseconds = divmod(time.time_ns() // 1000, 1_000_000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds))
    return f"{stamp}.{microseconds:06d}Z-{os.urandom(4).hex()}.json"


def new_record_path() -> Path:
    """A fresh record path in the default directory."""
    from pathlib import Path

    return Path(new_record_path_text())


def new_record_path_text() -> str:
    """A fresh record path in the default directory, as a string (no ``pathlib`` loaded)."""
    return f"{records_dir()}/{new_record_name()}"


def events_path_for(record_path: Path) -> Path:
    """Where the event log of the record at ``record_path`` lives.

    ``runs/abc.json`` -> ``runs/abc.events.jsonl``: beside the record, so the two
    travel together, and named after it, so either one finds the other.
    """
    return record_path.with_name(events_name_for(record_path.name))


def events_name_for(record_name: str) -> str:
    """The event log's file name for the record named ``record_name`` (its stem, as pathlib
    took it up to Python 3.13, and :data:`EVENTS_SUFFIX`).

    The same on every Python: a final dot is no suffix (``x.`` -> ``x..events.jsonl``),
    leading dots are (``..a`` -> ``..events.jsonl``). 3.14's pathlib reads both the
    other way, and a log's name must not change with the Python that writes or looks
    for it.
    """
    dot = record_name.rfind(".")
    stem = record_name[:dot] if 0 < dot < len(record_name) - 1 else record_name
    return stem + EVENTS_SUFFIX


def _root_and_parts(text: str) -> tuple[str, list[str]]:
    """``text``'s root (``""``, ``"/"`` or ``"//"``) and its names, as pathlib splits a path.

    POSIX lets exactly two leading slashes mean something else than one, so
    pathlib keeps them; empty names and ``.`` go, ``..`` stays.
    """
    root = ""
    if text.startswith("/"):
        stripped = text.lstrip("/")
        root = "//" if len(text) - len(stripped) == 2 else "/"
        text = stripped
    return root, [name for name in text.split("/") if name not in ("", ".")]


def normal_path(text: str) -> str:
    """``str(pathlib.Path(text))``, without loading :mod:`pathlib`."""
    root, parts = _root_and_parts(text)
    return root + "/".join(parts) or "."


def parent_and_name(text: str) -> tuple[str, str]:
    """``text``'s parent and name as :mod:`pathlib` gives them (``Path(text).parent``,
    ``.name``), as strings."""
    root, parts = _root_and_parts(text)
    if not parts:
        return root or ".", ""
    return root + "/".join(parts[:-1]) or ".", parts[-1]


def with_name(text: str, name: str) -> str:
    """``str(pathlib.Path(text).with_name(name))`` for a ``text`` that has a name."""
    root, parts = _root_and_parts(text)
    return root + "/".join([*parts[:-1], name])


def is_record_name(name: str) -> bool:
    """Whether :func:`new_record_name` could have given ``name``.

    ``YYYYmmddTHHMMSS.ffffffZ-xxxxxxxx.json``, ``x`` a lowercase hex digit.

    By hand rather than by a regular expression, which would cost every run
    milliseconds to compile.
    """
    if len(name) != 37 or not name.endswith(".json"):
        return False
    stamp, dash, token = name[:23], name[23], name[24:32]
    digits = stamp[:8] + stamp[9:15] + stamp[16:22]
    return (
        (stamp[8], stamp[15], stamp[22], dash) == ("T", ".", "Z", "-")
        and digits.isascii()
        and digits.isdigit()
        and all(char in "0123456789abcdef" for char in token)
    )


def maybe_prune(directory: str | Path) -> None:
    """Prune the default ``directory`` if a pass is due (:mod:`tether.shared.retention`).

    What every run that writes there pays: one ``stat`` of the marker and a
    random byte. The pass itself, and the module that does it, only when due
    (an hour since the last, or a 1-in-64 chance). Never raises: pruning is
    housekeeping, never a reason to fail a run.
    """
    try:
        if os.urandom(1)[0] % _PRUNE_ONE_IN != 0:
            try:
                marker = os.path.join(directory, PRUNE_MARKER)
                last = os.stat(marker, follow_symlinks=False).st_mtime
            except FileNotFoundError:
                last = None
            if last is not None and 0 <= time.time() - last < _PRUNE_INTERVAL_SECONDS:
                return
        from pathlib import Path

        from tether.shared.retention import prune, retention_from

        retention, _problems = retention_from(os.environ)
        prune(Path(directory), retention)
    except Exception:  # noqa: S110 - see the docstring
        pass

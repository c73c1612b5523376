"""Where records and their event logs live by default, and how they are named (docs/cli.md,
"Records"); paths handled as strings, read as :mod:`pathlib` reads them.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

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
    """``$XDG_STATE_HOME/tether/runs``, or ``~/.local/state/tether/runs`` (docs/cli.md)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(_home(), ".local", "state")
    return normal_path(os.path.join(state, "tether", "runs"))


def _home() -> str:
    """The user's home, absolute and existing (never made); :class:`RecordError` if none."""
    home = os.environ.get("HOME")
    if home is None:
        home = os.path.expanduser("~")  # the password database's, or "~" unchanged
    if os.path.isabs(home) and os.path.isdir(home):
        return home
    from tether.shared.record_file import RecordError

    problem = f"the home directory {home!r} does not exist"
    if not os.path.isabs(home):
        problem = "neither XDG_STATE_HOME nor HOME is an absolute path (set one of them, or name "
        problem += "the record's path or directory)"
    raise RecordError(f"no default directory for records: {problem}", path=home)


def new_record_name() -> str:
    """A record file name that sorts by time and cannot collide (by :mod:`time`, not datetime)."""
    seconds, microseconds = divmod(time.time_ns() // 1000, 1_000_000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds))
    return f"{stamp}.{microseconds:06d}Z-{os.urandom(4).hex()}.json"


def new_record_path() -> Path:
    """A fresh record path in the default directory."""
    from pathlib import Path

    return Path(new_record_path_text())


def new_record_path_text() -> str:
    return f"{records_dir()}/{new_record_name()}"


def events_path_for(record_path: Path) -> Path:
    """``runs/abc.json`` -> ``runs/abc.events.jsonl``."""
    return record_path.with_name(events_name_for(record_path.name))


def events_name_for(record_name: str) -> str:
    """The record's stem as pathlib took it up to 3.13 (on every Python), and the suffix."""
    dot = record_name.rfind(".")
    stem = record_name[:dot] if 0 < dot < len(record_name) - 1 else record_name
    return stem + EVENTS_SUFFIX


def _root_and_parts(text: str) -> tuple[str, list[str]]:
    """``text``'s root (``""``, ``"/"`` or ``"//"``) and its names, as pathlib splits a path."""
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
    """``Path(text).parent`` and ``.name``, as strings."""
    root, parts = _root_and_parts(text)
    if not parts:
        return root or ".", ""
    return root + "/".join(parts[:-1]) or ".", parts[-1]


def with_name(text: str, name: str) -> str:
    """``str(pathlib.Path(text).with_name(name))`` for a ``text`` that has a name."""
    root, parts = _root_and_parts(text)
    return root + "/".join([*parts[:-1], name])


def is_record_name(name: str) -> bool:
    """Whether :func:`new_record_name` could have given ``name`` (by hand: no ``re``)."""
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
    """Prune the default ``directory`` if a pass is due (docs/operators.md); never raises."""
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
    except Exception:  # noqa: S110 - housekeeping never fails a run
        pass

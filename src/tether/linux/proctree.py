"""Finding a process's descendants through ``/proc``.

``/proc/<pid>/task/<tid>/children`` lists the children of each thread. Walking
it down from the supervisor finds every process the command started, wherever
it moved its process group or session, because the supervisor is a subreaper:
an orphan is re-parented to it and so stays in the walk.

The walk is a snapshot: processes may be born or die while it runs. Callers
treat its answer as "at least these, at that moment" and repeat it when the
tree may have changed (after every SIGCHLD while stopping).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "ProcStat",
    "children",
    "descendants",
    "group_has_members",
    "parent_of",
    "stat_of",
    "state_of",
]


def children(pid: int) -> list[int]:
    """Return the children of ``pid`` (all its threads), or ``[]`` if it is gone."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found.extend(int(word) for word in handle.read().split())
        except OSError:
            continue
    return found


def descendants(root: int) -> Iterator[tuple[int, int]]:
    """Yield ``(pid, parent)`` for every descendant of ``root``, parents before children."""
    stack = [root]
    seen = {root}
    while stack:
        parent = stack.pop()
        for pid in children(parent):
            if pid not in seen:
                seen.add(pid)
                stack.append(pid)
                yield pid, parent


class ProcStat(NamedTuple):
    """The few fields of ``/proc/<pid>/stat`` tether needs."""

    state: str
    parent: int
    pgid: int


def stat_of(pid: int) -> ProcStat | None:
    """Return the state, parent and process group of ``pid``, ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain ") ".
    fields = raw[raw.rindex(")") + 2 :].split()
    return ProcStat(fields[0], int(fields[1]), int(fields[2]))


def state_of(pid: int) -> str | None:
    """Return the one-letter state of ``pid`` (``R``, ``S``, ``Z``...), ``None`` if gone."""
    stat = stat_of(pid)
    return None if stat is None else stat.state


def parent_of(pid: int) -> int | None:
    """Return the parent pid of ``pid``, ``None`` if gone."""
    stat = stat_of(pid)
    return None if stat is None else stat.parent


def group_has_members(pgid: int) -> bool:
    """Whether any live process (not a zombie) is in process group ``pgid``.

    A group id cannot be reused while any member is alive, so a ``killpg``
    sent after this said yes reaches that group and no other.
    """
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = stat_of(int(name))
            if stat is not None and stat.pgid == pgid and stat.state != "Z":
                return True
    return False

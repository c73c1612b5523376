"""Finding a process's descendants through ``/proc/<pid>/task/<tid>/children``.

A snapshot, repeated when the tree may have changed; gone is gone, any other failure is raised
(docs/containment.md, "Rung 2: the subreaper sweep").
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final

__all__ = [
    "ProcStat",
    "children",
    "descendants",
    "group_has_members",
    "parent_of",
    "read_file",
    "stat_of",
    "state_of",
]

#: What reading a file of ``/proc/<pid>`` fails with once that process is gone.
_GONE: Final = frozenset({errno.ENOENT, errno.ESRCH})


def _gone(error: OSError) -> bool:
    return error.errno in _GONE


def read_file(path: str) -> bytes:
    """The whole of a small file (``/proc``, a cgroup's), without a file object: four system
    calls where ``open()`` makes nine, and no buffer or decoder; :class:`OSError` as it fails."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def children(pid: int) -> list[int]:
    """The children of ``pid`` (all its threads), ``[]`` if it is gone; :class:`OSError`
    otherwise."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError as error:
        if _gone(error):
            return found
        raise
    for tid in tasks:
        try:
            listed = read_file(f"/proc/{pid}/task/{tid}/children")
            found.extend(int(word) for word in listed.split())
        except OSError as error:
            if not _gone(error):
                raise
    return found


def descendants(root: int) -> Iterator[tuple[int, int]]:
    """``(pid, parent)`` for every descendant of ``root``, parents first; :class:`OSError`, never a
    skip."""
    stack = [root]
    seen = {root}
    while stack:
        parent = stack.pop()
        for pid in children(parent):
            if pid not in seen:
                seen.add(pid)
                stack.append(pid)
                yield pid, parent


class ProcStat(tuple[str, int, int, str]):
    """The few fields of ``/proc/<pid>/stat`` tether needs: a named tuple, without ``typing``."""

    __slots__ = ()

    def __new__(cls, state: str, parent: int, pgid: int, name: str = "") -> ProcStat:
        return super().__new__(cls, (state, parent, pgid, name))

    @property
    def state(self) -> str:
        """The one-letter state (``R``, ``S``, ``Z``...)."""
        return self[0]

    @property
    def parent(self) -> int:
        """The parent's pid."""
        return self[1]

    @property
    def pgid(self) -> int:
        """The process group."""
        return self[2]

    @property
    def name(self) -> str:
        """The command name (``comm``), as ``ps`` shows it."""
        return self[3]


def stat_of(pid: int) -> ProcStat | None:
    """The state, parent and group of ``pid``, ``None`` if gone; :class:`OSError` otherwise."""
    try:
        raw = read_file(f"/proc/{pid}/stat").decode("ascii", "replace")
    except OSError as error:
        if _gone(error):
            return None
        raise
    # The command name is in parentheses and may itself contain ") ".
    fields = raw[raw.rindex(")") + 2 :].split()
    name = raw[raw.find("(") + 1 : raw.rindex(")")]
    return ProcStat(fields[0], int(fields[1]), int(fields[2]), name)


def state_of(pid: int) -> str | None:
    """Return the one-letter state of ``pid`` (``R``, ``S``, ``Z``...), ``None`` if gone."""
    stat = stat_of(pid)
    return None if stat is None else stat.state


def parent_of(pid: int) -> int | None:
    """Return the parent pid of ``pid``, ``None`` if gone."""
    stat = stat_of(pid)
    return None if stat is None else stat.parent


def group_has_members(pgid: int) -> bool:
    """Whether a live process is in group ``pgid`` (then its id cannot be reused); unreadable:
    no."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = stat_of(int(name))
            except OSError:
                continue
            if stat is not None and stat.pgid == pgid and stat.state != "Z":
                return True
    return False

"""Whether a run's tree did anything since the last look: what feeds the core's idle bound.

A look reads the tree's CPU time (the cgroup's, and ``utime + stime`` over the walk), its I/O
(``/proc/<pid>/io``) and which processes it holds; any change is
:class:`~tether.core.events.ActivitySeen`, and what cannot be read counts as nothing
(docs/architecture.md, "The idle bound").
"""

from __future__ import annotations

import contextlib
import os

from tether.linux import proctree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from tether.supervisor.process_tree import ProcessTree

__all__ = ["SAMPLE_SECONDS", "ActivityProbe"]

#: The shortest time between two looks at the tree: nothing polls faster while watching.
SAMPLE_SECONDS: Final = 1.0


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def _cpu_ticks(pid: int) -> int | None:
    """``utime + stime`` of ``pid`` in clock ticks (after the ``(comm)``, which may hold spaces)."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[11]) + int(fields[12])
    except (IndexError, ValueError):
        return None


def _io(pid: int) -> int | None:
    """``rchar + wchar + syscr + syscw`` of ``pid``: any read or write it completed moves it."""
    raw = _read(f"/proc/{pid}/io")
    if raw is None:
        return None
    total = 0
    for line in raw.splitlines():
        name, _, value = line.partition(b":")
        if name in (b"rchar", b"wchar", b"syscr", b"syscw"):
            try:
                total += int(value)
            except ValueError:
                return None
    return total


def _cgroup_cpu(tree: ProcessTree) -> object:
    """The run's cgroup's CPU time, where it has one that counts it (``None`` otherwise)."""
    cgroup = tree.cgroup
    if cgroup is None:
        return None
    try:
        return cgroup.usage().get("cpu_seconds")
    except (OSError, ValueError):
        return None


class ActivityProbe:
    """Looks at one run's tree; :meth:`changed` says whether it did anything since the last look."""

    def __init__(self, tree: ProcessTree) -> None:
        self.tree = tree
        self.last: object = None

    def look(self) -> object:
        """What the tree has done so far: its pids, CPU time and I/O, all as one value."""
        tree = self.tree
        pids = {tree.leader}
        with contextlib.suppress(OSError):
            pids.update(pid for pid, _parent in proctree.descendants(os.getpid()))
        per_process = tuple((pid, _cpu_ticks(pid), _io(pid)) for pid in sorted(pids))
        return (_cgroup_cpu(tree), per_process)

    def changed(self) -> bool:
        """Look again; whether anything differs from the last look (the first look: no)."""
        seen = self.look()
        first = self.last is None
        moved = seen != self.last
        self.last = seen
        return moved and not first

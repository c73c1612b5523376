"""Whether a run's tree did anything since the last look: what feeds the core's idle bound.

Only a run with an ``idle`` bound is looked at, and at most once a second
(:data:`SAMPLE_SECONDS`: the loop wakes for it, and for nothing else; a run
without the bound never wakes for it). A look reads, for the whole tree:

* its **CPU time**: the run's cgroup's (``cpu.stat`` ``usage_usec`` on v2,
  ``cpuacct.usage`` on v1: the scheduler's own count, to the microsecond)
  where it has one, and in any case the sum of ``utime + stime`` of
  ``/proc/<pid>/stat`` over the walk (the leader and every descendant of the
  supervisor, in clock ticks);
* its **I/O**: the sum of ``/proc/<pid>/io`` (``rchar``, ``wchar``, ``syscr``,
  ``syscw``: bytes and system calls of reads and writes) over the same walk.
  Every line the command writes to its stdout or stderr is a ``write()``
  counted there, whether the stream is the caller's terminal, a file, or a
  pipe the caller captures: the supervisor never sees the stream itself (the
  command writes to the caller's descriptors directly), so this is how
  output reaches the core. A write too short to cost a clock tick is still a
  system call counted;
* which processes the tree holds (one that starts or ends is activity).

Anything different from the last look is activity, reported as
:class:`~tether.core.events.ActivitySeen` at the time of the look; the core
decides what it means. A file the supervisor cannot read (a process that
changed its credentials, a kernel without I/O accounting) counts as nothing,
so the bound can only come later, never earlier, than the tree's activity
says. Reading the walk costs about two small ``/proc`` reads per process.
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

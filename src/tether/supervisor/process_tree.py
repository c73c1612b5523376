"""The command's process tree, as the supervisor finds, signals and reaps it.

The ladder: the process group, the sweep (a walk of ``/proc`` below the
supervisor, a child subreaper, each escapee signalled through a checked pidfd),
the run's cgroups. ``docs/containment.md`` says why each step is taken the way
it is (pid reuse, "nothing left" confirmed, too few descriptors) and which test
shows it. ``os.killpg`` and the leader's ``pidfd_send_signal`` are called here
directly: their only guard is this module's policy (the leader unreaped).
"""

from __future__ import annotations

import contextlib
import os

# os.wait4 loads it on first use: under a full descriptor table it could not.
import resource  # noqa: F401
import signal
import time

from tether.linux import proctree
from tether.linux.pidfd import exit_returncode, is_my_child, signal_through_pidfd
from tether.linux.run_cgroups import RunCgroups
from tether.shared.record_document import ResourceUsage
from tether.shared.signals import signal_name
from tether.supervisor.identity import WHOLE_TREE_SIGNALS, without_nested_runs
from tether.supervisor.reserve import DescriptorReserve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Final, Protocol, TypeVar

    _T = TypeVar("_T")

    class Report(Protocol):
        """Where the tree tells the event log what it had to do differently."""

        def __call__(self, event: str, /, **fields: object) -> None:
            """Write one event with its fields."""


__all__ = ["UNSEEN", "ProcessTree"]

#: How many walks :meth:`ProcessTree.others` makes for an answer it can trust, and how many
#: rounds a walk after the group's signal reads the supervisor's children again.
_WALKS: Final = 8

#: In an answer of :meth:`ProcessTree.others`: the tree could not be read, something may be
#: left (pid 0 is the kernel's: never a pid of the tree).
UNSEEN: Final = 0


def _report_nothing(event: str, /, **fields: object) -> None:
    """Tell nobody (a tree built without an event log, as in the tests)."""


class ProcessTree:
    """Everything below the supervisor: the command's leader and whatever it started."""

    def __init__(
        self,
        *,
        leader: int,
        pgid: int,
        pidfd: int,
        cgroup: RunCgroups | None = None,
        reserve: DescriptorReserve | None = None,
        report: Report = _report_nothing,
        own_group: bool = True,
    ) -> None:
        self.leader = leader
        self.pgid = pgid
        #: False when the command joined its caller's group (a terminal's job): the
        #: group is then never signalled whole, each process of the tree is.
        self.own_group = own_group
        self.pidfd = pidfd
        self.cgroup = cgroup
        self.reserve = DescriptorReserve() if reserve is None else reserve
        self._report = report
        self._me = os.getpid()
        #: Every other process this tree has signalled, to count in the record.
        self.stopped: set[int] = set()
        #: Those of them a signal of this tree's own walk reached (itself, or through
        #: the group): what :meth:`catch_up` leaves alone.
        self._reached: set[int] = set()
        #: Those of them that had left the command's process group (setsid, setpgid),
        #: which a group signal alone would have missed: for the caller's verdict line.
        self.outside_group: set[int] = set()
        #: Signals sent to a single process by its pid, for want of a pidfd.
        self.signals_without_pidfd = 0
        #: Once the leader is reaped, its group id may name a stranger's group.
        self.leader_reaped = False
        self._blind = False

    @property
    def containment(self) -> str:
        """What contains the tree, as the record names it: ``cgroup`` or ``sweep``."""
        return "sweep" if self.cgroup is None else "cgroup"

    def leader_returncode(self) -> int | None:
        """The leader's return code once it exited (``subprocess`` style), without reaping it."""
        return exit_returncode(self.leader)

    def others(self) -> list[int]:
        """The live processes of the tree but the leader: an empty answer confirmed by a
        second read, ``[UNSEEN]`` for a tree that cannot be read.
        """
        self.reap_adopted()
        direct: list[int] = []
        for _attempt in range(_WALKS):
            live = self._read(self._live_others)
            if live is None:
                return [UNSEEN]
            if live:
                return live
            found = self._read(self._direct_others)
            if found is None:
                return [UNSEEN]
            direct = found
            if not direct:
                return []
        # The tree keeps changing under the walk: not empty, at the least.
        return direct

    def _live_others(self) -> list[int]:
        found = {pid for pid, _parent in proctree.descendants(self._me)}
        found.update(self._members())
        found.discard(self.leader)
        return sorted(pid for pid in found if _alive(pid))

    def _direct_others(self) -> list[int]:
        return [pid for pid in proctree.children(self._me) if pid != self.leader and _alive(pid)]

    def _members(self) -> list[int]:
        """The cgroups' processes (a failed open reads as none: hence the lent reserve)."""
        if self.cgroup is None:
            return []
        with self.reserve.lent():
            return self.cgroup.pids()

    def _read(self, look: Callable[[], _T]) -> _T | None:
        """``look()`` through the reserve; ``None`` if the tree cannot be read even so (the
        first failure of a spell reported: ``walk_failed``).
        """
        try:
            answer = self.reserve.call(look)
        except OSError as error:
            if not self._blind:
                self._blind = True
                self._report("walk_failed", error=error.strerror or str(error))
            return None
        self._blind = False
        return answer

    def signal(self, signum: int, *, group: bool = True) -> int:
        """Send ``signum`` to the whole tree, walked first; how many live processes it reached.

        ``group=False``: the group has it already (:meth:`signal_group`), and the walk that
        follows counts what the group's signal reached (:meth:`_walk_after_group`).
        """
        if group:
            snapshot = self._read(self._snapshot) or []
        else:
            snapshot = self._read(self._walk_after_group) or []
        walked = {pid for pid, _stat in snapshot}
        if signum not in WHOLE_TREE_SIGNALS:
            snapshot = without_nested_runs(snapshot)
        # Read before cgroup.kill empties it (to count who it reached); for a
        # gentle signal, once the group has it: the group must not wait on a
        # list that only adds what the walk cannot find.
        members = self._members() if signum == signal.SIGKILL else None
        killed_by_cgroup = signum == signal.SIGKILL and self._kill_cgroup()
        if group:
            self.signal_group(signum)
        if members is None:
            members = self._members()
        still_below = _below(walked | {self._me})
        for pid, stat in snapshot:
            if pid == self.leader:
                continue
            self.stopped.add(pid)
            self._reached.add(pid)
            if stat.pgid != self.pgid:
                self.outside_group.add(pid)
            if stat.state != "Z" and (stat.pgid != self.pgid or not self.own_group):
                self._signal_one(pid, signum, still_below)
        outside_walk = [pid for pid in members if pid not in walked and pid != self.leader]
        self._signal_members(outside_walk, signum, already=killed_by_cgroup)
        return len(walked) + len(outside_walk)

    def signal_group(self, signum: int) -> bool:
        """Send ``signum`` to the command's group alone, nothing read first; whether it went out.

        Its leader alone (its pidfd) where the group is its caller's; nothing once the leader
        is reaped (its group id may name a stranger's group). :mod:`tether.core.first_signals`.
        """
        if self.leader_reaped:
            return False
        try:
            if self.own_group:
                if not is_my_child(self.leader):
                    return False
                os.killpg(self.pgid, signum)
            else:
                signal.pidfd_send_signal(self.pidfd, signum)
        except OSError:
            return False
        return True

    def catch_up(self, signums: Sequence[int]) -> int:
        """Send ``signums``, in order, to each process outside the group no walk reached
        (missed mid-walk, or born since); how many (``docs/containment.md``, rung 2).
        """
        snapshot = self._read(self._snapshot) or []
        if any(signum not in WHOLE_TREE_SIGNALS for signum in signums):
            snapshot = without_nested_runs(snapshot)
        still_below = _below({pid for pid, _stat in snapshot} | {self._me})
        missed = [
            (pid, stat)
            for pid, stat in snapshot
            if pid != self.leader
            and pid not in self._reached
            and (stat.pgid != self.pgid or not self.own_group)
        ]
        for pid, stat in missed:
            self.stopped.add(pid)
            self._reached.add(pid)
            if stat.pgid != self.pgid:
                self.outside_group.add(pid)
            for signum in signums:
                self._signal_one(pid, signum, still_below)
        if missed:
            names = [signal_name(str(signum)) or str(signum) for signum in signums]
            self._report("signals_caught_up", processes=len(missed), signals=names)
        return len(missed)

    def _snapshot(self) -> list[tuple[int, proctree.ProcStat]]:
        return [
            (pid, stat)
            for pid, _parent in proctree.descendants(self._me)
            if (stat := proctree.stat_of(pid)) is not None and stat.state != "Z"
        ]

    def _walk_after_group(self) -> list[tuple[int, proctree.ProcStat]]:
        """The tree as the group's signal found it, zombies it reached included, the
        supervisor's children read again until nobody new turns up. It can only undercount:
        a member reaped by its own parent, or moved to a nested run's subreaper, meanwhile.
        """
        order: list[int] = []
        seen = {self._me}
        roots = [self._me]
        for _attempt in range(_WALKS):
            for root in roots:
                for pid, _parent in proctree.descendants(root):
                    if pid not in seen:
                        seen.add(pid)
                        order.append(pid)
            roots = [pid for pid in proctree.children(self._me) if pid not in seen]
            if not roots:
                break
            seen.update(roots)
            order.extend(roots)
        return [
            (pid, stat)
            for pid in order
            if (stat := proctree.stat_of(pid)) is not None
            and (
                stat.state != "Z"
                or pid == self.leader
                or (self.own_group and stat.pgid == self.pgid)
            )
        ]

    def _kill_cgroup(self) -> bool:
        if self.cgroup is None:
            return False
        with self.reserve.lent():
            return self.cgroup.kill()

    def _signal_members(self, pids: Iterable[int], signum: int, *, already: bool) -> None:
        """Signal processes of the cgroup the walk did not find (checked to be members)."""
        cgroup = self.cgroup
        if cgroup is None:
            return
        # The membership check reads a failed open as "not a member": lend it everything.
        with self.reserve.lent():
            for pid in pids:
                if not _maybe_alive(pid):
                    continue
                self.stopped.add(pid)
                self._reached.add(pid)
                self.outside_group.add(pid)
                if not already:
                    self._signal_one(pid, signum, cgroup.holds)

    def _signal_one(self, pid: int, signum: int, still_ours: Callable[[int], bool]) -> None:
        """Signal ``pid`` through a pidfd where one can be had, by its pid (checked) otherwise."""
        try:
            self.reserve.call(lambda: signal_through_pidfd(pid, signum, still_ours))
        except OSError:
            self._signal_by_pid(pid, signum, still_ours)

    def _signal_by_pid(self, pid: int, signum: int, still_ours: Callable[[int], bool]) -> None:
        """Signal ``pid`` with ``kill`` right after checking it still belongs to the tree (a
        child: :func:`~tether.linux.pidfd.is_my_child`; any other: ``/proc``); unchecked, never.
        """
        if not is_my_child(pid):
            try:
                if not self.reserve.call(lambda: still_ours(pid)):
                    return
            except OSError:
                return
        try:
            os.kill(pid, signum)
        except OSError:
            return
        self.signals_without_pidfd += 1
        self._report("signal_by_pid", pid=pid, signal=signal_name(str(signum)) or str(signum))

    def reap_adopted(self) -> None:
        """Reap every dead child of the supervisor except the leader."""
        for pid in self._read(lambda: proctree.children(self._me)) or []:
            if pid != self.leader:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def reap_leader(self, *, block: bool) -> tuple[int | None, ResourceUsage | None]:
        """Reap the leader; return its return code and resource usage (``None`` if not reaped)."""
        try:
            pid, status, usage = os.wait4(self.leader, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.leader_reaped = True
            return None, None
        if pid == 0:
            return None, None
        self.leader_reaped = True
        with contextlib.suppress(OSError):
            os.close(self.pidfd)
        return os.waitstatus_to_exitcode(status), ResourceUsage(
            user_seconds=round(usage.ru_utime, 6),
            system_seconds=round(usage.ru_stime, 6),
            max_rss_kib=usage.ru_maxrss,
        )

    def release(self) -> bool:
        """Remove the tree's cgroups, if any, and give the spare descriptors back (the record
        may need them); whether nothing was left behind.
        """
        # Given back for good first: the removal has them all, and none is opened again.
        self.reserve.close()
        if self.cgroup is None:
            return True
        return self.cgroup.remove()

    def kill_everything(self, wait: Callable[[float], object], *, bound: float) -> bool:
        """SIGKILL the tree until it is empty or ``bound`` seconds pass; whether it emptied.

        The last resort's (:mod:`tether.supervisor.last_resort`); ``wait(seconds)`` blocks
        until a child of the supervisor may have died, or the time is up.
        """
        end = time.monotonic() + bound
        while True:
            self.signal(signal.SIGKILL)
            if self._leader_gone() and not self.others():
                return True
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            wait(remaining)

    def _leader_gone(self) -> bool:
        try:
            return self.leader_reaped or self.leader_returncode() is not None
        except ChildProcessError:
            return True


def _below(known: set[int]) -> Callable[[int], bool]:
    """Whether a process still hangs below the supervisor: its parent is one the walk found."""

    def still_below(pid: int) -> bool:
        return proctree.parent_of(pid) in known

    return still_below


def _alive(pid: int) -> bool:
    return proctree.state_of(pid) not in (None, "Z")


def _maybe_alive(pid: int) -> bool:
    """Whether ``pid`` may be alive: a state that cannot be read does not say it is not."""
    try:
        return _alive(pid)
    except OSError:
        return True

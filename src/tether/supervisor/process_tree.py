"""The command's process tree, as the supervisor finds, signals and reaps it.

Containment is a ladder of three rungs, each catching what the one below
misses (``docs/containment.md`` says which test shows each claim):

1. **The process group.** The command leads a group of its own, so one
   ``killpg`` reaches everything that stayed in it.
2. **The sweep.** Descendants that left the group (``setsid()``,
   ``setpgid()``, a double fork) are found by walking ``/proc`` down from the
   supervisor, which is a child subreaper: orphans re-parent to it and stay
   findable. They are signalled one by one through pidfds, so a pid reused
   between the walk and the signal is never hit: the pidfd is opened first,
   and the process is then checked to still hang below the supervisor (its
   parent is the supervisor or a process the walk found) before anything is
   sent.
3. **The cgroup**, where one could be made (:mod:`tether.linux.cgroup`). The
   command started inside it, so everything it started is in it whatever it
   did to its group, session or parent. Its ``cgroup.procs`` adds whatever the
   walk did not see, and the final SIGKILL is ``cgroup.kill``, which the
   kernel applies to every member at once, forks in flight included. There is
   no ``cgroup.kill`` for SIGTERM, so the gentle signal goes out through
   rungs 1 and 2 and to the cgroup's members one by one.

The record's ``containment`` says ``cgroup`` or ``sweep``: rungs 1 and 2 are
always used; ``cgroup`` means rung 3 was there as well.

Two orderings keep pid reuse out for the group as well:

* the leader is never reaped before the last group-wide signal. While it is
  an unreaped zombie its pid, and so its process group id, cannot be given to
  anyone else;
* adopted orphans are reaped as soon as they die (on SIGCHLD), so the tree
  holds no zombies, but never the leader: it is reaped last, with ``wait4``,
  which also yields the command's resource usage for the record.

A process in the group receives the group's signal once, not a second time
through its pidfd: programs that treat a second SIGTERM as "stop right now"
must not see one tether did not mean to send.

*Nothing left* is decided with care, because the walk is not atomic: a
process whose parent dies while the walk is between the supervisor and that
parent is re-parented to the supervisor, already read, and the walk misses
it. The kernel re-parents a dying process's children before the process
itself becomes a zombie, so when a walk finds nothing alive, one more read of
the supervisor's own children sees any process that moved that way. Only a
walk that finds nothing *and* is followed by such a read that finds nothing
(and, with a cgroup, an empty ``cgroup.procs``) counts as empty.

*Short of descriptors* (a caller's low ``ulimit -n``, a full system file
table), the tree is still stopped, or said not to be:

* every look and every signal goes through the run's
  :class:`~tether.supervisor.reserve.DescriptorReserve`, which gives back a
  spare descriptor and tries again when an open fails for want of one;
* a process for which no pidfd can be had even so is signalled by its pid,
  right after checking that it still belongs to the tree: a child of the
  supervisor needs no descriptor for that (``waitid`` with ``WNOWAIT`` says
  it is ours, and only this process could reap it and free its pid), any
  other is checked in ``/proc`` as with a pidfd. Each such signal is counted
  (:attr:`ProcessTree.signals_without_pidfd`, the record's
  ``signals_without_pidfd``) and reported (``signal_by_pid``);
* a walk that cannot be read is never taken for an empty tree: the answer is
  "something unseen" (:data:`UNSEEN`), so the run waits out the bound after
  SIGKILL and the record says ``unkillable`` rather than claim a clean stop.
  The group (``killpg``) and the cgroup (``cgroup.kill``) are signalled all
  the same; the first needs no descriptor at all.

Platform calls made here directly, deliberately (the rest are :mod:`tether.linux`'s):
``os.killpg`` on the group, whose only guard is this module's policy (the
leader unreaped), and ``signal.pidfd_send_signal`` on the leader's pidfd,
held open since the launch: neither has a mechanism left to hide.
"""

from __future__ import annotations

import contextlib
import os

# os.wait4 loads this module the first time it reports a resource usage: a
# leader reaped under a full descriptor table would fail to load it.
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

# Loaded by a supervisor once its command runs: no ``typing`` at run time.
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

#: How many times :meth:`ProcessTree.others` walks the tree to get an answer
#: it can trust (each walk that finds nothing is confirmed by a second one), and
#: how many rounds a walk after the group's signal reads the supervisor's
#: children again for processes that moved there meanwhile.
_WALKS: Final = 8

#: In an answer of :meth:`ProcessTree.others`: the tree could not be read, so
#: something may be left that nobody saw. Never a pid of the tree (pid 0 is
#: the kernel's own), and never counted as "nothing left".
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

    # -- looking --------------------------------------------------------------

    def leader_returncode(self) -> int | None:
        """The leader's return code once it exited (``subprocess`` style), without reaping it."""
        return exit_returncode(self.leader)

    def others(self) -> list[int]:
        """The live processes of the tree other than the leader (after reaping adopted zombies).

        An empty answer is confirmed (see the module's docstring) before it is
        given; a tree that cannot be read is answered with ``[UNSEEN]``.
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
        """The cgroup's processes (its reader takes a failed open for an empty cgroup)."""
        if self.cgroup is None:
            return []
        with self.reserve.lent():
            return self.cgroup.pids()

    def _read(self, look: Callable[[], _T]) -> _T | None:
        """``look()`` through the reserve, or ``None`` if the tree cannot be read even so.

        The first failure of a spell is reported (``walk_failed``), not every
        one: a supervisor short of descriptors looks at the tree on every SIGCHLD.
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

    # -- acting ---------------------------------------------------------------

    def signal(self, signum: int, *, group: bool = True) -> int:
        """Send ``signum`` to the whole tree; return how many live processes it was sent to.

        The tree is walked *before* anything is sent: a process that dies of
        the group's signal in the meantime was still reached by it. Between
        the walk and the group's signal nothing else is done (the cgroup's
        list of a gentle signal waits until after): the command's group is
        what a caller's death or a deadline must reach first.

        With ``group=False`` the command's group (or its leader, when the
        group is not its own) already got ``signum`` (:meth:`signal_group`:
        the sentry sent it before the loop ran, or the loop before it fed the
        core), and only the rest of the tree is signalled. The walk then
        comes *after* the group's signal, and counts what it reached all the
        same (:meth:`_walk_after_group`): the group's members that died of it
        are still zombies in the walk (their parents are in the tree, and the
        supervisor, which adopts the orphans, reaps nothing until the turn is
        over), and those that moved to the supervisor while the walk ran, as
        the processes whose parent died of it, are found by reading its
        children again until nothing new turns up.
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
        """Send ``signum`` to the command's group alone; return whether it went out.

        Its leader alone (through its pidfd) when the group is its caller's,
        and nothing once the leader is reaped (its group id may then name a
        stranger's group). Nothing is walked or read first: this is what a
        stop the core is certain of sends at once
        (:mod:`tether.core.first_signals`), before the core is fed; the rest
        of the tree follows, with :meth:`signal` and ``group=False``.
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
        """Send ``signums``, in order, to each process outside the group no walk has reached.

        The tree is stopping, and a walk can miss a process: one whose parent
        died while the walk was between them (it moves to the supervisor, which
        the walk had already read), as when the group's signal went out before
        the walk (the sentry acts first), or one born outside the group after
        the walk. Found now, it gets what the rest of the tree got, instead of
        living on until the grace runs out and SIGKILL finds it. A process in
        the command's group was reached by the group's signal and is left
        alone (it must not see a second SIGTERM tether did not mean to send).
        Returns how many processes were caught up with.
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
        """The tree as the group's signal found it, walked after it: its dead members included.

        A zombie is counted if the group's signal reached it: the leader, and
        in a group of the command's own, every member. A process that moved
        to the supervisor while the walk ran (its parent died of the signal
        after the walk read the supervisor's children, before it read the
        parent's) is found by reading the supervisor's children again, and
        its subtree walked, until a read finds nobody new (bounded).

        Exact but for two races, and both only undercount: a member that died
        of the signal *and was reaped by its own parent in the tree* (one that
        handles the stop signal by waiting for its children) before the walk
        reached it is not counted; nor is one that moved to a subreaper of its
        own below this one (a nested run) while the walk was between them. A
        member that was already a zombie when the signal went out, unreaped by
        its parent, is counted as reached (the sentry's walk counts it too).
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
        """Signal ``pid`` with ``kill``, right after checking that it still belongs to the tree.

        A child of the supervisor is checked without a descriptor and without a
        race (:func:`~tether.linux.pidfd.is_my_child`); any other process is checked in ``/proc``,
        and only a pid freed and reused in the instant between the check and
        the signal could be hit. A process that cannot be checked is not
        signalled: a pid is not a process.
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
        """Remove the tree's cgroup, if it has one; return whether nothing was left behind.

        The spare descriptors go back too: the tree needs them no more, and the
        record written next may.
        """
        try:
            if self.cgroup is None:
                return True
            with self.reserve.lent():
                return self.cgroup.remove()
        finally:
            self.reserve.close()

    # -- the last resort ------------------------------------------------------

    def kill_everything(self, wait: Callable[[float], object], *, bound: float) -> bool:
        """SIGKILL the tree until nothing is left or ``bound`` seconds pass; whether it emptied.

        No grace and no questions: this is how a supervisor that failed inside
        keeps its promise (:mod:`tether.supervisor.last_resort`). ``wait(seconds)``
        blocks until a child of the supervisor may have died, or the time is up.
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

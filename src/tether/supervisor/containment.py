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
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterable
from typing import Final

from tether.linux import proctree
from tether.linux.cgroup import RunCgroup
from tether.shared.record_document import ResourceUsage

__all__ = ["ProcessTree"]

#: How many times :meth:`ProcessTree.others` walks the tree to get an answer
#: it can trust; each walk that finds nothing is confirmed by a second one.
_WALKS: Final = 8


class ProcessTree:
    """Everything below the supervisor: the command's leader and whatever it started."""

    def __init__(
        self, *, leader: int, pgid: int, pidfd: int, cgroup: RunCgroup | None = None
    ) -> None:
        self.leader = leader
        self.pgid = pgid
        self.pidfd = pidfd
        self.cgroup = cgroup
        self._me = os.getpid()
        #: Every other process this tree has signalled, to count in the record.
        self.stopped: set[int] = set()

    @property
    def containment(self) -> str:
        """What contains the tree, as the record names it: ``cgroup`` or ``sweep``."""
        return "sweep" if self.cgroup is None else "cgroup"

    # -- looking --------------------------------------------------------------

    def leader_returncode(self) -> int | None:
        """The leader's return code once it exited (``subprocess`` style), without reaping it."""
        result = os.waitid(os.P_PID, self.leader, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if result is None:
            return None
        if result.si_code == os.CLD_EXITED:
            return result.si_status
        return -result.si_status

    def others(self) -> list[int]:
        """The live processes of the tree other than the leader (after reaping adopted zombies).

        An empty answer is confirmed (see the module's docstring) before it is given.
        """
        self.reap_adopted()
        direct: list[int] = []
        for _attempt in range(_WALKS):
            live = self._live_others()
            if live:
                return live
            direct = [pid for pid in self._direct_others() if _alive(pid)]
            if not direct:
                return []
        # The tree keeps changing under the walk: not empty, at the least.
        return direct

    def _live_others(self) -> list[int]:
        found = {pid for pid, _parent in proctree.descendants(self._me)}
        if self.cgroup is not None:
            found.update(self.cgroup.pids())
        found.discard(self.leader)
        return sorted(pid for pid in found if _alive(pid))

    def _direct_others(self) -> list[int]:
        return [pid for pid in proctree.children(self._me) if pid != self.leader]

    # -- acting ---------------------------------------------------------------

    def signal(self, signum: int) -> int:
        """Send ``signum`` to the whole tree; return how many live processes it was sent to.

        The tree is walked *before* anything is sent: a process that dies of
        the group's signal in the meantime was still reached by it.
        """
        snapshot = [
            (pid, stat)
            for pid, _parent in proctree.descendants(self._me)
            if (stat := proctree.stat_of(pid)) is not None and stat.state != "Z"
        ]
        walked = {pid for pid, _stat in snapshot}
        members = [] if self.cgroup is None else self.cgroup.pids()
        killed_by_cgroup = signum == signal.SIGKILL and self._kill_cgroup()
        with contextlib.suppress(OSError):
            os.killpg(self.pgid, signum)
        known = walked | {self._me}
        for pid, stat in snapshot:
            if pid == self.leader:
                continue
            self.stopped.add(pid)
            if stat.pgid != self.pgid:
                _signal_one(pid, signum, lambda p: proctree.parent_of(p) in known)
        outside_walk = [pid for pid in members if pid not in walked and pid != self.leader]
        self._signal_members(outside_walk, signum, already=killed_by_cgroup)
        return len(walked) + len(outside_walk)

    def _kill_cgroup(self) -> bool:
        return self.cgroup is not None and self.cgroup.kill()

    def _signal_members(self, pids: Iterable[int], signum: int, *, already: bool) -> None:
        """Signal processes of the cgroup the walk did not find (checked to be members)."""
        cgroup = self.cgroup
        if cgroup is None:
            return
        for pid in pids:
            if not _alive(pid):
                continue
            self.stopped.add(pid)
            if not already:
                _signal_one(pid, signum, cgroup.holds)

    def reap_adopted(self) -> None:
        """Reap every dead child of the supervisor except the leader."""
        for pid in proctree.children(self._me):
            if pid != self.leader:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def reap_leader(self, *, block: bool) -> tuple[int | None, ResourceUsage | None]:
        """Reap the leader; return its return code and resource usage (``None`` if not reaped)."""
        try:
            pid, status, usage = os.wait4(self.leader, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return None, None
        if pid == 0:
            return None, None
        with contextlib.suppress(OSError):
            os.close(self.pidfd)
        return os.waitstatus_to_exitcode(status), ResourceUsage(
            user_seconds=round(usage.ru_utime, 6),
            system_seconds=round(usage.ru_stime, 6),
            max_rss_kib=usage.ru_maxrss,
        )

    def release(self) -> bool:
        """Remove the tree's cgroup, if it has one; return whether nothing was left behind."""
        return self.cgroup is None or self.cgroup.remove()


def _alive(pid: int) -> bool:
    return proctree.state_of(pid) not in (None, "Z")


def _signal_one(pid: int, signum: int, still_ours: Callable[[int], bool]) -> None:
    """Signal ``pid`` through a pidfd, only if ``still_ours(pid)`` holds once the pidfd is open.

    The pidfd pins one process (not its pid number). While that process is
    alive its pid names nothing else, so a check made then is about the very
    process that gets the signal; if it died after the pidfd was opened, the
    signal fails harmlessly, whatever the check read about a later holder of
    the pid. Either way nothing outside the tree is signalled.

    A refusal (a process that changed its uid, when the supervisor is not
    root) is swallowed: the settle bound and ``unkillable`` report what could
    not be stopped.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if still_ours(pid):
            signal.pidfd_send_signal(pidfd, signum)
    except OSError:
        pass
    finally:
        os.close(pidfd)

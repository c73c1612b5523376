"""The command's process tree, as the supervisor finds, signals and reaps it.

The command runs as the leader of its own process group, so one ``killpg``
reaches everything that stayed in the group. Descendants that left it (with
``setsid()``, ``setpgid()`` or a double fork) are found by walking ``/proc``
down from the supervisor, which is a child subreaper, so orphans re-parent to
it and stay findable. Those are signalled one by one through pidfds, so a pid
that was reused between the walk and the signal is never hit: the pidfd is
opened first, and the process is checked to still have the parent the walk
saw it under before anything is sent.

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
"""

from __future__ import annotations

import contextlib
import os
import signal

from tether._linux import proctree
from tether.record import ResourceUsage

__all__ = ["ProcessTree"]


class ProcessTree:
    """Everything below the supervisor: the command's leader and whatever it started."""

    containment = "sweep"

    def __init__(self, *, leader: int, pgid: int, pidfd: int) -> None:
        self.leader = leader
        self.pgid = pgid
        self.pidfd = pidfd
        self._me = os.getpid()
        #: Every other process this tree has signalled, to count in the record.
        self.stopped: set[int] = set()

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
        """The live processes of the tree other than the leader (after reaping adopted zombies)."""
        self.reap_adopted()
        return [
            pid
            for pid, _parent in proctree.descendants(self._me)
            if pid != self.leader and proctree.state_of(pid) not in (None, "Z")
        ]

    # -- acting ---------------------------------------------------------------

    def signal(self, signum: int) -> int:
        """Send ``signum`` to the whole tree; return how many live processes it was sent to.

        The tree is walked *before* anything is sent: a process that dies of
        the group's signal in the meantime was still reached by it.
        """
        snapshot = [
            (pid, parent, stat)
            for pid, parent in proctree.descendants(self._me)
            if (stat := proctree.stat_of(pid)) is not None and stat.state != "Z"
        ]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signum)
        for pid, parent, stat in snapshot:
            if pid == self.leader:
                continue
            self.stopped.add(pid)
            if stat.pgid != self.pgid:
                _signal_one(pid, parent, signum)
        return len(snapshot)

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


def _signal_one(pid: int, parent: int, signum: int) -> None:
    """Signal ``pid`` through a pidfd, only if it is still the child of ``parent``."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if proctree.parent_of(pid) in (parent, os.getpid()):
            signal.pidfd_send_signal(pidfd, signum)
    except ProcessLookupError:
        pass
    finally:
        os.close(pidfd)

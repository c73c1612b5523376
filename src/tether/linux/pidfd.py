"""One process signalled through a pidfd, and a child of this process told apart without one.

A pid is a number, not a process: once a process is reaped its pid may be
given to another, and a signal sent by number can then hit a stranger. Two
ways around it, each only as strong as its condition:

* a **pidfd** pins one process, not its number: a check made while it is
  open is about the very process that gets the signal
  (:func:`signal_through_pidfd`);
* a **child** of this process, until this process reaps it, is named by its
  pid and by nothing else, alive or a zombie; ``waitid`` with ``WNOWAIT``
  asks without reaping and without a descriptor (:func:`is_my_child`, and
  how it exited: :func:`exit_returncode`).

The supervisor's containment uses both; the policy (which processes, which
signals) is :mod:`tether.supervisor.process_tree`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["exit_returncode", "is_my_child", "signal_through_pidfd"]


def is_my_child(pid: int) -> bool:
    """Whether ``pid`` is an unreaped child of this process, asked without a descriptor.

    Until this (single-threaded) process reaps it, a child's pid names that
    child and nothing else, alive or a zombie.
    """
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def exit_returncode(pid: int) -> int | None:
    """The return code of child ``pid`` once it exited (``subprocess`` style), without reaping it.

    ``None`` while it runs. Raise :class:`ChildProcessError` if ``pid`` is no
    unreaped child of this process.
    """
    result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if result is None:
        return None
    if result.si_code == os.CLD_EXITED:
        return result.si_status
    return -result.si_status


def signal_through_pidfd(pid: int, signum: int, still_ours: Callable[[int], bool]) -> None:
    """Signal ``pid`` through a pidfd, only if ``still_ours(pid)`` holds once the pidfd is open.

    The pidfd pins one process (not its pid number). While that process is
    alive its pid names nothing else, so a check made then is about the very
    process that gets the signal; if it died after the pidfd was opened, the
    signal fails harmlessly, whatever the check read about a later holder of
    the pid. Either way nothing outside the tree is signalled.

    A refusal (a process that changed its uid, when the supervisor is not
    root) is swallowed: the settle bound and ``unkillable`` report what could
    not be stopped. A pidfd that cannot be had, or a check that cannot be
    read (no descriptor for it), is raised, for the caller to fall back on.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if still_ours(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(pidfd, signum)
    finally:
        os.close(pidfd)

"""One process signalled through a pidfd, and a child of this process told apart without one
(an unreaped child is named by its pid alone); the policy is
:mod:`tether.supervisor.process_tree`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def is_my_child(pid: int) -> bool:
    """Whether ``pid`` is an unreaped child of this (single-threaded) process, without a pidfd."""
    try:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def exit_returncode(pid: int) -> int | None:
    """The return code of child ``pid`` once it exited, without reaping it; ``None`` while it
    runs; :class:`ChildProcessError` if it is no unreaped child."""
    result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if result is None:
        return None
    return result.si_status if result.si_code == os.CLD_EXITED else -result.si_status


def signal_through_pidfd(pid: int, signum: int, still_ours: Callable[[int], bool]) -> None:
    """Signal ``pid`` through a pidfd, only if ``still_ours(pid)`` holds once it is open.
    A refusal (another uid) is swallowed; a pidfd or check that cannot be had is raised."""
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

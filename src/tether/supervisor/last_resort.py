"""The last resort: a supervisor that fails inside still stops the tree.

Every door wraps what follows the launch: on any exception the tree is SIGKILLed and reaped,
the caller gets one ``finished`` (125) and the seed door one line (docs/containment.md, "A
failure inside: the last resort"). Imported before the launch, with only what it loaded.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal

from tether.core.reasons import TETHER_FAILED, Reason
from tether.shared.protocol import Finished, StatusWriter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

    from tether.shared.protocol import Signalled, Spawned, Started
    from tether.supervisor.command import Command
    from tether.supervisor.launch import LaunchAttempt, SignalWakeup
    from tether.supervisor.process_tree import ProcessTree

__all__ = [
    "SETTLE_SECONDS",
    "SoFar",
    "StatusTap",
    "abandon",
    "after_failure",
    "describe",
    "kill_tree",
]

#: How long the tree may take to die after SIGKILL (the core's own bound after SIGKILL).
SETTLE_SECONDS: Final = 5.0


class StatusTap(StatusWriter):
    """The status pipe, noting whether ``finished`` went out: the caller must get one, not two."""

    def __init__(self, inner: StatusWriter) -> None:
        super().__init__(None)
        self._inner = inner
        self.finished_sent = False

    def send(self, message: Spawned | Started | Signalled | Finished) -> None:
        """Pass ``message`` on; remember a ``finished``."""
        self._inner.send(message)
        if isinstance(message, Finished):
            self.finished_sent = True

    def close(self) -> None:
        """Close the pipe underneath."""
        self._inner.close()


class SoFar:
    """What a failed loop knew of its run (tree, reason, record, exit status): all the last resort
    reads."""

    __slots__ = ("exit_status", "reason", "record", "tree")

    def __init__(
        self,
        *,
        tree: ProcessTree | None,
        reason: str,
        record: str | None,
        exit_status: int,
    ) -> None:
        self.tree = tree
        self.reason = reason
        self.record = record
        self.exit_status = exit_status


def after_failure(
    error: BaseException,
    attempt: LaunchAttempt,
    so_far: SoFar | None,
    status: StatusTap,
    say: Callable[[str], None],
) -> int:
    """Kill the tree, tell the caller (once, unless ``finished`` went out) and the person; the
    status."""
    if so_far is not None and status.finished_sent:
        kill_tree(attempt, so_far.tree)
        return so_far.exit_status
    if so_far is None:
        return abandon(attempt, error, status=status, say=say)
    return abandon(
        attempt,
        error,
        status=status,
        say=say,
        tree=so_far.tree,
        reason=so_far.reason,
        record=so_far.record,
    )


def describe(error: BaseException) -> str:
    """One line for a person: what failed (a system error's words only; the line is not
    redacted)."""
    if isinstance(error, OSError) and error.errno is not None:
        detail = f"[Errno {error.errno}] {os.strerror(error.errno)}"
    else:
        detail = " ".join(str(error).split())[:200]
    what = type(error).__name__ + (f": {detail}" if detail else "")
    return f"internal error in the supervisor ({what})"


def abandon(
    attempt: LaunchAttempt,
    error: BaseException,
    *,
    status: StatusWriter,
    say: Callable[[str], None],
    tree: ProcessTree | None = None,
    reason: str = Reason.SUPERVISOR_LOST.value,
    record: str | None = None,
) -> int:
    """Kill the run's whole tree, tell the caller and the person; return 125. Never raises."""
    emptied = kill_tree(attempt, tree)
    message = describe(error) + (
        "; every process of the run was killed"
        if emptied
        else "; the run's processes were killed, but not all could be seen to end"
    )
    already_told = isinstance(status, StatusTap) and status.finished_sent
    if not already_told:
        with contextlib.suppress(Exception):
            status.send(
                Finished(reason=reason, exit_status=TETHER_FAILED, record=record, message=message)
            )
    with contextlib.suppress(Exception):
        say(message)
    return TETHER_FAILED


def kill_tree(attempt: LaunchAttempt, tree: ProcessTree | None = None) -> bool:
    """SIGKILL everything the run started, reap it, remove its cgroup; whether it all ended. Never
    raises."""
    command = attempt.command
    if command is None:
        return True
    with contextlib.suppress(Exception):
        attempt.reserve.close()
    try:
        return _sweep(attempt.wakeup, command, tree)
    except BaseException:  # the last resort of the last resort
        _kill_group_bare(command)
        return False


def _sweep(wakeup: SignalWakeup, command: Command, tree: ProcessTree | None) -> bool:
    from tether.supervisor.process_tree import ProcessTree

    if tree is None:
        tree = ProcessTree(
            leader=command.pid,
            pgid=command.pgid,
            pidfd=command.pidfd,
            cgroup=command.cgroup,
            own_group=command.own_group,
        )
    emptied = tree.kill_everything(_wait_for_a_child(wakeup), bound=SETTLE_SECONDS)
    _reap_everything(tree)
    return tree.release() and emptied


def _wait_for_a_child(wakeup: SignalWakeup) -> Callable[[float], None]:
    """A wait that ends at the next signal (SIGCHLD: a child died) or after ``seconds``."""

    def wait(seconds: float) -> None:
        poller = select.poll()
        poller.register(wakeup.read_fd, select.POLLIN)
        poller.poll(math.ceil(seconds * 1000))
        wakeup.drain()

    return wait


def _reap_everything(tree: ProcessTree) -> None:
    """Reap the leader (it is dead, or the bound ran out) and every other child left."""
    tree.reap_leader(block=False)
    tree.reap_adopted()
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _kill_group_bare(command: Command) -> None:
    """SIGKILL the cgroup, and the group if its leader is unreaped: nothing left to import."""
    with contextlib.suppress(Exception):
        if command.cgroup is not None:
            command.cgroup.kill()
    with contextlib.suppress(OSError):
        os.waitid(os.P_PID, command.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if command.own_group:  # else it is the caller's group: the leader alone
            os.killpg(command.pgid, signal.SIGKILL)
        else:
            signal.pidfd_send_signal(command.pidfd, signal.SIGKILL)

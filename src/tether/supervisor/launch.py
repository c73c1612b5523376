"""The ``launching`` phase: what a supervisor does before anything else.

The command should start as early as the interpreter allows, so
this module does only what must come before it, and imports only what that
needs (``os``, ``signal``, ``_ctypes`` for ``prctl``, and ``json`` where a status
message is sent): no ``subprocess`` (:mod:`tether.supervisor.spawn` forks and execs), no
``dataclasses``, no ``typing`` at run time, none of the core, and neither
``transitions`` nor ``structlog``. In order:

1. **Signals first.** SIGTERM, SIGINT, SIGHUP and SIGCHLD get handlers that
   do nothing but let Python write the signal's number to a wakeup pipe, so
   a cancel that arrives while the command is being started is not lost: it
   waits in the pipe, level-triggered, for the loop.
2. **Subreaper.** The supervisor becomes the reaper of its orphaned
   descendants before there are any.
3. **The command**, through :func:`tether.supervisor.command.start_command`,
   from the door's :class:`~tether.supervisor.plan.LaunchPlan`;
   between its fork and its exec, the command itself tells the caller where
   it is (``spawned``), so that no moment exists in which it runs unknown to
   the caller.
4. **The sentry** (:mod:`tether.supervisor.sentry`) takes the watch: from
   here until the loop runs, the caller's death, a cancel and the deadline
   are acted on at once, however long the loop takes to load.
5. **``started``** goes to the caller at once, and the caller's stdio, which
   only the command needs, is let go of.
6. **The reserve**: a few spare descriptors for stopping the tree
   (:mod:`tether.supervisor.reserve`, which says why right after the spawn and
   not before it).

Everything else (the core, the event log, the record) is built afterwards by
:mod:`tether.supervisor.loop`, from the :class:`LaunchAttempt` returned here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time

from tether.linux.prctl import set_child_subreaper
from tether.shared.protocol import Spawned, Started, StatusWriter
from tether.shared.signals import signal_number
from tether.supervisor.command import Command, CommandNotStarted, start_command
from tether.supervisor.identity import become_a_supervisor
from tether.supervisor.reserve import NEEDED, DescriptorReserve, free_descriptors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

    from tether.supervisor.plan import LaunchPlan
    from tether.supervisor.run_cgroup import Containment
    from tether.supervisor.sentry import Sentry

__all__ = ["CANCEL_SIGNALS", "LaunchAttempt", "SignalWakeup", "launch"]

#: Signals that mean "stop the command gracefully" when sent to the supervisor.
CANCEL_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: Every signal whose number the wakeup pipe carries.
_HANDLED: Final = frozenset((*CANCEL_SIGNALS, signal.SIGCHLD))


class SignalWakeup:
    """Signals delivered as bytes on a pipe, read in the loop, never handled in a handler."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        #: Bytes read from the pipe by someone else (the sentry), not drained yet.
        self.pending = b""
        signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for number in _HANDLED:
            signal.signal(number, _wake_only)

    def drain(self) -> list[int]:
        """Return the signals received since the last call, in order.

        Only the signals handled here count: any other byte on the pipe was not
        written by a signal handler (the command, as the same user, can open
        the pipe through ``/proc`` and write to it), and is ignored.
        """
        received = [number for number in self.pending if number in _HANDLED]
        self.pending = b""
        while True:
            try:
                chunk = os.read(self.read_fd, 256)
            except BlockingIOError:
                return received
            if not chunk:
                return received
            received += [number for number in chunk if number in _HANDLED]


def _wake_only(_number: int, _frame: object) -> None:
    """Do nothing: the wakeup fd already carries the signal to the loop."""


class LaunchAttempt:
    """How the launch went: the command (or why there is none), when, and the wakeup pipe.

    ``reserve`` holds the spare descriptors kept for stopping the command's
    tree (empty when there is no command); ``sentry`` watches the run until
    the loop takes over (``None`` when there is no command, or when the loop
    was loaded before the launch and takes over at once).
    """

    __slots__ = ("at", "command", "failure", "reserve", "sentry", "wakeup")

    def __init__(
        self,
        *,
        wakeup: SignalWakeup,
        at: float,
        command: Command | None = None,
        failure: CommandNotStarted | None = None,
    ) -> None:
        self.wakeup = wakeup
        self.at = at
        self.command = command
        self.failure = failure
        self.reserve = DescriptorReserve()
        self.sentry: Sentry | None = None


def launch(
    plan: LaunchPlan, status: StatusWriter, containment: Containment | None = None
) -> LaunchAttempt:
    """Start the command of ``plan`` under a supervisor that is ready to watch it.

    ``status`` is the channel to the caller (``spawned``, ``started``);
    ``containment`` is the run's cgroup as the supervisor prepared it early
    (:mod:`tether.supervisor.run_cgroup`), from the plan's limits. What the
    plan's fields mean: :class:`~tether.supervisor.plan.LaunchPlan`.
    """
    become_a_supervisor()
    wakeup = SignalWakeup()
    set_child_subreaper()
    try:
        _check_descriptors(plan.close_after_launch)
        command = start_command(plan, announce=_announcer(status), containment=containment)
    except CommandNotStarted as failure:
        _discard(containment)
        result = LaunchAttempt(wakeup=wakeup, at=time.monotonic(), failure=failure)
    except OSError as error:
        _discard(containment)
        # No pidfd on the command (which start_command then killed and reaped):
        # a command tether cannot watch is a command it does not run.
        result = LaunchAttempt(wakeup=wakeup, at=time.monotonic(), failure=_unwatchable(error))
    else:
        result = LaunchAttempt(wakeup=wakeup, at=time.monotonic(), command=command)
        if _LOOP not in sys.modules:
            result.sentry = _post_sentry(plan, wakeup, command)
        status.send(
            Started(
                supervisor_pid=os.getpid(),
                pid=command.pid,
                pgid=command.pgid,
                cgroups=[] if command.cgroup is None else command.cgroup.directories,
            )
        )
    for fd in plan.close_after_launch:
        with contextlib.suppress(OSError):
            os.close(fd)
    if result.command is not None:
        result.reserve = DescriptorReserve.take()
    return result


#: The loop's module: a supervisor that loaded it before the launch (forked from a
#: zygote) needs no sentry, its loop takes over at once.
_LOOP: Final = "tether.supervisor.loop"


def _post_sentry(plan: LaunchPlan, wakeup: SignalWakeup, command: Command) -> Sentry | None:
    """A sentry on the run, or ``None`` if none can be had (no thread, no descriptor left).

    Without one the run is still watched, only from the moment the loop runs:
    everything waits, level-triggered, in the descriptors the loop reads. Its
    module is loaded here, once the command runs: nothing before the launch
    needs it.
    """
    try:
        from tether.supervisor.sentry import Sentry

        return Sentry(
            lifeline=plan.lifeline,
            wakeup=wakeup.read_fd,
            wakeup_write=wakeup.write_fd,
            leader=command.pid,
            pgid=command.pgid,
            own_group=command.own_group,
            deadline_at=plan.deadline_at,
            stop_signal=_signal_number(plan.stop_signal),
        )
    except (OSError, RuntimeError, ImportError):
        return None


def _discard(containment: Containment | None) -> None:
    """No command: no cgroup left behind, no warming child left unreaped (both idempotent)."""
    if containment is not None:
        containment.discard()


def _signal_number(name: str) -> int:
    """The number of the signal called ``name``; SIGTERM for a name this system lacks.

    Every name a request may carry: ``0`` (send nothing) and the real-time
    ones (``SIGRTMIN+2``) too, which :mod:`signal` has no attribute for. The
    spec's check let the name through; the core sends it by name later, and a
    name it cannot send is its to report.
    """
    try:
        return signal_number(name)
    except ValueError:
        return signal.SIGTERM


def _announcer(status: StatusWriter) -> Callable[[int, list[str]], None]:
    """What the command says to the caller from between its fork and its exec: ``spawned``.

    Without it, a supervisor lost after the fork and before ``started`` left
    the caller knowing nothing of a command that runs, and whatever it started
    ran on for ever.
    """
    supervisor = os.getpid()

    def announce(pid: int, cgroups: list[str]) -> None:
        status.send(Spawned(supervisor_pid=supervisor, pid=pid, pgid=pid, cgroups=cgroups))

    return announce


def _check_descriptors(freed_after_launch: tuple[int, ...]) -> None:
    """Refuse to start a command the supervisor would lack the descriptors to stop.

    Under a low open-file limit (the caller's, which the supervisor shares so
    that the command gets it), the supervisor's own descriptors may leave too
    few free to watch the command and walk its tree; it would then start a
    command it could not promise to stop.
    """
    free = free_descriptors(NEEDED) + len(freed_after_launch)
    if free < NEEDED:
        raise CommandNotStarted(
            errno.EMFILE,
            f"too few file descriptors free under the open-file limit to supervise a command "
            f"({free} free, {NEEDED} needed; raise ulimit -n)",
            "setup",
        )


def _unwatchable(error: OSError) -> CommandNotStarted:
    reason = error.strerror or str(error)
    return CommandNotStarted(error.errno, f"cannot watch the command: {reason}", "setup")

"""The ``launching`` phase: what a supervisor does before anything else, and only that.

In order: signals go to a wakeup pipe (a cancel during the launch waits there for the loop);
the supervisor becomes a subreaper; the command starts
(:func:`~tether.supervisor.command.start_command`, which says ``spawned`` from between its fork
and its exec); the sentry takes the watch; ``started`` goes out and the caller's stdio is let go
of; a few spare descriptors are kept (:mod:`~tether.supervisor.reserve`). What to launch is one
:class:`LaunchPlan`, from the checked spec (:func:`plan_from_spec`); the status channel and the
run's containment ride beside it. Why this order and so few imports: docs/architecture.md,
"The launch".
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time

from tether.core.values import DeclaredValue
from tether.linux.prctl import set_child_subreaper
from tether.shared.protocol import PASSED_ROLE, Spawned, Started, StatusWriter, encode
from tether.shared.signals import signal_number
from tether.supervisor.command import Command, CommandNotStarted, start_command
from tether.supervisor.identity import become_a_supervisor
from tether.supervisor.reserve import NEEDED, DescriptorReserve, free_descriptors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Final

    from tether.core.spec import RunSpec
    from tether.linux.run_cgroups import RunCgroups
    from tether.supervisor.sentry import Sentry

__all__ = [
    "CANCEL_SIGNALS",
    "LaunchAttempt",
    "LaunchPlan",
    "SignalWakeup",
    "launch",
    "plan_from_spec",
]

#: Signals that mean "stop the command gracefully" when sent to the supervisor.
CANCEL_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

#: Every signal whose number the wakeup pipe carries.
_HANDLED: Final = frozenset((*CANCEL_SIGNALS, signal.SIGCHLD))


class SignalWakeup:
    """Signals delivered as bytes on a pipe, read in the loop, never handled in a handler."""

    def __init__(self) -> None:
        #: Why there is no pipe (``-1`` for both ends): then no command may start.
        self.failure: OSError | None = None
        try:
            self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as error:
            self.read_fd = self.write_fd = -1
            self.failure = error
        #: Bytes read from the pipe by someone else (the sentry), not drained yet.
        self.pending = b""
        if self.write_fd >= 0:
            signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        for number in _HANDLED:
            signal.signal(number, _wake_only)

    def drain(self) -> list[int]:
        """The signals received since the last call, in order; any other byte (the command can
        open the pipe through ``/proc`` and write to it) is ignored."""
        received = [number for number in self.pending if number in _HANDLED]
        self.pending = b""
        while self.read_fd >= 0:
            try:
                chunk = os.read(self.read_fd, 256)
            except BlockingIOError:
                return received
            if not chunk:
                return received
            received += [number for number in chunk if number in _HANDLED]
        return received


def _wake_only(_number: int, _frame: object) -> None:
    """Do nothing: the wakeup fd already carries the signal to the loop."""


class LaunchAttempt:
    """How the launch went: the command (or why there is none), when, and the wakeup pipe.

    ``reserve``: spare descriptors for stopping the tree; ``sentry``: the watch until the loop
    runs (``None`` without a command, or when the loop was loaded before the launch).
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


class LaunchPlan(DeclaredValue, kw_only=True):
    """How to start one command and watch it until the loop runs: every launch option, once."""

    argv: tuple[str, ...]
    #: A path, or a descriptor of the caller's directory (held: its name may be gone or lead
    #: elsewhere by now); ``None``: the supervisor's own.
    cwd: str | int | None = None
    #: ``None``: the supervisor's own.
    env: Mapping[str, str] | None = None
    umask: int | None = None
    #: Signal numbers the command starts with ignored, as its caller had them.
    ignored_signals: tuple[int, ...] = ()
    #: The caller's process group, for a command on the caller's terminal.
    join_group: int | None = None
    #: Checked (:mod:`tether.core.limits`); without a cgroup for them nothing starts.
    limits: Mapping[str, object] | None = None
    #: The command's standard streams (``None``: the supervisor's own).
    stdin: int | None = None
    stdout: int | None = None
    stderr: int | None = None
    #: (its number in the command, the descriptor here): the only ones it gets besides stdio.
    pass_fds: tuple[tuple[int, int], ...] = ()
    #: Only the command needs these (the caller's stdio): closed once it has its copies, so a
    #: reader of the caller's output sees end of file when the command is done.
    close_after_launch: tuple[int, ...] = ()
    #: What the sentry watches and sends until the loop runs (the deadline: monotonic).
    lifeline: int | None = None
    deadline_at: float | None = None
    stop_signal: str = "SIGTERM"


def plan_from_spec(spec: RunSpec, inherited: tuple[int, ...] = ()) -> LaunchPlan:
    """The plan of ``spec``'s run (checked, with every role of :data:`~tether.core.spec.ROLES`).

    ``inherited``: descriptors this process inherited for the command at the same numbers
    (forked from ``tether run``); the API's arrive by role (``pass:N``).
    """
    fds = spec.fds
    return LaunchPlan(
        argv=spec.argv,
        cwd=fds.get("cwd", spec.cwd),
        env=spec.env,
        umask=spec.umask,
        ignored_signals=spec.ignored_signals,
        join_group=spec.join_group,
        limits=spec.limits,
        stdin=fds["stdin"],
        stdout=fds["stdout"],
        stderr=fds["stderr"],
        pass_fds=tuple((fd, fd) for fd in inherited)
        + tuple(
            (int(role.removeprefix(PASSED_ROLE)), fd)
            for role, fd in fds.items()
            if role.startswith(PASSED_ROLE)
        ),
        close_after_launch=tuple(
            fds[role] for role in ("stdin", "stdout", "stderr", "cwd") if role in fds
        ),
        lifeline=fds["lifeline"],
        deadline_at=spec.deadline_at,
        stop_signal=spec.stop_signal,
    )


def launch(
    plan: LaunchPlan, status: StatusWriter, containment: RunCgroups | None = None
) -> LaunchAttempt:
    """Start the command of ``plan`` under a supervisor that is ready to watch it.

    ``status``: the channel to the caller; ``containment``: the run's cgroup, prepared early
    (:mod:`tether.supervisor.cgroup_choice`).
    """
    become_a_supervisor()
    wakeup = SignalWakeup()
    set_child_subreaper()
    try:
        if wakeup.failure is not None:
            raise _no_signal_pipe(wakeup.failure)
        _check_descriptors(plan.close_after_launch)
        command = start_command(plan, announce=_announcer(status), containment=containment)
    except (CommandNotStarted, OSError) as error:
        if containment is not None:
            containment.discard()  # no cgroup left behind, no warming child unreaped
        # An OSError: no pidfd on the command (start_command killed and reaped it): not run.
        failure = (
            error
            if isinstance(error, CommandNotStarted)
            else _setup_failure("cannot watch the command", error)
        )
        result = LaunchAttempt(wakeup=wakeup, at=time.monotonic(), failure=failure)
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


#: A supervisor that loaded the loop before the launch (from a zygote) needs no sentry.
_LOOP: Final = "tether.supervisor.loop"


def _post_sentry(plan: LaunchPlan, wakeup: SignalWakeup, command: Command) -> Sentry | None:
    """A sentry on the run, or ``None`` if none can be had (then everything waits,
    level-triggered, for the loop)."""
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


def _signal_number(name: str) -> int:
    """The number of the signal called ``name`` (``0``, ``SIGRTMIN+2`` too); SIGTERM for a
    name this system lacks: the core sends it by name later, and reports what it cannot send."""
    try:
        return signal_number(name)
    except ValueError:
        return signal.SIGTERM


def _announcer(status: StatusWriter) -> Callable[[list[str]], Callable[[int], None]]:
    """What the command says to the caller from between its fork and its exec: ``spawned``
    (so a supervisor lost before ``started`` leaves no command unknown to the caller),
    encoded before the fork but for the pid: the child only formats it in."""
    supervisor = os.getpid()

    def prepared(cgroups: list[str]) -> Callable[[int], None]:
        if status.closed:  # no caller to tell (and no json to load)
            return _nobody
        placeholder = Spawned(supervisor_pid=supervisor, pid=_NO_PID, pgid=_NO_PID, cgroups=cgroups)
        template = encode(placeholder).replace(b"%", b"%%")
        if template.count(_NO_PID_DIGITS) != 2:  # the digits in a directory's name too
            return lambda pid: status.send(
                Spawned(supervisor_pid=supervisor, pid=pid, pgid=pid, cgroups=cgroups)
            )
        template = template.replace(_NO_PID_DIGITS, b"%d")
        return lambda pid: status.write(template % (pid, pid))

    return prepared


def _nobody(_pid: int) -> None:
    pass


#: A pid no process has (above any ``pid_max``), which :func:`_announcer` formats the real one
#: into: its digits appear in the message only where the pid and the group's id are.
_NO_PID: Final = 4_611_686_018_427_387_903
_NO_PID_DIGITS: Final = str(_NO_PID).encode()


def _check_descriptors(freed_after_launch: tuple[int, ...]) -> None:
    """Refuse to start a command the supervisor would lack the descriptors to stop (under a
    low open-file limit, the caller's, which it shares so that the command gets it)."""
    free = free_descriptors(NEEDED) + len(freed_after_launch)
    if free < NEEDED:
        raise CommandNotStarted(
            errno.EMFILE, _TOO_FEW.format(f"{free} free, {NEEDED} needed"), "setup"
        )


_TOO_FEW: Final = (
    "too few file descriptors free under the open-file limit to supervise a command "
    "({}; raise ulimit -n)"
)


def _no_signal_pipe(error: OSError) -> CommandNotStarted:
    """No pipe for the signals that stop the command: a command tether could not stop."""
    if error.errno == errno.EMFILE:
        return CommandNotStarted(errno.EMFILE, _TOO_FEW.format("none for its signal pipe"), "setup")
    return _setup_failure("cannot make the signal pipe", error)


def _setup_failure(what: str, error: OSError) -> CommandNotStarted:
    return CommandNotStarted(error.errno, f"{what}: {error.strerror or error}", "setup")

"""The ``launching`` phase: what a supervisor does before anything else.

The command should start as early as the interpreter allows, so
this module does only what must come before it, and imports only what that
needs (``os``, ``signal``, ``_ctypes`` for ``prctl``, and ``json`` where a status
message is sent): no ``subprocess`` (:mod:`tether.supervisor.spawn` forks and execs), no
``dataclasses``, no ``typing`` at run time, none of the core but the base of its
immutable values (:mod:`tether.core.values`, which imports nothing), and neither
``transitions`` nor ``structlog``. In order:

1. **Signals first.** SIGTERM, SIGINT, SIGHUP and SIGCHLD get handlers that
   do nothing but let Python write the signal's number to a wakeup pipe, so
   a cancel that arrives while the command is being started is not lost: it
   waits in the pipe, level-triggered, for the loop.
2. **Subreaper.** The supervisor becomes the reaper of its orphaned
   descendants before there are any.
3. **The command**, through :func:`tether.supervisor.command.start_command`;
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

**The plan.** What to launch is one value, a :class:`LaunchPlan`, made once
at each door and carried unchanged through :func:`launch` to
:func:`~tether.supervisor.command.start_command` (the command's fork) and to
the sentry: a launch option is declared once, as one of its fields, and read
where it is used, not passed on by keyword at every step. A supervisor
(spawned, forked from ``tether run``, or from a zygote) reads it from the
spec's fields with :func:`plan_from_spec`, and the descriptors the caller
passed by role. Those are the raw JSON's fields: the command starts before
:class:`~tether.core.spec.RunSpec` is even loaded, and the spec is checked
whole right after the launch, so a field of the wrong kind is left at the
plan's default here rather than trusted, and the check refuses it afterwards
(and stops the command), as a run's spec is refused at any other time.
``tether run`` hands over the spec it checked itself, as the same fields. The
seed door, which launches its command itself, makes the plan from its own
options. The plan lives here, not in a module of its own, because every door
has this module loaded before its launch anyway: one more module to find and
read would cost each launch about a millisecond.

The plan holds values only: what the command gets and what the sentry
watches, descriptors included as numbers. Two things ride beside it, as
arguments of :func:`launch`: the status channel, a live writer the launch
reports through and the loop keeps using after it; and the run's
containment, a cgroup already made (early, so that the kernel's wait for
the join's lock passes while the supervisor loads) that the launch takes or
discards. Neither is an option of the run, and a value that held them could
not be compared, shown or built in a test.
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
from tether.shared.protocol import PASSED_ROLE, Spawned, Started, StatusWriter
from tether.shared.signals import signal_number
from tether.supervisor.command import Command, CommandNotStarted, start_command
from tether.supervisor.identity import become_a_supervisor
from tether.supervisor.reserve import NEEDED, DescriptorReserve, free_descriptors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Final

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
            # Under an open-file limit with no descriptor left for it (the interpreter may
            # hold one more of its own: libffi's trampolines keep their library open).
            self.read_fd = self.write_fd = -1
            self.failure = error
        #: Bytes read from the pipe by someone else (the sentry), not drained yet.
        self.pending = b""
        if self.write_fd >= 0:
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


class LaunchPlan(DeclaredValue, kw_only=True):
    """How to start one command and watch it until the loop runs: every launch option, once.

    See the module, "The plan", for where it comes from and what rides beside it.
    """

    argv: tuple[str, ...]
    #: The caller's working directory: a path, or a descriptor of the directory (the caller's
    #: own, held open because its name may be gone or lead elsewhere by now); ``None``: the
    #: supervisor's own.
    cwd: str | int | None = None
    #: The command's environment and umask (``None``: the supervisor's own).
    env: Mapping[str, str] | None = None
    umask: int | None = None
    #: Signal numbers the command starts with ignored, as its caller had them.
    ignored_signals: tuple[int, ...] = ()
    #: The caller's process group, for a command that uses the caller's terminal: it joins
    #: that group instead of leading one of its own.
    join_group: int | None = None
    #: Resource limits (:mod:`tether.core.limits`), written to the command's cgroup before
    #: it can join it; without a cgroup for them the command is not started.
    limits: Mapping[str, object] | None = None
    #: The command's standard streams (``None``: the supervisor's own).
    stdin: int | None = None
    stdout: int | None = None
    stderr: int | None = None
    #: Descriptors handed to the command, as pairs (its number there, the descriptor here):
    #: those ``tether run`` and ``tether timeout`` inherited, the API's ``pass_fds``; the
    #: command gets no other. The launch lets go of them, on every path, before it runs.
    pass_fds: tuple[tuple[int, int], ...] = ()
    #: Descriptors only the command needs (the caller's stdio): let go of as soon as the
    #: command has its copies, so a reader of the caller's output sees end of file when the
    #: command is done, not when the supervisor is.
    close_after_launch: tuple[int, ...] = ()
    #: What the sentry watches and sends until the loop runs: the lifeline's read end, the
    #: deadline (monotonic), and the signal that starts a stop.
    lifeline: int | None = None
    deadline_at: float | None = None
    stop_signal: str = "SIGTERM"


def plan_from_spec(
    fields: Mapping[str, object], fds: Mapping[str, int], inherited: tuple[int, ...] = ()
) -> LaunchPlan:
    """The plan of a supervisor's run, from its spec's ``fields`` and descriptors by role.

    ``inherited`` are descriptors this process inherited for the command, at
    the same numbers (a supervisor forked from ``tether run``); the API's
    arrive by role (``pass:N``, N their number in the command). A field of the
    wrong kind is left at its default (see the module).
    """
    path, env, umask = fields.get("cwd"), fields.get("env"), fields.get("umask")
    ignored, group = fields.get("ignored_signals"), fields.get("join_group")
    limits = fields.get("limits")
    # The caller's directory, held by descriptor where the door could (role ``cwd``).
    cwd = fds["cwd"] if "cwd" in fds else (path if isinstance(path, str) else None)
    return LaunchPlan(
        argv=tuple(fields["argv"]),  # type: ignore[arg-type]  # its words: the check's
        cwd=cwd,
        env=env if isinstance(env, dict) else None,
        umask=umask if isinstance(umask, int) else None,
        ignored_signals=tuple(ignored) if isinstance(ignored, list | tuple) else (),
        join_group=group if isinstance(group, int) else None,
        limits=limits if isinstance(limits, dict) else None,
        stdin=fds["stdin"],
        stdout=fds["stdout"],
        stderr=fds["stderr"],
        pass_fds=tuple((fd, fd) for fd in inherited)
        + tuple(
            (int(role.removeprefix(PASSED_ROLE)), fd)
            for role, fd in fds.items()
            if role.startswith(PASSED_ROLE)
        ),
        # Only the command needs these: the caller's stdio, and its working directory.
        close_after_launch=tuple(
            fds[role] for role in ("stdin", "stdout", "stderr", "cwd") if role in fds
        ),
        lifeline=fds["lifeline"],
        deadline_at=_deadline_at(fields),
        stop_signal=str(fields.get("stop_signal", "SIGTERM")),
    )


def _deadline_at(fields: Mapping[str, object]) -> float | None:
    """The deadline in the spec's fields; ``None`` if none (or none that makes sense).

    A deadline that cannot be read here is the spec's check to refuse, after the launch.
    """
    asked_at, seconds = fields.get("asked_at"), fields.get("deadline_seconds")
    if isinstance(asked_at, int | float) and isinstance(seconds, int | float):
        return float(asked_at) + float(seconds)
    return None


def launch(
    plan: LaunchPlan, status: StatusWriter, containment: RunCgroups | None = None
) -> LaunchAttempt:
    """Start the command of ``plan`` under a supervisor that is ready to watch it.

    ``status`` is the channel to the caller (``spawned``, ``started``);
    ``containment`` is the run's cgroup as the supervisor prepared it early
    (:mod:`tether.supervisor.cgroup_choice`), from the plan's limits. What the
    plan's fields mean: :class:`LaunchPlan`.
    """
    become_a_supervisor()
    wakeup = SignalWakeup()
    set_child_subreaper()
    try:
        if wakeup.failure is not None:
            raise _no_signal_pipe(wakeup.failure)
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


def _discard(containment: RunCgroups | None) -> None:
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


def _no_signal_pipe(error: OSError) -> CommandNotStarted:
    """No pipe for the signals that stop the command: a command tether could not stop."""
    if error.errno == errno.EMFILE:
        return CommandNotStarted(
            errno.EMFILE,
            "too few file descriptors free under the open-file limit to supervise a command "
            "(none for its signal pipe; raise ulimit -n)",
            "setup",
        )
    reason = error.strerror or str(error)
    return CommandNotStarted(error.errno, f"cannot make the signal pipe: {reason}", "setup")


def _unwatchable(error: OSError) -> CommandNotStarted:
    reason = error.strerror or str(error)
    return CommandNotStarted(error.errno, f"cannot watch the command: {reason}", "setup")

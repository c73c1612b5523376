"""The launch plan: everything the command's launch needs, as one value from the door to the fork.

Each door makes the plan once, and it travels unchanged through
:func:`~tether.supervisor.launch.launch` to
:func:`~tether.supervisor.command.start_command` (the command's fork) and to
the sentry: a launch option is declared once, as a field of
:class:`LaunchPlan`, and read where it is used, instead of being passed on
by keyword at every step.

Where the plan comes from:

* A supervisor (spawned, forked from ``tether run``, or from a zygote) reads
  it from the spec's fields with :func:`plan_from_spec`, and the descriptors
  the caller passed by role. The fields are the raw JSON's: the command starts
  before :class:`~tether.core.spec.RunSpec` is even loaded, and the spec is
  checked whole right after the launch. A field of the wrong kind here is
  therefore left at the plan's default rather than trusted: the check refuses
  it afterwards (and stops the command), as a run's spec is refused at any
  other time. ``tether run`` hands over the spec it checked itself, as the
  same fields (:meth:`~tether.core.values.FrozenValue.as_dict`).
* The seed door, which launches its command itself, in the foreground, makes
  it from its own options (its stdio, its ``--parent-fd``).

The plan holds values only: what the command gets and what the sentry
watches, descriptors included as numbers. Two things ride beside it, as
arguments of their own: the status channel (:class:`~tether.shared.protocol.StatusWriter`),
a live writer the launch reports through and the loop keeps using after it;
and the run's containment (:class:`~tether.supervisor.run_cgroup.Containment`),
a cgroup already made from :attr:`LaunchPlan.limits` that the launch takes
or discards. Neither is an option of the run, and a value that held them
could not be compared, shown or built in a test.

Before the launch: nothing is imported here but :mod:`tether.core.values`
(no ``typing``, no ``dataclasses``).
"""

from __future__ import annotations

from tether.core.values import DeclaredValue
from tether.shared.protocol import PASSED_ROLE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["LaunchPlan", "plan_from_spec"]


class LaunchPlan(DeclaredValue):
    """How to start one command and watch it until the loop runs (see the module)."""

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
    cwd, env, umask = fields.get("cwd"), fields.get("env"), fields.get("umask")
    ignored, group = fields.get("ignored_signals"), fields.get("join_group")
    limits = fields.get("limits")
    return LaunchPlan(
        argv=tuple(fields["argv"]),  # type: ignore[arg-type]  # words: checked after the launch
        cwd=fds["cwd"] if "cwd" in fds else cwd if isinstance(cwd, str) else None,
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

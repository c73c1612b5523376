"""The run's cgroup, chosen and made first, while the kernel readies the lock its join takes.

Which containment a run gets is the supervisor's choice, read from
``TETHER_CONTAINMENT`` (``auto``, ``sweep`` or ``cgroup``; see
:mod:`tether.supervisor.command`), and resource limits need a cgroup of their
own. This module makes that choice and that cgroup, and it does so *first*,
as soon as a supervisor knows its spec and before it loads what starts the
command, for one reason: the command's join.

The join (the command writing ``0`` to its cgroup's ``cgroup.procs``, between
fork and exec) takes a lock the whole machine shares, and after a pause that
lock waits out an RCU grace period: 5 to 20 ms on the 2-core machine, the
largest single cost between a supervisor's start and its command's ``exec``
(:func:`tether.linux.cgroup.warm_attach_lock` says more). A command born in
its cgroup v2 (:mod:`tether.linux.clone3`) never writes, and needs none of
what follows; it is for a command that must still join by writing (a cgroup
v1 that a limit needs, a kernel that cannot fork into a cgroup:
:meth:`Containment.join_takes_lock`). A process that
takes the lock while nobody needs it pays that wait for whoever comes within
the next grace period. So :func:`prepare_containment`, once the cgroup is
made, forks a child that takes the lock for nothing and exits, and the
supervisor goes on loading; :meth:`Containment.take`, just before the
command's fork, reaps that child (waiting out whatever is left of its wait)
and hands over the cgroup, whose join is then quick. The order matters: the
kernel holds its cgroup mutex through that wait, so a ``mkdir`` in the
cgroup tree waits with it; the cgroup is made before the child starts, never
after.

Where the limits need a scope of the user's systemd
(:mod:`tether.linux.systemd_scope`), the process that makes the cgroup is
the one moved into the scope, so it must be the supervisor: the API's
zygote, which prepares the cgroup of each supervisor it forks, leaves that
one to the supervisor itself (:attr:`Containment.deferred`).

Nothing here raises: a setting or limits that stop the launch, or a cgroup
that is required and cannot be made, are kept and raised by
:meth:`Containment.take`, in the launch, where every failure to start is
reported (a ``launch_failed`` record, status 125). A supervisor whose launch
fails before that calls :meth:`Containment.discard`, which removes the
cgroup.
"""

from __future__ import annotations

import contextlib
import os

from tether.core.limits import (
    LIMIT_CONTROLLERS,
    LimitError,
    limit_controllers,
    limit_files,
    limit_files_v1,
    parse_limits,
)
from tether.linux.cgroup import CgroupUnavailable, warm_attach_lock
from tether.linux.run_cgroups import SCOPE_BACKENDS, RunCgroups, plan_backends

# Run before the command starts: no ``typing`` or ``dataclasses`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final, Literal

__all__ = [
    "CONTAINMENT_SETTINGS",
    "CONTAINMENT_VARIABLE",
    "CommandNotStarted",
    "Containment",
    "prepare_containment",
]

#: The environment variable (read by the supervisor) that chooses the containment.
CONTAINMENT_VARIABLE: Final = "TETHER_CONTAINMENT"

#: Its accepted values; unset or empty means ``auto``.
CONTAINMENT_SETTINGS: Final = ("auto", "sweep", "cgroup")


class CommandNotStarted(Exception):
    """The command could not be started."""

    def __init__(self, errno: int | None, message: str, stage: Literal["exec", "setup"]) -> None:
        super().__init__(message)
        self.errno = errno
        self.message = message
        self.stage: Literal["exec", "setup"] = stage

    def __reduce__(self) -> tuple[object, ...]:
        return (CommandNotStarted, (self.errno, self.message, self.stage))


class Containment:
    """The run's containment as prepared: its cgroup (or none), or why the command cannot start.

    ``required``: the command must join the cgroup or not start
    (``TETHER_CONTAINMENT=cgroup``, or limits); ``limited``: there are limits;
    ``deferred``: nothing was made, because the cgroup needs a systemd scope
    that only the supervisor itself may be moved into.
    """

    __slots__ = ("_cgroup", "_failure", "_warming", "deferred", "limited", "required")

    def __init__(
        self,
        *,
        cgroup: RunCgroups | None = None,
        failure: CommandNotStarted | None = None,
        required: bool = False,
        limited: bool = False,
        warming: int | None = None,
        deferred: bool = False,
    ) -> None:
        self._cgroup = cgroup
        self._failure = failure
        self._warming = warming
        self.required = required
        self.limited = limited
        self.deferred = deferred

    def take(self) -> RunCgroups | None:
        """The cgroup for the command to join (``None``: the sweep alone), once the lock is warm.

        Raise the :class:`CommandNotStarted` kept by :func:`prepare_containment`
        instead, if there is one, and for a :attr:`deferred` containment (its
        cgroup was never made here). Reaps the warming child first: a
        supervisor's children are its command's tree, and nothing else.
        """
        self._reap()
        if self._failure is not None:
            raise self._failure
        if self.deferred:  # never a command without the cgroup its limits need
            raise CommandNotStarted(
                None, "the run's cgroup was left to its supervisor, which never made it", "setup"
            )
        return self._cgroup

    def descriptors(self) -> list[int]:
        """The descriptors this holds, which a process closing every other one must keep."""
        return [] if self._cgroup is None else self._cgroup.join_descriptors

    def join_takes_lock(self) -> bool:
        """Whether the command's join will wait for the lock a warm-up readies
        (:attr:`RunCgroups.join_takes_lock`): not for a command born in its only cgroup."""
        return self._cgroup is not None and self._cgroup.join_takes_lock

    def intact(self) -> bool:
        """Whether the cgroup made is still there, still the one made, and empty (or none was
        made): looked at before a cgroup made ahead of its request is used."""
        return self._cgroup is None or self._cgroup.intact()

    def release(self) -> None:
        """Hand the cgroup on to a forked child: this process keeps no descriptor of it."""
        if self._cgroup is not None:
            self._cgroup.close_join()

    def discard(self) -> None:
        """The command will not start: remove the cgroup, reap the warming child."""
        self._reap()
        if self._cgroup is not None:
            self._cgroup.discard()
            self._cgroup = None

    def _reap(self) -> None:
        if self._warming is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._warming, 0)
            self._warming = None


def prepare_containment(
    limits: Mapping[str, object] | None,
    *,
    warm: bool = True,
    environ: Mapping[str, str] | None = None,
    supervisor: bool = True,
) -> Containment:
    """Choose the run's containment and make its cgroup now; start warming the join's lock.

    ``warm``: fork the child that takes the lock for nothing (only worth it
    when the supervisor has work left before the command's fork).
    ``environ``: where ``TETHER_CONTAINMENT`` and the user bus are read
    (default: this process's). ``supervisor``: this process is the run's
    supervisor, which may be moved into a systemd scope; the zygote is not,
    and gets a :attr:`~Containment.deferred` containment where one is needed.
    """
    environ = os.environ if environ is None else environ
    try:
        setting = containment_setting(environ)
        checked = _checked_limits(limits)
        cgroup = _make_cgroup(setting, checked, environ, supervisor=supervisor)
    except _Deferred:
        return Containment(deferred=True)
    except CommandNotStarted as failure:
        return Containment(failure=failure)
    except OSError as error:  # none expected: RunCgroups says what it cannot do
        reason = error.strerror or str(error)
        return Containment(
            failure=CommandNotStarted(error.errno, f"cannot prepare a cgroup: {reason}", "setup")
        )
    return Containment(
        cgroup=cgroup,
        required=setting == "cgroup" or bool(checked),
        limited=bool(checked),
        warming=_start_warming()
        if warm and cgroup is not None and cgroup.join_takes_lock
        else None,
    )


def _start_warming() -> int | None:
    """Fork a child that takes the cgroup-attach lock for nothing and exits; its pid, or ``None``.

    The child runs no Python cleanup (``os._exit``), so it writes nothing and
    flushes nothing of its parent's.
    """
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:
        warm_attach_lock()
        os._exit(0)
    return pid


def containment_setting(environ: Mapping[str, str]) -> str:
    """Return ``TETHER_CONTAINMENT`` (``auto`` if unset); :class:`CommandNotStarted` if bad."""
    value = environ.get(CONTAINMENT_VARIABLE, "") or "auto"
    if value not in CONTAINMENT_SETTINGS:
        raise CommandNotStarted(
            None,
            f"{CONTAINMENT_VARIABLE} must be one of {', '.join(CONTAINMENT_SETTINGS)}, "
            f"not {value!r}",
            "setup",
        )
    return value


class _Deferred(Exception):
    """The cgroup needs a systemd scope, and this process is not the one to move into it."""


def _make_cgroup(
    setting: str,
    limits: Mapping[str, int | float],
    environ: Mapping[str, str],
    *,
    supervisor: bool,
) -> RunCgroups | None:
    if limits:
        return _limited_cgroup(setting, limits, environ, supervisor=supervisor)
    if setting == "sweep":
        return None
    try:
        return RunCgroups.create()
    except CgroupUnavailable as why:
        if setting == "cgroup":
            raise CommandNotStarted(
                None, f"{CONTAINMENT_VARIABLE}=cgroup, but no cgroup can be made: {why}", "setup"
            ) from None
        return None


def _limited_cgroup(
    setting: str,
    limits: Mapping[str, int | float],
    environ: Mapping[str, str],
    *,
    supervisor: bool,
) -> RunCgroups:
    """The run's cgroup with its limits written, or why there can be none (never: no limits).

    A limit asked for and not applied would be a promise silently broken, and
    per-process rlimits are no substitute (they bound each process, not the
    tree), so a run with limits and no cgroup for them does not start.
    """
    if setting == "sweep":
        raise CommandNotStarted(
            None,
            f"resource limits need a cgroup of the run's own, but {CONTAINMENT_VARIABLE}=sweep",
            "setup",
        )
    try:
        backends, hierarchies = plan_backends(limit_controllers(limits), environ=environ)
        if SCOPE_BACKENDS.intersection(backends.values()) and not supervisor:
            raise _Deferred
        v1_limits = {
            name: value
            for name, value in limits.items()
            if backends[LIMIT_CONTROLLERS[name]] == "cgroup1"
        }
        try:
            v1_files = limit_files_v1(v1_limits) if v1_limits else {}
        except LimitError as error:
            raise CgroupUnavailable(str(error)) from None
        return RunCgroups.create(
            backends=backends,
            hierarchies=hierarchies,
            v2_files=limit_files(limits),
            v1_files=v1_files,
            enforced_by={name: backends[LIMIT_CONTROLLERS[name]] for name in limits},
            limit_controllers={name: LIMIT_CONTROLLERS[name] for name in limits},
            environ=environ,
        )
    except CgroupUnavailable as why:
        raise CommandNotStarted(None, f"cannot set resource limits: {why}", "setup") from None


def _checked_limits(limits: Mapping[str, object] | None) -> dict[str, int | float]:
    try:
        return parse_limits(limits or {})
    except (LimitError, TypeError, AttributeError) as error:
        raise CommandNotStarted(None, f"bad resource limits: {error}", "setup") from None

"""The run's cgroups chosen (``TETHER_CONTAINMENT``, limits), made first, their lock warmed.

:func:`prepare_run_cgroups` runs as soon as a supervisor knows its spec, before
it loads what starts the command, and raises nothing: a refusal is kept in the
:class:`~tether.linux.run_cgroups.RunCgroups` and raised by its ``take`` in the
launch. Why first, and why the warm-up: ``docs/containment.md`` ("The join's lock").
"""

from __future__ import annotations

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

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

__all__ = [
    "CONTAINMENT_SETTINGS",
    "CONTAINMENT_VARIABLE",
    "containment_setting",
    "prepare_run_cgroups",
    "start_warming",
]

#: The environment variable (read by the supervisor) that chooses the containment.
CONTAINMENT_VARIABLE: Final = "TETHER_CONTAINMENT"

#: Its accepted values; unset or empty means ``auto``.
CONTAINMENT_SETTINGS: Final = ("auto", "sweep", "cgroup")


def prepare_run_cgroups(
    limits: Mapping[str, object] | None,
    *,
    warm: bool = True,
    environ: Mapping[str, str] | None = None,
    supervisor: bool = True,
) -> RunCgroups:
    """Choose the run's containment, make its cgroups now, start warming the join's lock.

    ``warm``: fork the warming child. ``environ``: where ``TETHER_CONTAINMENT``
    and the user bus are read. ``supervisor``: this process may be moved into a
    systemd scope (the zygote may not: it gets a ``deferred`` answer there).
    """
    environ = os.environ if environ is None else environ
    try:
        setting = containment_setting(environ)
        checked = _checked_limits(limits)
        made = _make(setting, checked, environ, supervisor=supervisor)
    except _Deferred:
        return RunCgroups(deferred=True)
    except CgroupUnavailable as refusal:
        return RunCgroups(refusal=refusal)
    except OSError as error:  # none expected: RunCgroups says what it cannot do
        reason = error.strerror or str(error)
        return RunCgroups(
            refusal=CgroupUnavailable(f"cannot prepare a cgroup: {reason}", error.errno)
        )
    if checked:
        made.required_by = "resource limits"
    elif setting == "cgroup":
        made.required_by = f"{CONTAINMENT_VARIABLE}=cgroup"
    if warm and made.join_takes_lock():
        made.warming = start_warming()
    return made


def start_warming() -> int | None:
    """Fork a child that takes the cgroup-attach lock for nothing and exits (``os._exit``:
    no cleanup of its parent's); its pid, or ``None``."""
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid == 0:
        warm_attach_lock()
        os._exit(0)
    return pid


def containment_setting(environ: Mapping[str, str]) -> str:
    """``TETHER_CONTAINMENT`` (``auto`` if unset); :class:`CgroupUnavailable` if not a setting."""
    value = environ.get(CONTAINMENT_VARIABLE, "") or "auto"
    if value not in CONTAINMENT_SETTINGS:
        raise CgroupUnavailable(
            f"{CONTAINMENT_VARIABLE} must be one of {', '.join(CONTAINMENT_SETTINGS)}, "
            f"not {value!r}"
        )
    return value


class _Deferred(Exception):
    """The cgroup needs a systemd scope, and this process is not the one to move into it."""


def _make(
    setting: str, limits: Mapping[str, int | float], environ: Mapping[str, str], *, supervisor: bool
) -> RunCgroups:
    if limits:
        return _limited(setting, limits, environ, supervisor=supervisor)
    if setting == "sweep":
        return RunCgroups()
    try:
        return RunCgroups.create()
    except CgroupUnavailable as why:
        if setting == "cgroup":
            raise CgroupUnavailable(
                f"{CONTAINMENT_VARIABLE}=cgroup, but no cgroup can be made: {why}"
            ) from None
        return RunCgroups()


def _limited(
    setting: str, limits: Mapping[str, int | float], environ: Mapping[str, str], *, supervisor: bool
) -> RunCgroups:
    """The run's cgroups with their limits written, or why there can be none: a limit not
    applied would be a promise broken (``docs/containment.md``)."""
    if setting == "sweep":
        raise CgroupUnavailable(
            f"resource limits need a cgroup of the run's own, but {CONTAINMENT_VARIABLE}=sweep"
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
        raise CgroupUnavailable(f"cannot set resource limits: {why}") from None


def _checked_limits(limits: Mapping[str, object] | None) -> dict[str, int | float]:
    try:
        return parse_limits(limits or {})
    except (LimitError, TypeError, AttributeError) as error:
        raise CgroupUnavailable(f"bad resource limits: {error}") from None

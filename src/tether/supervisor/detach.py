"""The detached supervisor: spawned (or forked) away from its caller, then the run's supervisor.

:func:`main` is what a spawned interpreter runs: it forks once more (so the supervisor is no
session leader and nobody's child), reads the spec from its pipe (never a command line), and
supervises. Every door's supervisor reads its spec once, strictly, before the launch
(:func:`supervise_fields`), or has it checked in memory (:func:`become`). Why: the Processes
section of docs/architecture.md; the record's directory arrives held (docs/record.md).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from tether.core.reasons import TETHER_FAILED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from tether.core.spec import RunSpec
    from tether.linux.run_cgroups import RunCgroups

__all__ = [
    "become",
    "exit_now",
    "loaded",
    "loading",
    "main",
    "supervise_fields",
]


def exit_now(status: int) -> NoReturn:
    """Flush stdout and stderr and exit with ``status`` at once: tearing down the modules a
    supervisor loaded costs about 20 ms of CPU, each time, for nothing."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def main(spec_fd: int) -> int:
    """Become the detached supervisor of the run described on ``spec_fd``."""
    loading()
    # Spawned in a session of its own already: the double fork's second step alone.
    from tether.linux.double_fork import fork_again

    fork_again()
    import json

    try:
        fields = json.loads(_read_all(spec_fd))
    except (OSError, ValueError):
        return TETHER_FAILED
    return supervise_fields(fields)


def supervise_fields(fields: object, containment: RunCgroups | None = None) -> int:
    """Supervise the run of the spec's parsed JSON ``fields``; exit when done.

    Returns only if they are not a spec's (:meth:`~tether.core.spec.RunSpec.from_fields`),
    having started nothing and told the caller why where it can. ``containment``: the run's
    cgroup, if the process that forked this one made it already.
    """
    from tether.core.spec import ROLES, RunSpec, SpecError

    try:
        spec = RunSpec.from_fields(fields)
        missing = [role for role in ROLES if role not in spec.fds]
        if missing:
            raise SpecError(f"not a tether run spec: no descriptor for {missing[0]}")
    except SpecError as error:
        _refuse(fields, error)
        if containment is not None:
            containment.discard()
        return TETHER_FAILED
    return _supervise(spec, containment)


def _refuse(fields: object, error: Exception) -> None:
    """Tell the caller, on its status channel if the spec names one, why nothing started."""
    fds = fields.get("fds") if isinstance(fields, dict) else None
    status = fds.get("status") if isinstance(fds, dict) else None
    if isinstance(status, int) and not isinstance(status, bool):
        from tether.core.reasons import Reason
        from tether.shared.protocol import Finished, StatusWriter

        with contextlib.suppress(Exception):
            StatusWriter(status).send(
                Finished(
                    reason=Reason.LAUNCH_FAILED.value,
                    exit_status=TETHER_FAILED,
                    message=f"nothing was started: {error}",
                )
            )


def become(spec: RunSpec, pass_fds: tuple[int, ...] = ()) -> NoReturn:
    """Supervise ``spec``, checked by tether's CLI, which forked this process; ``pass_fds``
    (those the program inherited) go to the command."""
    loading()
    _supervise(spec, inherited=pass_fds)


def _supervise(
    spec: RunSpec, containment: RunCgroups | None = None, *, inherited: tuple[int, ...] = ()
) -> NoReturn:
    """Launch the command of the checked ``spec``, then load the loop and supervise it."""
    if containment is None:
        from tether.supervisor.cgroup_choice import prepare_run_cgroups

        # First: the kernel's wait for the join's lock passes while the rest loads.
        containment = prepare_run_cgroups(spec.limits)
    os.chdir("/")
    # tether's own files are private; the command gets the caller's umask (in the spec).
    os.umask(0o077)

    from tether.shared.protocol import StatusWriter
    from tether.supervisor.launch import launch, plan_from_spec

    fds = spec.fds
    if "record_dir" in fds:
        with contextlib.suppress(OSError):
            os.set_inheritable(fds["record_dir"], False)
    status = StatusWriter(fds["status"])
    launched = launch(plan_from_spec(spec, inherited), status, containment)
    # Only for a failure to reach the loop, so after the launch (the sentry is watching).
    from tether.supervisor import last_resort

    try:
        from tether.supervisor.loop import supervise

        loaded()
        outcome = supervise(
            spec, launched, lifeline=fds["lifeline"], status=status, on_message=_say_nothing
        )
    except BaseException as error:
        # supervise() has a last resort of its own; this one is for reaching it.
        outcome = last_resort.abandon(launched, error, status=status, say=_say_nothing)
    exit_now(outcome)


def loading() -> None:
    """No garbage collection until :func:`loaded` (loading modules frees nothing)."""
    gc.disable()


def loaded() -> None:
    """Freeze what is loaded (never collected nor written by the collector, so pages shared
    with a parent stay shared) and collect again from here on."""
    gc.freeze()
    gc.enable()


def _say_nothing(_message: str) -> None:
    """Stderr is /dev/null here: the caller hears how the run ended on the status pipe."""


if __name__ == "__main__":  # pragma: no cover - exercised as a subprocess
    raise SystemExit(main(int(sys.argv[1])))

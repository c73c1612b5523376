"""The detached supervisor: PEP 3143's checklist, as small steps in a deliberate order.

The caller (``tether run`` or the Python API) never forks itself: it may be
multi-threaded, and forking a threaded process can deadlock the child on a lock
another thread held. Instead it spawns a fresh interpreter in a new session,
running :func:`main` here. That *intermediate* forks once more and exits at
once, so the supervisor that remains

* is not a session leader (it can never acquire a controlling terminal),
* is nobody's child to reap (it re-parents to init or the nearest subreaper),
* and survives a kill of the caller's process group or session,

while the caller only has to reap the intermediate, which is gone within
milliseconds. Then, in order: read the spec from its pipe (never from the
command line, where every user could read it), move to ``/`` so no mount is
held busy, and take a private umask for tether's own files (the command gets
the caller's umask back through the spec). Standard input, output and error
are already ``/dev/null``, so the supervisor never holds a pipe the caller's
caller waits on; the caller's own stdio arrives as extra descriptors that only
the command keeps. Only the descriptors the caller passed on purpose are open.

**The record's directory arrives as a descriptor** (role ``record_dir``),
opened and checked by the caller as it spawns this supervisor, rather than
looked up again here. The record then goes exactly where the caller's check
said it could, with no second lookup for a swapped path to slip into; the
caller needs the same directory anyway for the record it writes if this
supervisor is lost; and a refusal (a stranger's link on the way, a FIFO at the
event log's name) comes from the caller, on its terminal, before anything was
spawned. The descriptor is made close-on-exec again here, so the command never
inherits it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from tether.core.reasons import TETHER_FAILED

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
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
    "supervise_raw",
]


def exit_now(status: int) -> NoReturn:
    """Exit with ``status`` at once, skipping the interpreter's finalization.

    Once a run is recorded (record fsynced, status sent, event log closed)
    nothing is left to do, yet tearing down the modules the supervisor loaded
    (structlog, asyncio, transitions) costs about 20 ms of CPU: time the seed
    door's caller waits for, and that hundreds of supervisors stopping at once
    would spend together. Buffered output is flushed first.
    """
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
    try:
        raw = _read_all(spec_fd)
    except OSError:
        return TETHER_FAILED
    return supervise_raw(raw)


def supervise_raw(raw: bytes, containment: RunCgroups | None = None) -> int:
    """Supervise the run whose spec is ``raw`` (JSON, descriptors by role); exit when done.

    Returns only if ``raw`` is not a spec at all. ``containment``: the run's
    cgroup, if the process that forked this one made it already.
    """
    import json

    try:
        fields = json.loads(raw)
    except ValueError:
        return TETHER_FAILED
    return supervise_fields(fields, containment)


def supervise_fields(fields: object, containment: RunCgroups | None = None) -> int:
    """Supervise the run whose spec's JSON, already parsed, is ``fields``; exit when done.

    The command starts from these raw fields
    (:func:`~tether.supervisor.launch.plan_from_spec`), before the spec's own
    class is even loaded; the spec is checked whole right after
    (:meth:`~tether.core.spec.RunSpec.from_fields`, as one read from a pipe).
    A zygote's supervisor takes them parsed: its zygote read the request once,
    before forking. Returns only if ``fields`` are not a spec's at all.
    """
    if not isinstance(fields, dict) or "argv" not in fields or "fds" not in fields:
        return TETHER_FAILED
    fds = fields["fds"]

    def checked_spec() -> RunSpec:
        from tether.core.spec import RunSpec

        return RunSpec.from_fields(fields)

    return _supervise(fields, fds, checked_spec, containment)


def become(spec: RunSpec, pass_fds: tuple[int, ...] = ()) -> NoReturn:
    """Become the supervisor of ``spec``, in a process forked from tether's own CLI.

    The fork already made this process detached (see
    :func:`tether.caller.fork.fork_supervisors`) and left it only the run's
    descriptors, and ``pass_fds``, those the program inherited, for the
    command; the spec is the one the caller built and checked, already in
    memory, and its fields are read as a spec's JSON would be.
    """
    loading()
    _supervise(spec.as_dict(), spec.fds, lambda: spec, inherited=pass_fds)


def _supervise(
    fields: Mapping[str, object],
    fds: Mapping[str, int],
    checked_spec: Callable[[], RunSpec],
    containment: RunCgroups | None = None,
    *,
    inherited: tuple[int, ...] = (),
) -> NoReturn:
    """Launch the command of the spec's ``fields``, then load the loop and supervise it."""
    if containment is None:
        from tether.supervisor.cgroup_choice import prepare_run_cgroups

        # First, before the plan: the kernel's wait for the join's lock passes while the
        # rest loads. (The plan reads the limits again, the same way.)
        limits = fields.get("limits")
        containment = prepare_run_cgroups(limits if isinstance(limits, dict) else None)
    os.chdir("/")
    # The command gets the caller's umask back (it is in the spec); tether's own
    # files are private whatever the caller's umask was.
    os.umask(0o077)

    from tether.shared.protocol import StatusWriter
    from tether.supervisor.launch import launch, plan_from_spec

    if "record_dir" in fds:
        with contextlib.suppress(OSError):
            os.set_inheritable(fds["record_dir"], False)
    status = StatusWriter(fds["status"])
    plan = plan_from_spec(fields, fds, inherited)
    launched = launch(plan, status, containment)
    # Only for a failure to reach the loop, so after the launch (the sentry is watching).
    from tether.supervisor import last_resort

    try:
        from tether.supervisor.loop import supervise

        spec = checked_spec()
        loaded()
        outcome = supervise(
            spec,
            launched,
            lifeline=fds["lifeline"],
            status=status,
            on_message=_say_nothing,
        )
    except BaseException as error:
        # supervise() has a last resort of its own; this one is for reaching it.
        outcome = last_resort.abandon(launched, error, status=status, say=_say_nothing)
    exit_now(outcome)


def loading() -> None:
    """Start loading code: no garbage collection until :func:`loaded`.

    A collection while modules load finds nothing to free (every new object
    is a module's, alive for good) and costs milliseconds each time; a
    supervisor loads thousands of objects, and the allocations trigger several.
    """
    gc.disable()


def loaded() -> None:
    """Everything is loaded: freeze what is there (never collected, never written by the
    collector, so pages shared with a parent stay shared) and collect again from here on."""
    gc.freeze()
    gc.enable()


def _say_nothing(_message: str) -> None:
    """Stderr is /dev/null here: the caller hears how the run ended on the status pipe."""


if __name__ == "__main__":  # pragma: no cover - exercised as a subprocess
    raise SystemExit(main(int(sys.argv[1])))

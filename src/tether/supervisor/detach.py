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
    from collections.abc import Callable
    from typing import NoReturn

    from tether.core.spec import RunSpec
    from tether.supervisor.run_cgroup import Containment

__all__ = ["become", "exit_now", "loaded", "loading", "main", "supervise_raw"]


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


def _leave_intermediate() -> None:
    """Fork; the intermediate exits without running any cleanup, the child carries on."""
    if os.fork() > 0:
        os._exit(0)


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def main(spec_fd: int) -> int:
    """Become the detached supervisor of the run described on ``spec_fd``."""
    loading()
    _leave_intermediate()
    try:
        raw = _read_all(spec_fd)
    except OSError:
        return TETHER_FAILED
    return supervise_raw(raw)


def supervise_raw(raw: bytes, containment: Containment | None = None) -> int:
    """Supervise the run whose spec is ``raw`` (JSON, descriptors by role); exit when done.

    The command starts from the spec's raw fields, before the spec's own class
    (and ``dataclasses`` with it) is even loaded; the spec is checked whole
    right after. Returns only if ``raw`` is not a spec at all. ``containment``:
    the run's cgroup, if the process that forked this one made it already.
    """
    import json

    try:
        data = json.loads(raw)
        argv, fds = data["argv"], data["fds"]
    except (ValueError, KeyError, TypeError):
        return TETHER_FAILED

    def checked_spec() -> RunSpec:
        from tether.core.spec import RunSpec

        return RunSpec.from_json(raw)

    return _supervise(argv, fds, data, checked_spec, containment)


def become(spec: RunSpec, pass_fds: tuple[int, ...] = ()) -> NoReturn:
    """Become the supervisor of ``spec``, in a process forked from tether's own CLI.

    The fork already made this process detached (see
    :func:`tether.caller.fork.fork_supervisors`) and left it only the run's
    descriptors, and ``pass_fds``, those the program inherited, for the
    command; the spec is the one the caller built and checked, already in
    memory.
    """
    loading()
    data: dict[str, object] = {
        "cwd": spec.cwd,
        "env": spec.env,
        "umask": spec.umask,
        "asked_at": spec.asked_at,
        "deadline_seconds": spec.deadline_seconds,
        "stop_signal": spec.stop_signal,
        "limits": spec.limits,
        "ignored_signals": list(spec.ignored_signals),
        "join_group": spec.join_group,
    }
    _supervise(list(spec.argv), dict(spec.fds), data, lambda: spec, pass_fds=pass_fds)


def _supervise(
    argv: list[str],
    fds: dict[str, int],
    data: dict[str, object],
    checked_spec: Callable[[], RunSpec],
    containment: Containment | None = None,
    *,
    pass_fds: tuple[int, ...] = (),
) -> NoReturn:
    """Launch ``argv`` from the spec's raw fields, then load the loop and supervise it."""
    limits = data.get("limits")
    if containment is None:
        from tether.supervisor.run_cgroup import prepare_containment

        # First: the kernel's wait for the join's lock passes while the rest loads.
        containment = prepare_containment(limits if isinstance(limits, dict) else None)
    os.chdir("/")
    # The command gets the caller's umask back (it is in the spec); tether's own
    # files are private whatever the caller's umask was.
    os.umask(0o077)

    # The launcher built and checked the spec before sending it; the command
    # starts from its raw fields, before the spec's own class is even loaded.
    from tether.shared.protocol import PASSED_ROLE, StatusWriter
    from tether.supervisor.launch import launch

    if "record_dir" in fds:
        with contextlib.suppress(OSError):
            os.set_inheritable(fds["record_dir"], False)
    status = StatusWriter(fds["status"])
    # The API's pass_fds arrive by role (``pass:N``, N their number in the command).
    handed = tuple((fd, fd) for fd in pass_fds) + tuple(
        (int(role.removeprefix(PASSED_ROLE)), fd)
        for role, fd in fds.items()
        if role.startswith(PASSED_ROLE)
    )
    # Only the command needs these: the caller's stdio, and its working directory.
    for_the_command = tuple(
        fds[role] for role in ("stdin", "stdout", "stderr", "cwd") if role in fds
    )
    umask = data.get("umask")
    env = data.get("env")
    ignored = data.get("ignored_signals")
    join_group = data.get("join_group")
    launched = launch(
        argv,
        cwd=fds.get("cwd", data.get("cwd")),  # type: ignore[arg-type]
        env=env if isinstance(env, dict) else None,
        umask=umask if isinstance(umask, int) else None,
        ignored_signals=ignored if isinstance(ignored, list | tuple) else (),
        join_group=join_group if isinstance(join_group, int) else None,
        stdin=fds["stdin"],
        stdout=fds["stdout"],
        stderr=fds["stderr"],
        status=status,
        close_after_launch=for_the_command,
        lifeline=fds["lifeline"],
        deadline_at=_deadline_at(data),
        stop_signal=str(data.get("stop_signal", "SIGTERM")),
        limits=limits if isinstance(limits, dict) else None,
        containment=containment,
        pass_fds=handed,
    )
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


def _deadline_at(data: dict[str, object]) -> float | None:
    """The deadline in the raw spec, for the sentry; ``None`` if none (or none that makes sense).

    The spec is checked whole once its class is loaded, after the launch; a
    deadline that cannot be read here is the check's to refuse.
    """
    asked_at, seconds = data.get("asked_at"), data.get("deadline_seconds")
    if isinstance(asked_at, int | float) and isinstance(seconds, int | float):
        return float(asked_at) + float(seconds)
    return None


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

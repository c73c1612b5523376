"""The API's side of a launch: start a detached supervisor through the zygote or an interpreter.

This module runs inside *your* process, so it imports the standard library
only, and cheaply: neither ``transitions`` nor ``structlog`` is loaded on
this side. A Python program may have threads, so it is never forked: its
supervisors are forked by its zygote (:mod:`tether.caller.zygote`), or, for
the first launch or without a zygote, spawned as a fresh interpreter that
forks the supervisor and exits (see :mod:`tether.supervisor.detach`). (tether's
own command line forks itself instead: :mod:`tether.caller.fork`.)

A lost zygote is never a lost launch, and a command never runs twice: when
the zygote is lost holding a request, the run's status channel says whether
it forked (its end of file before any message, with every writer gone, means
no supervisor holds it), and only then is the fresh interpreter's path taken.

The steps are cut apart so that an event loop can take them without
blocking: :func:`spawn_supervisor` only starts the supervisor (a request to
the zygote, or a ``vfork`` and an ``exec``), :func:`send_spec` hands the spec
over where it still must, and the status channel is read by
:class:`~tether.caller.status.StatusClient`. What the run holds is opened by
:mod:`tether.caller.descriptors`, and each writing end is kept from forked
children by :mod:`tether.caller.lifeline`.
"""

from __future__ import annotations

import _socket
import os
import sys

from tether.caller.descriptors import completed, open_run
from tether.caller.launch_errors import cannot_start
from tether.caller.lifeline import Lifeline, close_all, no_fork_meanwhile
from tether.shared.poll_wait import poll_ms
from tether.shared.protocol import PASSED_ROLE

# On the path to the command's launch (``tether run`` forks its supervisor
# through here): no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Protocol

    from tether.caller.descriptors import Stream
    from tether.caller.status import StatusClient
    from tether.core.spec import RunSpec

    class Intermediate(Protocol):
        """The short-lived process between a caller and its detached supervisor, to be reaped."""

        @property
        def pid(self) -> int: ...

        def poll(self) -> int | None: ...

        def wait(self, timeout: float | None = None) -> int: ...


__all__ = [
    "LAUNCH_LIMIT",
    "PAST_THE_DEADLINE",
    "Spawn",
    "close_spec_pipe",
    "handed_over_forked",
    "launch_bound",
    "send_spec",
    "spawn_supervisor",
]

#: The directory that holds the ``tether`` package, put first on the
#: supervisor's ``sys.path`` so it runs this very copy of tether.
_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

_BOOTSTRAP: Final = (
    "import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "from tether.supervisor.detach import main; raise SystemExit(main(int(sys.argv[2])))"
)


class Spawn:
    """A supervisor spawned but not heard from yet: the caller's ends of its pipes.

    ``spec_fd`` is the write end of the spec pipe, with ``spec_data`` still to
    be written to it (:func:`send_spec`); ``intermediate`` is the short-lived
    interpreter that forks the supervisor and exits, to be reaped by the caller.

    When the run keeps a record, ``spec.fds["record_dir"]`` is the record's
    directory, held open since the spawn, under the same number in the caller
    and in the supervisor. The caller's copy is for the record it writes itself
    if the supervisor is lost; ``status`` closes it once the run is over. That
    is one more descriptor per running run.

    A plain class, not a dataclass: ``tether run`` builds one before its
    command is launched, and ``dataclasses`` would load ``inspect`` first.
    """

    __slots__ = ("intermediate", "lifeline", "spec", "spec_data", "spec_fd", "status")

    def __init__(
        self,
        *,
        spec: RunSpec,
        lifeline: Lifeline,
        status: StatusClient,
        spec_fd: int,
        spec_data: bytes,
        intermediate: Intermediate,
    ) -> None:
        self.spec = spec
        self.lifeline = lifeline
        self.status = status
        self.spec_fd = spec_fd
        self.spec_data = spec_data
        self.intermediate = intermediate


def spawn_supervisor(
    spec: RunSpec,
    *,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
    zygote: bool = True,
    pass_fds: tuple[int, ...] = (),
) -> Spawn:
    """Start ``spec``'s supervisor, through this caller's zygote or a fresh interpreter.

    Through the zygote (:mod:`tether.caller.zygote`) where it can, and then
    the supervisor is forked and has its spec when this returns; otherwise a
    fresh interpreter is spawned, and the spec is still to be sent
    (:func:`send_spec`). Blocks only for a fork in the zygote or for the spawn
    itself (a ``vfork`` and an ``exec``), about a millisecond either way, as
    :func:`asyncio.create_subprocess_exec` does. Raises :class:`LaunchError`
    (and leaves no descriptor behind) if it cannot.

    ``pass_fds`` (checked open, above 2) are the caller's descriptors the
    command gets at the same numbers: they travel with the run's by role
    (``pass:N``), and stay open here (they are the caller's own).
    """
    cwd, record_dir, opened = open_run(spec, stdin, stdout, stderr, spec_pipe=True)
    *ours, lifeline_r, lifeline_w, status_r, status_w, spec_r, spec_w = opened
    complete, passed = completed(
        spec, cwd, ours=ours, record_dir=record_dir, lifeline_r=lifeline_r, status_w=status_w
    )
    if pass_fds:
        complete = complete.replace(
            fds={**complete.fds, **{f"{PASSED_ROLE}{fd}": fd for fd in pass_fds}}
        )
    # Loaded here, not with the module: tether's own CLI forks, and needs neither.
    from tether.caller import zygote as _zygote

    # A command that joins its caller's group (its terminal) needs a supervisor in
    # the caller's session, which a zygote (in a session of its own) cannot fork.
    if zygote and spec.join_group is None and _zygote.enabled():
        forked = _zygote.fork_supervisor(
            complete.replace(fds={}).to_json(),
            list(complete.fds),
            list(complete.fds.values()),
            _PACKAGE_ROOT,
            within=_time_left(spec),
        )
        if forked == _zygote.UNKNOWN:
            # Lost with the request: the status channel says whether it forked.
            passed = tuple(fd for fd in passed if fd != status_w)
            close_all([status_w])
            if _nobody_writes(status_r, _time_left(spec, _zygote.START_LIMIT)):
                close_all([fd for fd in opened if fd != status_w])
                return spawn_supervisor(
                    spec,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=stderr,
                    zygote=False,
                    pass_fds=pass_fds,
                )
        if forked is not None:
            close_all([spec_r, spec_w])
            return handed_over_forked(
                complete, passed, lifeline_w=lifeline_w, status_r=status_r, pid=forked
            )
    passed = (*passed, spec_r, *pass_fds)
    try:
        # Under the fork lock: ``subprocess`` waits for its exec on a pipe of its
        # own, which a worker forked meanwhile by another thread would hold open.
        with no_fork_meanwhile():
            intermediate = _spawn_intermediate(spec, passed, spec_r)
    except OSError as error:
        close_all(opened)
        raise cannot_start(error) from None
    return _handed_over(
        complete,
        passed,
        lifeline_w=lifeline_w,
        status_r=status_r,
        spec_w=spec_w,
        intermediate=intermediate,
    )


def _spawn_intermediate(spec: RunSpec, passed: tuple[int, ...], spec_r: int) -> Intermediate:
    """The fresh interpreter that forks the supervisor and exits, reading the spec on ``spec_r``."""
    import subprocess

    return subprocess.Popen(
        [sys.executable, "-P", "-c", _BOOTSTRAP, _PACKAGE_ROOT, str(spec_r)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=passed,
        # A command that joins its caller's group (to use its terminal) must stay
        # in its session: the supervisor then only leaves the caller's group.
        start_new_session=spec.join_group is None,
        process_group=None if spec.join_group is None else 0,
    )


#: How long a launch without a deadline waits for its supervisor to say the command started.
LAUNCH_LIMIT: Final = 30.0
#: How long past its deadline a launch waits for that (the supervisor says how it ended).
PAST_THE_DEADLINE: Final = 5.0


def launch_bound(spec: RunSpec) -> float:
    """How long a launch waits, from now, for its supervisor to say the command started (or
    could not): until the deadline and :data:`PAST_THE_DEADLINE` after it, or
    :data:`LAUNCH_LIMIT` without a deadline. A supervisor that has said nothing by then is
    stopped or frozen (or its zygote is, holding the request): it is let go of."""
    left = _time_left(spec)
    return LAUNCH_LIMIT if left is None else max(0.0, left) + PAST_THE_DEADLINE


def _time_left(spec: RunSpec, limit: float | None = None) -> float | None:
    """Seconds left to ``spec``'s deadline, at most ``limit`` (``None``: neither bounds it)."""
    import time

    left = None if spec.deadline_seconds is None else spec.asked_at + spec.deadline_seconds
    if left is not None:
        left -= time.monotonic()
    if limit is None:
        return left
    return limit if left is None else min(limit, left)


def _nobody_writes(status_r: int, within: float | None) -> bool:
    """Whether the status channel ends before any message: no supervisor holds its other end.

    Waits for the first message or the end (the caller's own copy of the
    writing end must be closed first), at most ``within`` seconds: a channel
    still open then may have a supervisor behind it, so the run is handed
    over (and a supervisor that never speaks is a lost one, never a command
    started twice). Reads nothing: the status client does.
    """
    import select

    borrowed = _socket.socket(fileno=status_r)
    try:
        poller = select.poll()
        poller.register(status_r, select.POLLIN)
        if not poller.poll(poll_ms(within)):
            return False
        return not borrowed.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        borrowed.detach()


def _handed_over(
    complete: RunSpec,
    passed: tuple[int, ...],
    *,
    lifeline_w: int,
    status_r: int,
    spec_w: int,
    intermediate: Intermediate,
) -> Spawn:
    """Let go of what is the supervisor's now; the caller's ends of the run, as a :class:`Spawn`.

    The caller keeps the record's directory, for the record it writes itself
    should the supervisor be lost.
    """
    # Here, not with the module: tether's own CLI reaches this after its fork,
    # in parallel with the supervisor's own start.
    from tether.caller.status import HoldingStatusClient, StatusClient

    record_dir = complete.fds.get("record_dir")
    callers = {fd for role, fd in complete.fds.items() if role.startswith(PASSED_ROLE)}
    close_all([fd for fd in passed if fd != record_dir and fd not in callers])
    status = (
        StatusClient(complete, status_r)
        if record_dir is None
        else HoldingStatusClient(complete, status_r, record_dir)
    )
    return Spawn(
        spec=complete,
        lifeline=Lifeline(lifeline_w),
        status=status,
        spec_fd=spec_w,
        spec_data=complete.to_json() if spec_w >= 0 else b"",
        intermediate=intermediate,
    )


def handed_over_forked(
    complete: RunSpec, passed: tuple[int, ...], *, lifeline_w: int, status_r: int, pid: int
) -> Spawn:
    """:func:`_handed_over` for a supervisor forked with its spec (by the zygote or the CLI).

    ``pid`` is the intermediate, already reaped by whoever forked it.
    """
    return _handed_over(
        complete,
        passed,
        lifeline_w=lifeline_w,
        status_r=status_r,
        spec_w=-1,
        intermediate=_Reaped(pid),
    )


def send_spec(spawn: Spawn) -> None:
    """Write the spec and close its pipe, blocking if the pipe is full.

    A supervisor that died before reading is not an error here: the caller
    sees it as a status pipe that ends without ``started``.
    """
    if spawn.spec_fd < 0:
        return  # a forked supervisor has its spec already
    data = memoryview(spawn.spec_data)
    try:
        while data:
            data = data[os.write(spawn.spec_fd, data) :]
    except OSError:
        pass
    finally:
        close_spec_pipe(spawn.spec_fd)


def close_spec_pipe(fd: int) -> None:
    """Close the spec pipe's writing end once the spec is written (so no fork keeps it after)."""
    close_all([fd])


class _Reaped:
    """The intermediate of a forked supervisor: already reaped when the caller sees it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode = 0

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

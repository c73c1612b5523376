"""The API's side of a launch: start a detached supervisor through the zygote or an interpreter.

It runs inside *your* process, which may have threads, so it never forks it: the zygote forks
(:mod:`tether.caller.zygote`), or a fresh interpreter is spawned that forks the supervisor and
exits (:mod:`tether.supervisor.detach`). A zygote lost holding a request is never a lost launch
nor a command run twice. The steps are cut apart so that an event loop can take them without
blocking. Why: docs/architecture.md, "Processes".
"""

from __future__ import annotations

import _socket
import os
import sys

from tether.caller.descriptors import completed, open_run
from tether.caller.launch_errors import cannot_start
from tether.caller.lifeline import Lifeline, close_all, no_fork_meanwhile, spec_pipe
from tether.core.values import DeclaredValue
from tether.shared.poll_wait import poll_ms
from tether.shared.protocol import PASSED_ROLE

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


class Spawn(DeclaredValue, kw_only=True):
    """A supervisor spawned but not heard from yet: the caller's ends of its pipes.

    ``spec_data`` is still to be written to ``spec_fd`` (:func:`send_spec`); ``intermediate``,
    the interpreter that forks the supervisor, is the caller's to reap. ``spec.fds["record_dir"]``
    (held for the record the caller writes if the supervisor is lost) is closed by ``status``.
    """

    spec: RunSpec
    lifeline: Lifeline
    status: StatusClient
    spec_fd: int
    spec_data: bytes
    intermediate: Intermediate


def spawn_supervisor(
    spec: RunSpec,
    *,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
    zygote: bool = True,
    pass_fds: tuple[int, ...] = (),
) -> Spawn:
    """Start ``spec``'s supervisor, through this caller's zygote (forked, with its spec) or a
    fresh interpreter (the spec still to send: :func:`send_spec`); :class:`LaunchError`, and no
    descriptor left behind, if it cannot. ``pass_fds``: docs/api.md; they stay open here."""
    # Loaded here, not with the module: tether's own CLI forks, and needs neither.
    from tether.caller import zygote as _zygote

    # A command that joins its caller's group (its terminal) needs a supervisor in
    # the caller's session, which a zygote (in a session of its own) cannot fork.
    through_zygote = zygote and spec.join_group is None and _zygote.enabled()
    # The spec pipe only for the plain path (a forked supervisor gets its spec with it).
    cwd, record_dir, opened = open_run(spec, stdin, stdout, stderr, spec_pipe=not through_zygote)
    *ours, lifeline_r, lifeline_w, status_r, status_w = opened if through_zygote else opened[:-2]
    complete, passed = completed(
        spec, cwd, ours=ours, record_dir=record_dir, lifeline_r=lifeline_r, status_w=status_w
    )
    if pass_fds:
        complete = complete.replace(
            fds={**complete.fds, **{f"{PASSED_ROLE}{fd}": fd for fd in pass_fds}}
        )
    if through_zygote:
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
            return handed_over_forked(
                complete, passed, lifeline_w=lifeline_w, status_r=status_r, pid=forked
            )
        try:
            opened += spec_pipe()  # the zygote said: the plain path
        except OSError as error:
            close_all(opened)
            raise cannot_start(error) from None
    spec_r, spec_w = opened[-2:]
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
    could not): :data:`PAST_THE_DEADLINE` past the deadline, or :data:`LAUNCH_LIMIT`."""
    left = _time_left(spec)
    return LAUNCH_LIMIT if left is None else max(0.0, left) + PAST_THE_DEADLINE


def _time_left(spec: RunSpec, limit: float | None = None) -> float | None:
    """Seconds left to ``spec``'s deadline, at most ``limit`` (``None``: neither bounds it)."""
    import time

    at = spec.deadline_at
    left = None if at is None else at - time.monotonic()
    if limit is None:
        return left
    return limit if left is None else min(limit, left)


def _nobody_writes(status_r: int, within: float | None) -> bool:
    """Whether the status channel ends before any message within ``within`` seconds (the
    caller's own writing end closed first): no supervisor holds it. Reads nothing."""
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
    """Let go of what is the supervisor's now; the caller's ends of the run, as a :class:`Spawn`
    (the record's directory kept, for the record the caller writes if the supervisor is lost)."""
    # Here: tether's own CLI reaches this after its fork, in parallel with the supervisor.
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
    """:func:`_handed_over` for a supervisor forked with its spec (by the zygote or the CLI);
    ``pid``: the intermediate, already reaped."""
    return _handed_over(
        complete,
        passed,
        lifeline_w=lifeline_w,
        status_r=status_r,
        spec_w=-1,
        intermediate=_Reaped(pid),
    )


def send_spec(spawn: Spawn) -> None:
    """Write the spec and close its pipe, blocking if it is full (a supervisor that died before
    reading is the status channel's to report)."""
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

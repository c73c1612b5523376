"""The caller's side of a launch: make the channels, start a detached supervisor, hand it the spec.

This module runs inside *your* process (the CLI, or a Python program using
the API), so it imports the standard library only, and cheaply: neither
``transitions`` nor ``structlog`` is loaded on this side. How the supervisor
starts depends on who the caller is:

* **tether's own CLI** (``tether run``, ``tether timeout``) is single-threaded,
  so it forks itself (:func:`fork_supervisors`, :func:`start`): fork,
  ``setsid``, fork, and the grandchild becomes the supervisor, with no second
  interpreter;
* **a Python program** may have threads, so it is never forked: its
  supervisors are forked by its zygote (:mod:`tether.caller.zygote`), or, for
  the first launch or without a zygote, spawned as a fresh interpreter (see
  :mod:`tether.supervisor.detach`).

The lifeline's write end lives only here (:class:`Lifeline`). It is
close-on-exec, so no program the caller runs inherits it, and it is closed in
any child the caller *forks* (``os.register_at_fork``): a forked worker that
outlives its parent must not keep the parent's commands alive by holding
their lifeline open.

The steps are cut apart so that an event loop can take them without
blocking: :func:`spawn_supervisor` only starts the supervisor (a request to
the zygote, or a ``vfork`` and an ``exec``), :func:`send_spec` hands the spec
over where it still must, and the status channel is read by
:class:`~tether.caller.status.StatusClient`. :func:`start` takes all the
steps at once, for the command line.
"""

from __future__ import annotations

import _socket
import _thread
import contextlib
import errno
import fcntl
import os
import sys

from tether.core.reasons import TETHER_FAILED
from tether.core.spec import RunSpec
from tether.linux import UnsupportedPlatform, require_linux
from tether.linux.descriptors import close_all_but
from tether.shared.protocol import CANCEL, KILL_NOW, PASSED_ROLE
from tether.shared.record_file import RecordError, hold_record_directory

# On the path to the command's launch (``tether run`` forks its supervisor
# from here): no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import IO, Final, NoReturn, Protocol

    from tether.caller.status import StatusClient

    Stream = int | IO[bytes] | IO[str] | None

    class Intermediate(Protocol):
        """The short-lived process between a caller and its detached supervisor, to be reaped."""

        @property
        def pid(self) -> int: ...

        def poll(self) -> int | None: ...

        def wait(self, timeout: float | None = None) -> int: ...


__all__ = [
    "LaunchError",
    "Lifeline",
    "Spawn",
    "caller_umask",
    "close_spec_pipe",
    "fork_supervisors",
    "no_fork_meanwhile",
    "send_spec",
    "spawn_supervisor",
    "start",
]

#: The directory that holds the ``tether`` package, put first on the
#: supervisor's ``sys.path`` so it runs this very copy of tether.
_PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))

_BOOTSTRAP: Final = (
    "import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "from tether.supervisor.detach import main; raise SystemExit(main(int(sys.argv[2])))"
)

#: The caller's descriptors that no forked child may keep: every lifeline's
#: writing end, and every status channel's writing end until the supervisor has
#: it. Each is added under :data:`_lifelines_lock` in the same step that makes
#: it (:func:`_run_channels`), and taken out in the same step that closes it
#: (:func:`_close_all`), and ``os.fork`` takes that lock first
#: (:func:`_before_fork`): no fork falls between a lifeline's birth and its
#: registration, or between its close and its number's reuse.
_open_lifelines: set[int] = set()
#: Re-entrant: a signal handler that launches (or forks) while its thread is
#: making a run's channels must not wait on itself.
_lifelines_lock = _thread.RLock()


def _before_fork() -> None:
    _lifelines_lock.acquire()


def _after_fork_in_parent() -> None:
    _lifelines_lock.release()


def _close_lifelines_in_child() -> None:
    global _lifelines_lock  # noqa: PLW0603 - the child's own lock, free (the parent holds its)
    for fd in _open_lifelines:
        with contextlib.suppress(OSError):
            os.close(fd)
    _open_lifelines.clear()
    _lifelines_lock = _thread.RLock()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_close_lifelines_in_child,
)


class LaunchError(OSError):
    """The supervisor could not be started, or said the command could not be.

    An :class:`OSError`, as :mod:`subprocess` raises when a program cannot be
    started, so ``except OSError`` around a launch keeps working. ``errno`` is
    the reason where one is known (``ENOENT``: not found, ``EACCES``: not
    executable); ``exit_status`` is the status the CLI would exit with (127,
    126, 125); ``record_path`` is the ``launch_failed`` record written for the
    attempt, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        errno: int | None = None,
        exit_status: int | None = None,
        record_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = None if errno is None else os.strerror(errno)
        self.exit_status = exit_status
        self.record_path = record_path

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_launch_error,
            (self.args[0], self.errno, self.exit_status, self.record_path),
        )


def _rebuild_launch_error(
    message: str, errno: int | None, exit_status: int | None, record_path: Path | None
) -> LaunchError:
    return LaunchError(message, errno=errno, exit_status=exit_status, record_path=record_path)


class Lifeline:
    """The write end of one run's lifeline: requests go out on it, closing it lets go.

    Safe to use from several threads and from a signal handler (the lock is
    re-entrant, so a handler that interrupts a request cannot deadlock), and
    never blocking: a request that finds the pipe full (a stopped supervisor)
    is dropped rather than hang the caller.
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd
        self._lock = _thread.RLock()
        with _lifelines_lock:
            _open_lifelines.add(fd)

    def request(self, byte: bytes) -> None:
        """Send a request (:data:`CANCEL`, :data:`KILL_NOW`); harmless once the run is over.

        Sent with ``MSG_NOSIGNAL``: a supervisor that has exited leaves a channel
        whose write would raise SIGPIPE, and a program that keeps SIGPIPE at its
        default (as command line tools do) would die of a cancel that came late.
        """
        with self._lock:  # so the descriptor cannot be closed (and its number reused) meanwhile
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    _send_quietly(self._fd, byte)

    def cancel(self) -> None:
        """Ask for a graceful stop: the stop signal, the grace, then SIGKILL."""
        self.request(CANCEL)

    def kill(self) -> None:
        """Ask for an immediate SIGKILL of the whole tree."""
        self.request(KILL_NOW)

    def release(self) -> None:
        """Close the write end (what a dying caller does); safe to call twice."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            _close_all([fd])


def _send_quietly(fd: int, data: bytes) -> None:
    """Send ``data`` on the socket ``fd`` without SIGPIPE; raise :class:`OSError` if it fails.

    The socket object only borrows the descriptor (``detach``): closing or
    collecting it must never close a number the lifeline owns.
    """
    borrowed = _socket.socket(fileno=fd)
    try:
        borrowed.setblocking(False)  # whatever socket.setdefaulttimeout() says: never wait
        borrowed.send(data, _socket.MSG_NOSIGNAL)
    finally:
        borrowed.detach()


def caller_umask() -> int | None:
    """The calling process's umask, read without changing it (``umask()`` would race threads)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return None


def _above_stdio(fd: int) -> int:
    """``fd`` moved to a number above 2 (close-on-exec), so no child's stdio setup clobbers it.

    A descriptor passed to the supervisor keeps its number there, and numbers
    0 to 2 are the supervisor's own ``/dev/null`` stdio. They are free here
    only when the caller runs with a standard stream closed.
    """
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def _command_stream(stream: Stream, default: int) -> int:
    """A copy of the stream the command gets; ``/dev/null`` for one the caller has closed.

    ``timeout(1)`` hands a closed stream on closed; a detached supervisor
    cannot, because its own 0, 1 and 2 are ``/dev/null``. ``/dev/null`` is
    the nearest: reads see end of file, writes vanish. Only the caller's own
    streams (``None``) get this: a descriptor the API was given explicitly
    must be open, or the launch is refused.
    """
    if stream is not None:
        fd = stream if isinstance(stream, int) else stream.fileno()
        return _above_stdio(os.dup(fd))
    try:
        return _above_stdio(os.dup(default))
    except OSError as error:
        if error.errno != errno.EBADF:
            raise
    return _above_stdio(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))


def _working_directory() -> int:
    """The caller's working directory, held open (``O_PATH``) for the command to start in.

    By descriptor, not by name: the directory may have been removed (``timeout``
    still runs a command there) or renamed since, and a name could by then lead
    somewhere else.
    """
    return _above_stdio(os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))


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


def _open_run(
    spec: RunSpec, stdin: Stream, stdout: Stream, stderr: Stream, *, spec_pipe: bool
) -> tuple[str | None, int | None, list[int]]:
    """Open what a run's supervisor will hold; raise :class:`LaunchError` (leaving none) if not.

    Returns the absolute working directory (``None``: the caller's, held as a
    descriptor), the held record directory's descriptor (``None``: no record),
    and every descriptor opened, in this order: the command's stdin, stdout
    and stderr; the working directory where held; the record directory where
    held; the lifeline's reading then writing end, the status channel's; and,
    with ``spec_pipe``, the spec pipe's (a fresh interpreter reads the spec
    from it before the launch).
    """
    try:
        require_linux()
    except UnsupportedPlatform as error:
        raise LaunchError(str(error), exit_status=TETHER_FAILED) from None
    opened: list[int] = []
    try:
        cwd = _absolute(spec.cwd)
        # The command's stdio first: with a standard stream closed, a new pipe
        # would take its number, and be taken for it.
        for stream, default in ((stdin, 0), (stdout, 1), (stderr, 2)):
            opened.append(_command_stream(stream, default))
        if spec.cwd is None:
            opened.append(_working_directory())
        record_dir = _record_directory(spec)
        if record_dir is not None:
            opened.append(record_dir)
        opened += _run_channels(spec_pipe=spec_pipe)
    except RecordError as error:
        _close_all(opened)
        raise LaunchError(str(error), errno=error.errno, exit_status=TETHER_FAILED) from None
    except OSError as error:
        _close_all(opened)
        raise _cannot_start(error) from None
    return cwd, record_dir, opened


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
    cwd, record_dir, opened = _open_run(spec, stdin, stdout, stderr, spec_pipe=True)
    *ours, lifeline_r, lifeline_w, status_r, status_w, spec_r, spec_w = opened
    complete, passed = _completed(
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
            _close_all([status_w])
            if _nobody_writes(status_r, _time_left(spec, _zygote.START_LIMIT)):
                _close_all([fd for fd in opened if fd != status_w])
                return spawn_supervisor(
                    spec,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=stderr,
                    zygote=False,
                    pass_fds=pass_fds,
                )
        if forked is not None:
            _close_all([spec_r, spec_w])
            return _handed_over(
                complete,
                passed,
                lifeline_w=lifeline_w,
                status_r=status_r,
                spec_w=-1,
                intermediate=_Reaped(forked),
            )
    passed = (*passed, spec_r, *pass_fds)
    try:
        # Under the fork lock: ``subprocess`` waits for its exec on a pipe of its
        # own, which a worker forked meanwhile by another thread would hold open.
        with _lifelines_lock:
            intermediate = _spawn_intermediate(spec, passed, spec_r)
    except OSError as error:
        _close_all(opened)
        raise _cannot_start(error) from None
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
        if not poller.poll(None if within is None else max(0, int(within * 1000))):
            return False
        return not borrowed.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        borrowed.detach()


def _completed(
    spec: RunSpec,
    cwd: str | None,
    *,
    ours: list[int],
    record_dir: int | None,
    lifeline_r: int,
    status_w: int,
) -> tuple[RunSpec, tuple[int, ...]]:
    """The spec as the supervisor gets it (descriptors by role), and the descriptors it gets."""
    roles = {"stdin": ours[0], "stdout": ours[1], "stderr": ours[2]}
    if spec.cwd is None:
        roles["cwd"] = ours[3]
    if record_dir is not None:
        roles["record_dir"] = record_dir
    complete = spec.replace(
        cwd=cwd,
        umask=caller_umask() if spec.umask is None else spec.umask,
        fds={**roles, "lifeline": lifeline_r, "status": status_w},
    )
    return complete, (*roles.values(), lifeline_r, status_w)


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
    _close_all([fd for fd in passed if fd != record_dir and fd not in callers])
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


def _run_channels(*, spec_pipe: bool) -> list[int]:
    """The lifeline's reading and writing ends, the status channel's, the spec pipe's.

    Each above the stdio, the spec pipe only with ``spec_pipe``. Made and
    registered (:data:`_open_lifelines`: every writing end) under the lock a
    fork takes, so that no child forked meanwhile, by another thread or a
    signal handler, can keep one: a child holding a lifeline would keep its
    command alive after the caller died, one holding the status channel
    would hide a lost supervisor, one holding the spec pipe would leave a
    spawned supervisor waiting for the end of its spec. Closed again, all of
    them, if any cannot be made.
    """
    made: list[int] = []
    with _lifelines_lock:
        try:
            for kind in ("lifeline", "status", "spec")[: 3 if spec_pipe else 2]:
                reading, writing = os.pipe() if kind == "spec" else _socket_pair()
                made += [reading, writing]
                _open_lifelines.add(writing)
                made[-2] = _above_stdio(reading)
                made[-1] = _above_stdio(writing)
                if made[-1] != writing:
                    _open_lifelines.discard(writing)
                    _open_lifelines.add(made[-1])
        except OSError:
            _close_all(made)
            raise
    return made


def _socket_pair() -> tuple[int, int]:
    """A connected pair of Unix stream sockets, as two close-on-exec descriptors.

    The lifeline and the status channel are socket pairs, not pipes, because a
    pipe can be opened again through ``/proc/PID/fd/N`` by any process of the
    same user, the command included: a command that opened its own lifeline
    for writing that way would hold it open after its caller died, and one
    that opened the status channel could write the caller a ``finished`` of its
    own. A socket cannot be opened through ``/proc`` at all (``ENXIO``). End of
    file, ``poll`` and ``read``/``write`` work on them as on a pipe.
    """
    first, second = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    return first.detach(), second.detach()


def _record_directory(spec: RunSpec) -> int | None:
    """The record's directory, checked and held open for the run; ``None`` without a record.

    Held from here on by both sides: the supervisor writes the record and the
    event log through its copy (so nothing done to the path during the run can
    redirect them), and the caller through its own, for a lost supervisor's
    record. Raises :class:`~tether.shared.record_file.RecordError`.
    """
    if spec.record_path is None:
        return None
    return _above_stdio(hold_record_directory(spec.record_path))


def _cannot_start(error: OSError) -> LaunchError:
    return LaunchError(
        f"cannot start the supervisor: {error.strerror or error}",
        errno=error.errno,
        exit_status=TETHER_FAILED,
    )


def tethers_own(fd: int) -> bool:
    """Whether ``fd`` is a run's lifeline or status channel, or the zygote's socket, here.

    Never handed to a command (``pass_fds``): a command holding another run's
    lifeline would keep that run alive after its caller died.
    """
    with _lifelines_lock:
        if fd in _open_lifelines:
            return True
    zygote = sys.modules.get("tether.caller.zygote")
    return zygote is not None and fd == zygote.socket_descriptor()


def no_fork_meanwhile() -> contextlib.AbstractContextManager[bool]:
    """The lock ``os.fork`` takes first: while it is held, no fork copies what is made."""
    return _lifelines_lock


def _close_all(fds: tuple[int, ...] | list[int]) -> None:
    """Close ``fds``, each taken out of :data:`_open_lifelines` in the same step."""
    with _lifelines_lock:
        for fd in fds:
            _open_lifelines.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)


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
    _close_all([fd])


def start(
    spec: RunSpec, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None
) -> Spawn:
    """Start a detached supervisor for ``spec`` and hand it the spec; for the command line.

    Forks this process when it is tether's own program (:func:`fork_supervisors`),
    and spawns a fresh interpreter otherwise. Returns once the intermediate
    has gone; read how the run goes from ``spawn.status``.
    """
    if _become_supervisor is not None:
        return _fork(spec, _become_supervisor, stdin=stdin, stdout=stdout, stderr=stderr)
    spawn = spawn_supervisor(spec, stdin=stdin, stdout=stdout, stderr=stderr)
    send_spec(spawn)
    spawn.intermediate.wait()
    return spawn


#: How a forked child becomes the supervisor of a (completed) spec; set by the CLI.
_become_supervisor: Callable[[RunSpec], NoReturn] | None = None
#: The descriptors the CLI inherited, which its forked supervisors keep for the command.
_handed_on: tuple[int, ...] = ()


def fork_supervisors(
    become: Callable[[RunSpec], NoReturn], *, hand_on: tuple[int, ...] = ()
) -> None:
    """Make :func:`start` fork this process into the supervisor instead of spawning one.

    Only for tether's own command-line program: it is single-threaded, so a
    forked child is safe, and its supervisor then needs no second interpreter
    (which costs tens of milliseconds and a second copy of everything already
    loaded). ``become`` runs in the forked supervisor, with the spec whose
    descriptors it holds, and never returns. A Python program using the API
    never calls this: it may have threads, and its supervisors are spawned.

    ``hand_on`` are the descriptors the program inherited: the forked
    supervisor keeps them (with their numbers) only to hand them to the
    command, as a shell and GNU ``timeout`` do, and closes them once it has.
    """
    global _become_supervisor, _handed_on  # noqa: PLW0603 - set once by the program's entry
    _become_supervisor = become
    _handed_on = hand_on


class _Reaped:
    """The intermediate of a forked supervisor: already reaped when the caller sees it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode = 0

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


def _fork(
    spec: RunSpec,
    become: Callable[[RunSpec], NoReturn],
    *,
    stdin: Stream,
    stdout: Stream,
    stderr: Stream,
) -> Spawn:
    """Fork, ``setsid``, fork: the grandchild becomes ``spec``'s supervisor; reap the child.

    The same double fork as :mod:`tether.supervisor.detach` does after a spawn,
    without the interpreter in between: the supervisor is not a session
    leader, is nobody's child to reap, and survives a kill of this process's
    group or session. Buffered output is flushed first, so nothing is written
    twice; every forked branch ends in ``os._exit``, never in this program's
    cleanup.
    """
    cwd, record_dir, opened = _open_run(spec, stdin, stdout, stderr, spec_pipe=False)
    try:
        # Opened here, so that a caller out of descriptors hears it as a launch error.
        null = _above_stdio(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
        _check_headroom(null)
    except OSError as error:
        _close_all(opened)
        raise _cannot_start(error) from None
    *ours, lifeline_r, lifeline_w, status_r, status_w = opened
    complete, passed = _completed(
        spec, cwd, ours=ours, record_dir=record_dir, lifeline_r=lifeline_r, status_w=status_w
    )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # The supervisor forked here keeps the status channel's writing end, which
    # every other child is made to close; this program has no other thread.
    with _lifelines_lock:
        _open_lifelines.discard(status_w)
    try:
        child = os.fork()
    except OSError as error:
        _close_all([*opened, null])
        raise _cannot_start(error) from None
    if child == 0:
        _become_detached(
            passed, null, lambda: become(complete), new_session=complete.join_group is None
        )
    os.close(null)
    os.waitpid(child, 0)
    return _handed_over(
        complete,
        passed,
        lifeline_w=lifeline_w,
        status_r=status_r,
        spec_w=-1,
        intermediate=_Reaped(child),
    )


#: Descriptors a forked supervisor opens to start its command, beyond the three
#: of the caller's it closes: its signal wakeup pipe, the command's error pipe,
#: a pidfd and the cgroup's ``cgroup.procs`` (its own check counts the rest).
_HEADROOM: Final = 5


def _check_headroom(null: int) -> None:
    """Raise ``EMFILE`` unless :data:`_HEADROOM` more descriptors can be opened now.

    The forked supervisor shares this process's open-file limit: under a low
    ``ulimit -n`` it would start, fail to start the command, and leave a
    ``launch_failed`` record of a run that was never possible. Refused here,
    it is one line before anything started, as when the caller itself runs out.
    """
    probes: list[int] = []
    try:
        for _ in range(_HEADROOM):
            probes.append(os.dup(null))
    finally:
        _close_all(probes)


def _become_detached(
    keep: tuple[int, ...], null: int, become: Callable[[], object], *, new_session: bool
) -> NoReturn:
    """In the forked child: a new session, one more fork, a clean slate, then ``become``.

    (Not a new session for a command that joins its caller's group to use its
    terminal: that needs the caller's session, and the child only leaves the
    caller's group.)

    The clean slate is what a freshly spawned supervisor would have: no
    handler of this program's (the supervisor installs its own), no wakeup
    descriptor, ``/dev/null`` as its own standard streams, and no descriptor
    but the run's and those the program inherited (for the command).
    """
    try:
        if new_session:
            os.setsid()
        else:
            # The command is to join the caller's group, in this session: only
            # leave the caller's group (as the spawned intermediate does).
            os.setpgid(0, 0)
        if os.fork() > 0:
            os._exit(0)
        _reset_signals()
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        close_all_but((*keep, *_handed_on))
        become()
    except BaseException:  # noqa: S110 - nobody to tell; the caller sees a lost supervisor
        pass
    os._exit(TETHER_FAILED)


def _reset_signals() -> None:
    """The signal dispositions a freshly started interpreter would have had.

    Every signal this program handles in Python goes back to its default
    action (an ``exec`` would have done that), and SIGPIPE and SIGXFSZ are
    ignored, as Python ignores them at start-up: this program may have set
    them otherwise (``tether timeout`` passes SIGPIPE on), and a supervisor
    that died of SIGPIPE writing to a caller that is gone would leave no
    record.
    """
    import signal

    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for number in signal.valid_signals():
        with contextlib.suppress(ValueError, OSError, TypeError):
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(number, signal.SIG_IGN)


def _absolute(cwd: str | None) -> str | None:
    """The command's working directory as an absolute path; the caller's own if ``None``.

    The caller's own may have been removed: it is then ``None`` here, and the
    command starts in it all the same, through its descriptor.
    """
    if cwd is not None:
        return os.path.abspath(cwd)
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None

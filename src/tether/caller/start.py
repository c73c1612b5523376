"""The caller's side: make the pipes, start a detached supervisor, talk to it.

This module runs inside *your* process (the CLI, or a Python program using
the API), so it is held to two rules. It imports the standard library only,
and cheaply: neither ``transitions`` nor ``structlog`` is loaded on this side.
And it never forks the caller: a fresh interpreter is spawned instead
(see :mod:`tether.supervisor.detach`), because the caller may have threads.

The lifeline's write end lives only here. It is close-on-exec, so no program
the caller runs inherits it, and it is closed in any child the caller *forks*
(``os.register_at_fork``): a forked worker that outlives its parent must not
keep the parent's commands alive by holding their lifeline open.

Two ways to wait are offered. :func:`start_supervisor` blocks until the
supervisor reports the launch, which suits the CLI. The Python API needs the
same steps cut apart, so that an event loop can wait for the status pipe
instead of a thread: :func:`spawn_supervisor` only spawns, :func:`send_spec`
hands the spec over, and :class:`StatusReader` reads whatever status lines
have arrived without ever blocking.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from tether.linux import UnsupportedPlatform, require_linux
from tether.core.reasons import TETHER_FAILED
from tether.shared.protocol import CANCEL, FINISHED, KILL_NOW, STARTED, decode
from tether.core.spec import RunSpec

__all__ = [
    "LaunchError",
    "Spawned",
    "Started",
    "StatusReader",
    "SupervisorHandle",
    "caller_umask",
    "release_lifeline",
    "send_spec",
    "spawn_supervisor",
    "start_supervisor",
]

#: The directory that holds the ``tether`` package, put first on the
#: supervisor's ``sys.path`` so it runs this very copy of tether.
_PACKAGE_ROOT: Final = str(Path(__file__).resolve().parents[2])

_BOOTSTRAP: Final = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from tether.supervisor.detach import main; raise SystemExit(main(int(sys.argv[2])))"
)

_open_lifelines: set[int] = set()
_lifelines_lock = threading.Lock()


def _close_lifelines_in_child() -> None:
    for fd in _open_lifelines:
        with contextlib.suppress(OSError):
            os.close(fd)
    _open_lifelines.clear()


os.register_at_fork(after_in_child=_close_lifelines_in_child)


def release_lifeline(fd: int) -> None:
    """Close a lifeline's write end and forget it (the supervisor sees end of file)."""
    with _lifelines_lock:
        _open_lifelines.discard(fd)
    with contextlib.suppress(OSError):
        os.close(fd)


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


@dataclass(frozen=True, slots=True)
class Started:
    """Who is who once the command runs: what the caller needs if the supervisor is lost.

    ``cgroup`` is the directory of the run's own cgroup when cgroup containment
    is in use, so that a caller whose supervisor vanished can still end the
    whole tree with ``cgroup.kill``.
    """

    supervisor_pid: int | None
    pid: int | None
    pgid: int | None
    cgroup: str | None = None

    @classmethod
    def from_message(cls, message: dict[str, object]) -> Started:
        """Read a ``started`` message; fields that are missing or malformed are ``None``."""

        def number(key: str) -> int | None:
            value = message.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        cgroup = message.get("cgroup")
        return cls(
            supervisor_pid=number("supervisor_pid"),
            pid=number("pid"),
            pgid=number("pgid"),
            cgroup=cgroup if isinstance(cgroup, str) else None,
        )


@dataclass
class SupervisorHandle:
    """The caller's ends of one run: the lifeline to write, the status pipe to read."""

    lifeline: int | None
    status: IO[bytes]
    started: Started | None = None
    finished: dict[str, object] | None = None

    def request(self, byte: bytes) -> None:
        """Send a request (cancel or kill now); harmless once the supervisor is gone."""
        if self.lifeline is not None:
            with contextlib.suppress(OSError):
                os.write(self.lifeline, byte)

    def cancel(self) -> None:
        """Ask for a graceful stop: SIGTERM, the grace, then SIGKILL."""
        self.request(CANCEL)

    def kill(self) -> None:
        """Ask for an immediate SIGKILL of the whole tree."""
        self.request(KILL_NOW)

    def read_message(self) -> dict[str, object] | None:
        """Block for the next status message; ``None`` at end of file."""
        line = self.status.readline()
        if not line:
            return None
        message = decode(line)
        if message.get("event") == STARTED:
            self.started = Started.from_message(message)
        elif message.get("event") == FINISHED:
            self.finished = message
        return message

    def wait_finished(self) -> dict[str, object] | None:
        """Block until ``finished`` (returned) or end of file without it (``None``)."""
        while self.finished is None:
            if self.read_message() is None:
                break
        return self.finished

    def close(self) -> None:
        """Let go of both pipes. Closing the lifeline is what a dying caller does."""
        if self.lifeline is not None:
            release_lifeline(self.lifeline)
            self.lifeline = None
        self.status.close()


class StatusReader:
    """The caller's end of the status pipe, read without blocking.

    The descriptor is switched to non-blocking mode, so :meth:`read_available`
    returns at once with whatever whole lines have arrived; the caller decides
    how to wait for more (``poll()``, or an event loop's ``add_reader``).
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.at_eof = False
        self._partial = b""

    def read_available(self) -> list[dict[str, object]]:
        """Return the messages that arrived since the last call; set :attr:`at_eof` at the end."""
        while not self.at_eof:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.at_eof = True
            self._partial += chunk
        *lines, self._partial = self._partial.split(b"\n")
        # A line cut short by the end of the pipe is a supervisor that died mid-write.
        return [decode(line) for line in lines if line.strip()]

    def close(self) -> None:
        """Close the descriptor (once the run is over)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _fd_of(stream: int | IO[bytes] | IO[str] | None, default: int) -> int:
    if stream is None:
        return default
    if isinstance(stream, int):
        return stream
    return stream.fileno()


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


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()
    return _above_stdio(read_end), _above_stdio(write_end)


def _command_stream(stream: int | IO[bytes] | IO[str] | None, default: int) -> int:
    """A copy of the stream the command gets; ``/dev/null`` for one the caller has closed.

    ``timeout(1)`` hands a closed stream on closed; a detached supervisor
    cannot, because its own 0, 1 and 2 are ``/dev/null``. ``/dev/null`` is
    the nearest: reads see end of file, writes vanish.
    """
    try:
        return _above_stdio(os.dup(_fd_of(stream, default)))
    except OSError as error:
        if error.errno != errno.EBADF:
            raise
    return _above_stdio(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))


@dataclass
class Spawned:
    """A supervisor spawned but not heard from yet: the caller's ends of its pipes.

    ``spec_fd`` is the write end of the spec pipe, with ``spec_data`` still to
    be written to it (:func:`send_spec`); ``intermediate`` is the short-lived
    interpreter that forks the supervisor and exits, to be reaped by the caller.
    """

    lifeline: int
    status: int
    spec_fd: int
    spec_data: bytes
    intermediate: subprocess.Popen[bytes]


def spawn_supervisor(
    spec: RunSpec,
    *,
    stdin: int | IO[bytes] | IO[str] | None = None,
    stdout: int | IO[bytes] | IO[str] | None = None,
    stderr: int | IO[bytes] | IO[str] | None = None,
) -> Spawned:
    """Spawn the interpreter that becomes ``spec``'s supervisor; do not wait for it.

    Blocks only for the spawn itself (a ``vfork`` and an ``exec``, about a
    millisecond), as :func:`asyncio.create_subprocess_exec` does.
    """
    try:
        require_linux()
    except UnsupportedPlatform as error:
        raise LaunchError(str(error), exit_status=TETHER_FAILED) from None
    # The command's stdio first: with a standard stream closed, a new pipe
    # would take its number, and be taken for it.
    stdio = [_command_stream(s, n) for s, n in ((stdin, 0), (stdout, 1), (stderr, 2))]
    lifeline_r, lifeline_w = _pipe()
    with _lifelines_lock:
        _open_lifelines.add(lifeline_w)
    status_r, status_w = _pipe()
    spec_r, spec_w = _pipe()
    passed = (lifeline_r, status_w, spec_r, *stdio)
    fds = dict(
        zip(("lifeline", "status", "spec", "stdin", "stdout", "stderr"), passed, strict=True)
    )
    del fds["spec"]
    spec = _complete(spec, fds)
    try:
        intermediate = subprocess.Popen(
            [sys.executable, "-P", "-c", _BOOTSTRAP, _PACKAGE_ROOT, str(spec_r)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=passed,
            start_new_session=True,
        )
    except OSError as error:
        for fd in (*passed, spec_w, status_r):
            os.close(fd)
        release_lifeline(lifeline_w)
        raise LaunchError(f"cannot start the supervisor: {error}", errno=error.errno) from None
    for fd in passed:
        os.close(fd)
    return Spawned(
        lifeline=lifeline_w,
        status=status_r,
        spec_fd=spec_w,
        spec_data=spec.to_json(),
        intermediate=intermediate,
    )


def send_spec(spawned: Spawned) -> None:
    """Write the spec and close its pipe, blocking if the pipe is full.

    A supervisor that died before reading is not an error here: the caller
    sees it as a status pipe that ends without ``started``.
    """
    try:
        with os.fdopen(spawned.spec_fd, "wb") as spec_pipe:
            spec_pipe.write(spawned.spec_data)
    except OSError:
        pass


def start_supervisor(
    spec: RunSpec,
    *,
    stdin: int | IO[bytes] | IO[str] | None = None,
    stdout: int | IO[bytes] | IO[str] | None = None,
    stderr: int | IO[bytes] | IO[str] | None = None,
) -> SupervisorHandle:
    """Start a detached supervisor for ``spec``; return once it reported the launch.

    The command gets the caller's stdin, stdout and stderr unless others are
    given. After this returns, ``handle.finished`` is set already if the
    command could not be started (``reason: launch_failed``).
    """
    spawned = spawn_supervisor(spec, stdin=stdin, stdout=stdout, stderr=stderr)
    handle = SupervisorHandle(lifeline=spawned.lifeline, status=os.fdopen(spawned.status, "rb"))
    send_spec(spawned)
    first = handle.read_message()
    spawned.intermediate.wait()
    if first is None or first.get("event") not in (STARTED, FINISHED):
        handle.close()
        raise LaunchError("the supervisor exited before starting the command")
    return handle


def _complete(spec: RunSpec, fds: dict[str, int]) -> RunSpec:
    """Fill in what the detached supervisor cannot know: the caller's cwd, umask and fds."""
    from dataclasses import replace

    return replace(
        spec,
        cwd=os.path.abspath(spec.cwd) if spec.cwd is not None else os.getcwd(),
        umask=caller_umask() if spec.umask is None else spec.umask,
        fds=fds,
    )

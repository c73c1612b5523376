"""The caller's end of the lifeline, and the one list of what no forked child may keep.

The caller must be the only holder of its lifeline's writing end: it is
close-on-exec, and closed in any child the caller forks. So are the status
channel's writing end until the supervisor has it, and the spec pipe's until
the spec is written. Ends are made, listed, unlisted and closed under the lock
``os.fork`` takes first, so no fork falls in between. Why:
``docs/architecture.md``, "Channels".
"""

from __future__ import annotations

import _socket
import _thread
import contextlib
import os
import sys

from tether.linux.descriptors import above_stdio
from tether.shared.lifeline import CANCEL, KILL_NOW

__all__ = [
    "Lifeline",
    "close_all",
    "identity",
    "keep_from_forks",
    "kept_by_the_next_fork",
    "let_go",
    "no_fork_meanwhile",
    "run_channels",
    "spec_pipe",
    "tethers_own",
]

#: The descriptors no forked child may keep, each with its identity (:func:`identity`).
_open_lifelines: dict[int, tuple[int, int] | None] = {}
#: Re-entrant: a signal handler that launches (or forks) while its thread is
#: making a run's channels must not wait on itself.
_lifelines_lock = _thread.RLock()


def _before_fork() -> None:
    _lifelines_lock.acquire()


def _after_fork_in_parent() -> None:
    _lifelines_lock.release()


def _close_lifelines_in_child() -> None:
    global _lifelines_lock  # noqa: PLW0603 - the child's own lock, free (the parent holds its)
    for fd, made in _open_lifelines.items():
        if identity(fd) == made:  # a number the program closed and reused is not tether's
            with contextlib.suppress(OSError):
                os.close(fd)
    _open_lifelines.clear()
    _lifelines_lock = _thread.RLock()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_close_lifelines_in_child,
)


class Lifeline:
    """The write end of one run's lifeline: requests go out on it, closing it lets go.

    Safe from threads and signal handlers (a re-entrant lock); never blocks: a
    request that finds the socket full (a stopped supervisor) is dropped.
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd
        self._lock = _thread.RLock()
        self._identity = identity(fd)
        with _lifelines_lock:
            _open_lifelines[fd] = self._identity

    def _ours(self) -> int | None:
        """The descriptor if it is still this lifeline's socket; else ``None``, let go of.

        A program may have closed it and opened another under its number. Under ``self._lock``.
        """
        fd = self._fd
        if fd is not None and identity(fd) != self._identity:
            self._fd = None
            with _lifelines_lock:
                _open_lifelines.pop(fd, None)
            return None
        return fd

    def request(self, byte: bytes) -> None:
        """Send a request; harmless once the run is over (no SIGPIPE: ``MSG_NOSIGNAL``)."""
        with self._lock:
            fd = self._ours()
            if fd is not None:
                with contextlib.suppress(OSError):
                    _send_quietly(fd, byte)

    def cancel(self) -> None:
        """Ask for a graceful stop: the stop signal, the grace, then SIGKILL."""
        self.request(CANCEL)

    def kill(self) -> None:
        """Ask for an immediate SIGKILL of the whole tree."""
        self.request(KILL_NOW)

    def release(self) -> None:
        """Close the write end (what a dying caller does); safe to call twice."""
        with self._lock:
            fd, self._fd = self._ours(), None
        if fd is not None:
            close_all([fd])


def _send_quietly(fd: int, data: bytes) -> None:
    """Send ``data`` on ``fd`` without SIGPIPE, through a socket object that only borrows it."""
    borrowed = _socket.socket(fileno=fd)
    try:
        borrowed.setblocking(False)  # whatever socket.setdefaulttimeout() says: never wait
        borrowed.send(data, _socket.MSG_NOSIGNAL)
    finally:
        borrowed.detach()


def run_channels(*, spec_pipe: bool) -> list[int]:
    """The lifeline's ends, the status channel's, and the spec pipe's with ``spec_pipe``
    (:func:`_channels`)."""
    return _channels(("lifeline", "status", "spec")[: 3 if spec_pipe else 2])


def spec_pipe() -> tuple[int, int]:
    """The spec pipe's reading and writing ends, made as :func:`run_channels` makes them: for a
    launch that needs it after all (the zygote's answer was the plain path)."""
    reading, writing = _channels(("spec",))
    return reading, writing


def _channels(kinds: tuple[str, ...]) -> list[int]:
    """Each pair above the stdio, every writing end listed as it is made under the lock a fork
    takes; all closed if any cannot be made."""
    made: list[int] = []
    with _lifelines_lock:
        try:
            for kind in kinds:
                reading, writing = os.pipe() if kind == "spec" else _socket_pair()
                made += [reading, writing]
                _open_lifelines[writing] = identity(writing)
                made[-2] = above_stdio(reading)
                made[-1] = above_stdio(writing)
                if made[-1] != writing:
                    _open_lifelines.pop(writing, None)
                    _open_lifelines[made[-1]] = identity(made[-1])
        except OSError:
            close_all(made)
            raise
    return made


def _socket_pair() -> tuple[int, int]:
    """A connected pair of Unix stream sockets (not a pipe, which ``/proc`` can reopen)."""
    first, second = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    return first.detach(), second.detach()


def tethers_own(fd: int) -> bool:
    """Whether ``fd`` is a run's lifeline or status channel, or the zygote's socket (never
    handed to a command: it would keep another run alive after its caller died)."""
    with _lifelines_lock:
        if fd in _open_lifelines:
            return True
    zygote = sys.modules.get("tether.caller.zygote")
    return zygote is not None and fd == zygote.socket_descriptor()


def no_fork_meanwhile() -> contextlib.AbstractContextManager[bool]:
    """The lock ``os.fork`` takes first: while it is held, no fork copies what is made."""
    return _lifelines_lock


def close_all(fds: tuple[int, ...] | list[int]) -> None:
    """Close ``fds``, each taken out of :data:`_open_lifelines` in the same step."""
    with _lifelines_lock:
        for fd in fds:
            _open_lifelines.pop(fd, None)
            with contextlib.suppress(OSError):
                os.close(fd)


def keep_from_forks(*fds: int) -> None:
    """Put ``fds`` on the list (under :func:`no_fork_meanwhile`, with their making): the
    zygote's socket pair, which no child forked while the zygote starts may hold."""
    with _lifelines_lock:
        for fd in fds:
            _open_lifelines[fd] = identity(fd)


def let_go(fd: int) -> None:
    """Take ``fd`` off the list without closing it (its owner closes it, or it is not ours)."""
    with _lifelines_lock:
        _open_lifelines.pop(fd, None)


def identity(fd: int) -> tuple[int, int] | None:
    """What ``fd`` is (its device and inode), ``None`` if it is not open: a number is no name."""
    try:
        made = os.fstat(fd)
    except OSError:
        return None
    return made.st_dev, made.st_ino


def kept_by_the_next_fork(fd: int) -> None:
    """Take ``fd`` off the list, still open, for the child forked next (the CLI's supervisor
    keeps the status channel's writing end; the CLI has no other thread to fork meanwhile)."""
    with _lifelines_lock:
        _open_lifelines.pop(fd, None)

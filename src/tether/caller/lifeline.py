"""The caller's end of the lifeline, and the one list of what no forked child may keep.

The lifeline's end of file is how a supervisor learns that its caller is
gone, whatever killed it: the kernel closes the caller's end when the last
holder exits. So the caller must be the *only* holder. Its end is
close-on-exec, so no program the caller runs inherits it, and it is closed
in any child the caller *forks* (``os.register_at_fork``): a forked worker
that outlives its parent must not keep the parent's commands alive by
holding their lifeline open. The status channel's writing end (until the
supervisor has it) and the spec pipe's (until the spec is written) are kept
from forked children the same way, for the same kind of reason: a child
holding one would hide a lost supervisor, or leave a spawned one waiting.

There is no window. Every such end is made and put on the list under one
lock, taken off it as it is closed under the same lock
(:func:`close_all`), and ``os.fork`` takes that lock first: a fork by
another thread waits for the few microseconds it is held, and no fork falls
between an end's birth and its registration, or between its close and its
number's reuse. (A fork made by C code that bypasses Python's at-fork hooks
is not covered.)

Imported by every caller, on the path to ``tether run``'s launch: the
standard library only, and no ``typing`` at run time.
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
    "tethers_own",
]

#: The caller's descriptors that no forked child may keep: every lifeline's
#: writing end, and every status channel's writing end until the supervisor has
#: it. Each is added under :data:`_lifelines_lock` in the same step that makes
#: it (:func:`run_channels`), and taken out in the same step that closes it
#: (:func:`close_all`), and ``os.fork`` takes that lock first
#: (:func:`_before_fork`): no fork falls between a lifeline's birth and its
#: registration, or between its close and its number's reuse.
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

    Safe to use from several threads and from a signal handler (the lock is
    re-entrant, so a handler that interrupts a request cannot deadlock), and
    never blocking: a request that finds the pipe full (a stopped supervisor)
    is dropped rather than hang the caller.
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd
        self._lock = _thread.RLock()
        #: What the descriptor is: checked before each use (:meth:`_ours`).
        self._identity = identity(fd)
        with _lifelines_lock:
            _open_lifelines[fd] = self._identity

    def _ours(self) -> int | None:
        """The descriptor, if it is still this lifeline; else ``None``, and it is let go of.

        A program may close descriptors it does not know (``os.closerange``,
        as daemons do) and open others, which take the freed numbers: a
        request written to one would reach a stranger, and closing it would
        close the program's own. A number that is no longer this lifeline's
        socket is never written to nor closed. Called under ``self._lock``.
        """
        fd = self._fd
        if fd is not None and identity(fd) != self._identity:
            self._fd = None
            with _lifelines_lock:
                _open_lifelines.pop(fd, None)
            return None
        return fd

    def request(self, byte: bytes) -> None:
        """Send a request (:data:`CANCEL`, :data:`KILL_NOW`); harmless once the run is over.

        Sent with ``MSG_NOSIGNAL``: a supervisor that has exited leaves a channel
        whose write would raise SIGPIPE, and a program that keeps SIGPIPE at its
        default (as command line tools do) would die of a cancel that came late.
        """
        with self._lock:  # so the descriptor cannot be closed (and its number reused) meanwhile
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


def run_channels(*, spec_pipe: bool) -> list[int]:
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


def close_all(fds: tuple[int, ...] | list[int]) -> None:
    """Close ``fds``, each taken out of :data:`_open_lifelines` in the same step."""
    with _lifelines_lock:
        for fd in fds:
            _open_lifelines.pop(fd, None)
            with contextlib.suppress(OSError):
                os.close(fd)


def keep_from_forks(*fds: int) -> None:
    """Put ``fds`` on the list (call it under :func:`no_fork_meanwhile`, with their making).

    For the zygote's socket pair: a child forked while the zygote starts must
    hold neither end.
    """
    with _lifelines_lock:
        for fd in fds:
            _open_lifelines[fd] = identity(fd)


def let_go(fd: int) -> None:
    """Take ``fd`` off the list without closing it (its owner closes it, or it is not ours)."""
    with _lifelines_lock:
        _open_lifelines.pop(fd, None)


def identity(fd: int) -> tuple[int, int] | None:
    """What ``fd`` is (its device and inode), ``None`` if it is not open: a number is no name.

    Kept from a descriptor's making, compared before each later use: a
    program that closed it (``os.closerange``) may have opened something
    else under its number.
    """
    try:
        made = os.fstat(fd)
    except OSError:
        return None
    return made.st_dev, made.st_ino


def kept_by_the_next_fork(fd: int) -> None:
    """Take ``fd`` off the list, still open: the child this program forks next is to keep it.

    Only for tether's own CLI, whose forked supervisor keeps the status
    channel's writing end; the program has no other thread to fork meanwhile.
    """
    with _lifelines_lock:
        _open_lifelines.pop(fd, None)

"""The caller's side of the zygote: one fork server per calling process, for the API.

A Python program may have threads, so it never forks itself to start a
supervisor. Its first launch starts one fresh interpreter, the *zygote*
(:mod:`tether.supervisor.zygote`), which forks the supervisor of that first
request at once, then loads the supervisor's side and stays, forking one
detached supervisor per later request: a fork of a process that has loaded
everything is a few milliseconds and shares its memory, where a fresh
interpreter is tens of milliseconds and megabytes of its own.

**The command must not be able to tell.** What a spawned supervisor would
have inherited from the caller at the time of the request travels with the
request: the environment, the umask and the ignored signals (in the spec),
the soft resource limits and the signal mask; the working directory and the
stdio go as descriptors. Everything else a process inherits is compared,
at every request, with what it was when the zygote started (a fingerprint,
:func:`~tether.caller.fingerprint.fingerprint`, some 75 microseconds): the
credentials and groups, every capability set, ``NoNewPrivs``, seccomp, the
namespaces, the root directory, the cgroup, the LSM label, the personality,
the CPUs and memory nodes, the nice value and scheduling policy,
``oom_score_adj``, the timer slack, the I/O priority,
memory-deny-write-execute, the hard resource limits. Where anything differs,
a fresh zygote is started at once (a spawned process inherits all of it by
construction) and the old one is let go of and exits. None of it is set
again in a forked child: some of it only a privilege the caller gave up
could set, and a child that failed to take one on would be a command that
can tell. ``tests/test_zygote_inheritance.py`` holds the two ways to the
same state side by side with ``subprocess``.

**A lost zygote is never a lost launch.** If the zygote cannot be reached or
does not answer, the request takes the plain path (a fresh interpreter per
supervisor, :func:`tether.caller.start.spawn_supervisor`) unless the
supervisor was in fact forked: the status channel says which (its end of
file, with every copy of its writing end gone, means no supervisor holds
it). The next launch starts a fresh zygote.

**One zygote per caller, shared by its threads and tasks.** A request and
its answer are one exchange under a lock (a fork in the zygote: about a
millisecond). The zygote's socket is close-on-exec and closed in any child
the caller forks, like every lifeline: its end of file is how the zygote
learns that its caller is gone. A stopped zygote cannot read it, so the
zygote also has a parent-death signal (:class:`_Zygote`).

**Every exchange is bounded**, by the request's deadline and by
:data:`START_LIMIT`; by :data:`ANSWER_LIMIT` once the zygote is seen stopped
(a zygote that runs but waits for a CPU on a busy machine is given the
time a fresh one has, where a one-second bound abandoned it at a load
average of 6 on two cores). The wait for the lock is bounded by
:data:`ANSWER_LIMIT`. A zygote that has not answered in time is SIGKILLed, and the request
is one lost with the zygote (above): never started twice. A launch
re-entered on a thread already in an exchange (a signal handler's) takes
the plain path rather than wait for the exchange it interrupted.

``TETHER_ZYGOTE=0`` in the caller's environment turns the zygote off (every
supervisor is then spawned), for a program that would rather not have a
process of its own waiting beside it.

``os.pidfd_open`` and ``signal.pidfd_send_signal`` are called here directly,
deliberately, as trio names its own: the pidfd is opened on the zygote
``subprocess`` just started, still its child, and held until it is let go
of, so there is no check for :mod:`tether.linux.pidfd` to make.
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import json
import math
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time

from tether.caller.fingerprint import RLIMITS, fingerprint
from tether.caller.request import ignored_now
from tether.linux.prctl import ZYGOTE_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "TOO_BIG",
    "UNKNOWN",
    "ZYGOTE_VARIABLE",
    "enabled",
    "forget",
    "fork_supervisor",
    "zygote_pid",
]

#: The environment variable that turns the zygote off (``0``).
ZYGOTE_VARIABLE: Final = "TETHER_ZYGOTE"

#: A request larger than this takes the plain path (the zygote's own limit; the
#: socket's send buffer, about 208 KiB by default, may refuse a smaller one).
_MAX_REQUEST: Final = 1 << 20
#: The most descriptors one request carries (the zygote's ``MAX_DESCRIPTORS``):
#: a run with more (many ``pass_fds``) takes the plain path.
_MAX_DESCRIPTORS: Final = 16

_BOOTSTRAP: Final = (
    "import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "from tether.supervisor.zygote import main; "
    "raise SystemExit(main(int(sys.argv[2]), int(sys.argv[3])))"
)

#: How long a zygote may take to answer a request (a fork: about a millisecond) while it is
#: not running (stopped or traced: it may never answer), and how long one that runs may take
#: (on a busy machine a fork can wait seconds for a CPU), a fresh one included (an
#: interpreter's start).
ANSWER_LIMIT: Final = 1.0
START_LIMIT: Final = 5.0
#: How often a zygote that has not answered yet is looked at (:meth:`_Zygote.stopped`).
_LOOK_EVERY: Final = 0.1


class _Zygote:
    """One running zygote: the socket to it, and what it was started with.

    The zygote is a child of this process, started by a thread of tether's
    own that does nothing else (:meth:`_keep`): it waits for the zygote's end
    and reaps it. The zygote asks for SIGKILL when that thread ends
    (``PR_SET_PDEATHSIG`` follows the thread that forked, not the process),
    which is when this process ends, however it ends: a zygote that is
    stopped (``SIGSTOP``, by a command of its own caller's, say) cannot see
    its socket's end of file, but it still dies of the signal the kernel
    sends.
    """

    def __init__(self, package_root: str, identity: tuple[object, ...], limit: float) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.socket = ours
        self.identity = identity
        #: The zygote's pid, once it has answered a request.
        self.pid: int | None = None
        self._pidfd: int | None = None
        #: The zygote's pid as started (``pid`` is the one it answers with).
        self._child = -1
        self._error: BaseException | None = None
        # ``-X tether-zygote`` names it on its command line (``ps -f``); Python
        # keeps an unknown ``-X`` option in ``sys._xoptions`` and does nothing else.
        argv = [sys.executable, "-X", ZYGOTE_NAME, "-P", "-c", _BOOTSTRAP, package_root]
        argv.append(str(theirs.fileno()))
        argv.append(str(os.getpid()))
        started = _thread.allocate_lock()
        started.acquire()
        try:
            _thread.start_new_thread(self._keep, (argv, theirs, started))
        except BaseException:
            theirs.close()
            ours.close()
            raise
        if not started.acquire(timeout=limit) or self._pidfd is None:
            ours.close()
            raise OSError(errno.ETIMEDOUT, f"the zygote did not start: {self._error}")

    def _keep(self, argv: list[str], theirs: socket.socket, started: _thread.LockType) -> None:
        """In a thread of its own: start the zygote, then wait for its end and reap it."""
        from tether.caller.lifeline import no_fork_meanwhile

        try:
            # Under the fork lock: a worker forked meanwhile would hold the
            # pipe on which subprocess waits for the exec.
            with no_fork_meanwhile():
                zygote = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
            self._child = zygote.pid
            self._pidfd = os.pidfd_open(zygote.pid)
        except BaseException as error:  # told to the launching thread
            self._error = error
            return
        finally:
            theirs.close()
            started.release()
        with contextlib.suppress(BaseException):
            zygote.wait()

    def exchange(self, request: bytes, fds: list[int], limit: float) -> int | None:
        """Send one request: the pid the zygote forked, ``-1`` if it did not, :data:`UNKNOWN`
        if it was lost (or abandoned) after it had the request, ``None`` if it was lost
        before, :data:`TOO_BIG` if the request does not fit in one message.

        Never longer than ``limit`` seconds: a zygote that has not answered by
        then is SIGKILLed (:meth:`abandon`), and the run's status channel then
        says whether it had forked.
        """
        try:
            socket.send_fds(self.socket, [request], fds, socket.MSG_DONTWAIT)
        except OSError as error:
            if error.errno in (errno.EMSGSIZE, errno.ENOBUFS):
                return TOO_BIG  # the zygote is fine; this request takes the plain path
            return None
        answer = self._answer(limit)
        try:
            child, self.pid = int(answer[0]), int(answer[1])
        except (ValueError, IndexError):
            return UNKNOWN  # none (lost, or abandoned), or not an answer
        return child

    def _answer(self, limit: float) -> list[bytes]:
        """The zygote's answer, in words; none if it was lost, or did not answer in time (it is
        then abandoned).

        In time: within ``limit`` seconds while it runs, but within
        :data:`ANSWER_LIMIT` once it is seen stopped (looked at every
        :data:`_LOOK_EVERY`): a zygote waiting for a CPU on a busy machine is
        not taken for a lost one, and a stopped one holds the launch up no
        longer than it did.
        """
        start = time.monotonic()
        end = start + limit
        poller = select.poll()
        poller.register(self.socket, select.POLLIN)
        while True:
            try:
                return self.socket.recv(64, socket.MSG_DONTWAIT).split()
            except BlockingIOError:
                now = time.monotonic()
                if now >= end or (now - start >= ANSWER_LIMIT and self.stopped()):
                    self.abandon()
                    return []
                poller.poll(math.ceil(min(end - now, _LOOK_EVERY) * 1000))
            except OSError:
                return []

    def stopped(self) -> bool:
        """Whether the zygote is stopped or traced (or gone), as ``/proc`` says now."""
        # Only for a zygote late to answer: no launch on time loads the walk's module.
        from tether.linux.proctree import state_of

        try:
            state = state_of(self._child)
        except OSError:
            return True
        return state in (None, "T", "t", "Z", "X")

    def abandon(self) -> None:
        """SIGKILL the zygote (it did not answer in time), through its pidfd: never a reused pid."""
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.close()
        pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(pidfd)


#: The answer when the zygote was lost with the request: whether it forked, the
#: run's status channel will say.
UNKNOWN: Final = 0

#: The answer when the request is larger than one message on the socket can be
#: (a huge environment): the zygote never saw it.
TOO_BIG: Final = -2

_zygote: _Zygote | None = None
_lock = threading.Lock()
#: Set on a thread while it is in an exchange with the zygote (or waiting for
#: one): a launch re-entered on that thread (a signal handler) takes the plain
#: path rather than wait for the exchange it interrupted.
_exchanging = threading.local()
#: How many zygotes this process has started (for tests and the benchmark).
started = 0


def _forget_in_child() -> None:
    """In a forked child: this process's zygote is its parent's, never to be used here."""
    global _zygote, _lock, _exchanging  # noqa: PLW0603 - the fork-safety reset of the one zygote
    if _zygote is not None:
        with contextlib.suppress(OSError):
            _zygote.socket.close()
    _zygote = None
    _lock = threading.Lock()
    _exchanging = threading.local()


os.register_at_fork(after_in_child=_forget_in_child)


def enabled() -> bool:
    """Whether this caller uses a zygote (``TETHER_ZYGOTE`` is not ``0``)."""
    return os.environ.get(ZYGOTE_VARIABLE, "") != "0"


def zygote_pid() -> int | None:
    """The pid of this caller's zygote, ``None`` without one (or before it answered)."""
    zygote = _zygote
    return None if zygote is None else zygote.pid


def forget() -> None:
    """Let go of this caller's zygote (it exits when it sees its socket closed)."""
    global _zygote  # noqa: PLW0603
    with _lock:
        if _zygote is not None:
            _zygote.close()
        _zygote = None


def socket_descriptor() -> int:
    """The descriptor of this caller's zygote's socket; -1 without a zygote."""
    zygote = _zygote
    return -1 if zygote is None else zygote.socket.fileno()


def fork_supervisor(
    spec_json: bytes,
    roles: list[str],
    fds: list[int],
    package_root: str,
    *,
    within: float | None = None,
) -> int | None:
    """Have this caller's zygote fork the supervisor of a run; ``None``: take the plain path.

    ``spec_json`` is the completed spec without its descriptors; ``fds`` are
    the run's descriptors, in the order of ``roles``; ``within`` is the time
    left to the run's deadline (``None``: no deadline). Returns the pid of the
    zygote's child (already reaped by the zygote) once the supervisor is
    forked, ``None`` if it was not and the caller must spawn one, or
    :data:`UNKNOWN` if the zygote was lost (or abandoned) with the request.

    Bounded: the wait for another thread's exchange takes at most
    :data:`ANSWER_LIMIT`, the zygote's start and its answer at most
    :data:`START_LIMIT` (:data:`ANSWER_LIMIT` once it is seen stopped), and
    never beyond the deadline. A zygote that does
    not answer in time is SIGKILLed and forgotten. A call re-entered on a
    thread already in an exchange (from a signal handler) takes the plain
    path at once.
    """
    if getattr(_exchanging, "now", False):
        return None
    if within is not None and within <= 0:
        return None  # no time for an exchange: the plain path never waits on anyone
    request = _request(spec_json, roles)
    if len(request) > _MAX_REQUEST or len(fds) > _MAX_DESCRIPTORS:
        return None
    identity = fingerprint()
    if identity is None:
        return None  # cannot tell whether the zygote still fits: this once, the plain path
    _exchanging.now = True
    try:
        return _exchange(request, fds, package_root, identity, within)
    finally:
        _exchanging.now = False


def _exchange(
    request: bytes,
    fds: list[int],
    package_root: str,
    identity: tuple[object, ...],
    within: float | None,
) -> int | None:
    global _zygote, started  # noqa: PLW0603 - the one zygote of this caller
    end = time.monotonic() + (START_LIMIT if within is None else min(START_LIMIT, within))

    def left(limit: float) -> float:
        return max(0.0, min(limit, end - time.monotonic()))

    if not _lock.acquire(timeout=left(ANSWER_LIMIT)):
        return None  # another thread's exchange is stuck (and will abandon it): not ours
    try:
        zygote = _zygote
        if zygote is not None and zygote.identity != identity:
            zygote.close()  # it cannot take on what changed; a fresh one can
            zygote = _zygote = None
        if zygote is None:
            try:
                zygote = _zygote = _Zygote(package_root, identity, left(START_LIMIT))
            except (OSError, RuntimeError):
                return None
            started += 1
        answer = zygote.exchange(request, fds, left(START_LIMIT))
        if answer is None or answer == UNKNOWN:
            zygote.close()
            _zygote = None
    finally:
        _lock.release()
    if answer is None or answer < 0:
        return None
    return answer


def _request(spec_json: bytes, roles: list[str]) -> bytes:
    """The request's header: the spec and what the supervisor must inherit, as of now."""
    limits = {}
    for name in RLIMITS:
        with contextlib.suppress(OSError, ValueError):
            limits[name] = resource.getrlimit(getattr(resource, name))
    return json.dumps(
        {
            "spec": spec_json.decode(),
            "roles": roles,
            "environ": dict(os.environ),
            "rlimits": limits,
            "ignored": list(ignored_now()),
            "sigmask": sorted(int(n) for n in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        }
    ).encode()

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

**It fails closed.** The zygote serves only its caller as it started it:
every request carries the sender's credentials, which the kernel vouches for
(``SCM_CREDENTIALS``), and a proof only a thread that may look into the zygote
can make (:meth:`_Zygote.proof`: a thread that gave up the zygote's user or
capabilities, or that Landlock restricts, cannot). A request without them is
refused, and takes the plain path. This side lets go of its zygote as soon
as the fingerprint differs or cannot be read, or the proof cannot be made.
No descriptor is trusted by its number (:meth:`_Zygote.intact`): a program
that closed the zygote's socket and opened something else under its number
has nothing written there, nor closed, and its next launch starts afresh.

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
import array
import contextlib
import errno
import json
import math
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from tether.caller.fingerprint import RLIMITS, Unreadable, fingerprint
from tether.caller.lifeline import close_all, keep_from_forks, let_go, no_fork_meanwhile
from tether.caller.lifeline import identity as descriptor_identity
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
#: Room for the request's first line, by when its answer is needed (:func:`_exchange`).
_ANSWER_BY_SIZE: Final = 32
#: The most descriptors one request carries (the zygote's ``MAX_DESCRIPTORS``):
#: a run with more (many ``pass_fds``) takes the plain path.
_MAX_DESCRIPTORS: Final = 16

_BOOTSTRAP: Final = (
    "import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "from tether.supervisor.zygote import main; "
    "raise SystemExit(main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))"
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
        # Made and put on the list of what no forked child keeps in one step
        # under the lock a fork takes: a worker forked meanwhile would hold the
        # zygote's socket, and could ask it for commands.
        with no_fork_meanwhile():
            ours, theirs = self._socket_pair()
            proof, unused = os.pipe2(os.O_CLOEXEC)
            keep_from_forks(ours.fileno(), theirs.fileno(), proof, unused)
        close_all([unused])
        #: The number, in the zygote, of a pipe only it holds (:meth:`proof`).
        self._proof = proof
        self.socket = ours
        self.identity = identity
        #: What the socket and the pidfd are, checked before each use (:meth:`intact`).
        self._made = descriptor_identity(ours.fileno())
        self._pidfd_made: tuple[int, int] | None = None
        #: The zygote's pid, once it has answered a request.
        self.pid: int | None = None
        self._pidfd: int | None = None
        #: The zygote's pid as started (``pid`` is the one it answers with).
        self._child = -1
        self._error: BaseException | None = None
        # ``-X tether-zygote`` names it on its command line (``ps -f``); Python
        # keeps an unknown ``-X`` option in ``sys._xoptions`` and does nothing else.
        argv = [sys.executable, "-X", ZYGOTE_NAME, "-P", "-c", _BOOTSTRAP, package_root]
        argv += [str(theirs.fileno()), str(os.getpid()), str(proof)]
        started = _thread.allocate_lock()
        started.acquire()
        try:
            _thread.start_new_thread(self._keep, (argv, theirs, started))
        except BaseException:
            close_all([theirs.detach(), proof])
            self.close()
            raise
        if not started.acquire(timeout=limit) or self._pidfd is None:
            self.close()
            raise OSError(errno.ETIMEDOUT, f"the zygote did not start: {self._error}")

    @staticmethod
    def _socket_pair() -> tuple[socket.socket, socket.socket]:
        """The caller's end and the zygote's, which sees every sender's credentials."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # From the start, so that no message ever reaches it without them.
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        return ours, theirs

    def _keep(self, argv: list[str], theirs: socket.socket, started: _thread.LockType) -> None:
        """In a thread of its own: start the zygote, then wait for its end and reap it."""
        try:
            # Under the fork lock: a worker forked meanwhile would hold the
            # pipe on which subprocess waits for the exec.
            with no_fork_meanwhile():
                zygote = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(), self._proof),
                    start_new_session=True,
                )
            self._child = zygote.pid
            pidfd = os.pidfd_open(zygote.pid)
            self._pidfd_made = descriptor_identity(pidfd)
            self._pidfd = pidfd
        except BaseException as error:  # told to the launching thread
            self._error = error
            return
        finally:
            close_all([theirs.detach(), self._proof])  # the zygote's alone from now on
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
        # Who sends it, as the kernel checks it (the user and group must be this
        # process's own): the zygote serves no one but the caller as it started it.
        ancillary = [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, _credentials())]
        if fds:
            ancillary.append(
                (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())
            )
        try:
            self.socket.sendmsg([request], ancillary, socket.MSG_DONTWAIT)
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

    def intact(self) -> bool:
        """Whether the socket and the pidfd are still the ones made for this zygote.

        A program may close descriptors it does not know (``os.closerange``,
        as daemons do) and open others, which take the freed numbers: a
        request written there would hand a stranger the caller's whole
        environment and descriptors. Checked before every use; a zygote whose
        descriptors are gone is let go of (:meth:`disown`), and a fresh one
        started.
        """
        if descriptor_identity(self.socket.fileno()) != self._made:
            return False
        pidfd = self._pidfd
        return pidfd is None or descriptor_identity(pidfd) == self._pidfd_made

    def proof(self) -> int | None:
        """A descriptor that shows the zygote that this thread may look into it; ``None``: not.

        The zygote's own copy of a pipe only it holds, opened through
        ``/proc/<zygote>/fd``, which the kernel allows only to a thread that
        may look into the zygote as ``ptrace`` would (the same user and no
        fewer capabilities, and no Landlock domain the zygote is not in:
        Landlock shows nowhere in ``/proc``, but a thread it restricts cannot
        look into a process outside its domain). Sent with every request, and
        checked by the zygote (:func:`tether.supervisor.zygote.main`): code
        that holds the socket but has less than the zygote is refused. A
        thread that cannot open it has less than the zygote now: it is let
        go of, and a fresh one started, which has what the thread has. Raises
        :class:`OSError` for want of a descriptor (nothing is known then).
        """
        try:
            return os.open(
                f"/proc/{self._child}/fd/{self._proof}",
                os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC,
            )
        except OSError as error:
            if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                raise  # short of descriptors: the caller cannot tell, this once
            return None

    def disown(self) -> None:
        """Let go of the zygote's descriptors without closing them: their numbers are not ours."""
        let_go(self.socket.fileno())
        self.socket.detach()
        self._pidfd = None

    def close(self) -> None:
        """Close the socket (the zygote sees its end of file and exits) and the pidfd."""
        if not self.intact():
            self.disown()
            return
        with contextlib.suppress(OSError):
            close_all([self.socket.detach()])
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
#: Whether a fresh zygote could not be shown that a request is its caller's
#: (:meth:`_Zygote.proof`): every launch then takes the plain path.
_unprovable = False


def _forget_in_child() -> None:
    """In a forked child: this process's zygote is its parent's, never to be used here.

    Its socket is on the list of what no forked child keeps
    (:func:`~tether.caller.lifeline.keep_from_forks`), closed there if it is still the
    socket made for the zygote; the pidfd is closed here on the same condition.
    """
    global _zygote, _lock, _exchanging  # noqa: PLW0603 - the fork-safety reset of the one zygote
    if _zygote is not None:
        intact = _zygote.intact()
        _zygote.socket.detach()
        if intact and _zygote._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(_zygote._pidfd)
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
    if _zygote is None:
        return
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
    if _unprovable or getattr(_exchanging, "now", False):
        return None
    if within is not None and within <= 0:
        return None  # no time for an exchange: the plain path never waits on anyone
    request = _request(spec_json, roles)
    # (``>=``: the proof goes with the descriptors; and room for the first line.)
    if len(request) > _MAX_REQUEST - _ANSWER_BY_SIZE or len(fds) >= _MAX_DESCRIPTORS:
        return None
    try:
        identity = fingerprint()
    except Unreadable:
        # Cannot tell whether the zygote still fits (its credentials changed so
        # that /proc/self cannot be read, say): fail closed, let go of it now.
        forget()
        return None
    if identity is None:
        return None  # no descriptor left to read it: this once, the plain path
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
    global _zygote  # noqa: PLW0603 - the one zygote of this caller
    end = time.monotonic() + (START_LIMIT if within is None else min(START_LIMIT, within))

    def left(limit: float) -> float:
        return max(0.0, min(limit, end - time.monotonic()))

    if not _lock.acquire(timeout=left(ANSWER_LIMIT)):
        return None  # another thread's exchange is stuck (and will abandon it): not ours
    try:
        ready = _ready(package_root, identity, left(START_LIMIT))
        if ready is None:
            return None
        zygote, proof = ready
        # By when the answer is needed, on the request's first line: the zygote's wait for its
        # spare is bounded by the same clock (the zygote and this process share CLOCK_MONOTONIC).
        limit = left(START_LIMIT)
        answer_by = b"%.6f\n" % (time.monotonic() + limit)
        try:
            answer = zygote.exchange(answer_by + request, [*fds, proof], limit)
        finally:
            os.close(proof)
        if answer is None or answer == UNKNOWN:
            zygote.close()
            _zygote = None
    finally:
        _lock.release()
    if answer is None or answer < 0:
        return None
    return answer


def _ready(
    package_root: str, identity: tuple[object, ...], limit: float
) -> tuple[_Zygote, int] | None:
    """This caller's zygote, as it is now, and the proof for its request (:meth:`_Zygote.proof`).

    Under :data:`_lock`. The zygote as it is: one whose descriptors are no
    longer the ones made for it is let go of (never closed: their numbers are
    someone else's now); one that differs from the caller now (its
    fingerprint) or that the launching thread cannot show a proof to is
    closed; a fresh one is started in their place. ``None``: the plain path,
    this once (no descriptor left, the zygote would not start), or for good
    (not even a fresh zygote can be shown a proof).
    """
    global _zygote, started, _unprovable  # noqa: PLW0603 - the one zygote of this caller
    zygote = _zygote
    if zygote is not None and not zygote.intact():
        zygote.disown()  # the program closed its descriptors: start afresh
        zygote = _zygote = None
    try:
        proof = None if zygote is None or zygote.identity != identity else zygote.proof()
        if proof is not None and zygote is not None:
            return zygote, proof
        if zygote is not None:
            zygote.close()  # it cannot take on what changed; a fresh one can
        zygote = _zygote = None
        try:
            zygote = _zygote = _Zygote(package_root, identity, limit)
        except (OSError, RuntimeError):
            return None
        started += 1
        proof = zygote.proof()
    except OSError:
        return None  # no descriptor left to show it: this once, the plain path
    if proof is None:
        # Not even a fresh one can be shown (no /proc to open it through?):
        # no zygote for this process, every launch takes the plain path.
        zygote.close()
        _zygote, _unprovable = None, True
        return None
    return zygote, proof


def _credentials() -> bytes:
    """This process's ``struct ucred`` for the zygote: its pid, effective user and group."""
    return struct.pack("iII", os.getpid(), os.geteuid(), os.getegid())


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

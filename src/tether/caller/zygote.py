"""The caller's side of the zygote: one fork server per calling process, for the API.

The first launch spawns the zygote (:mod:`tether.supervisor.zygote`) from a thread of
tether's own that reaps it; each later launch is one exchange on its socket, under a lock,
bounded by the request's deadline and :data:`START_LIMIT` (:data:`ANSWER_LIMIT` once the
zygote is seen stopped). The request carries what the supervisor must inherit as of now;
everything else is the caller's fingerprint (:mod:`tether.caller.fingerprint`), and a
zygote that differs, cannot be shown a proof (:meth:`_Zygote.proof`) or whose descriptors
are no longer its own (:meth:`_Zygote.intact`) is let go of for a fresh one. A lost zygote
means the plain path, never a lost launch. ``TETHER_ZYGOTE=0`` turns it off. Why, and what
it promises: ``docs/architecture.md`` (Processes) and ``docs/threat-model.md``.
"""

from __future__ import annotations

import _thread
import array
import contextlib
import errno
import json
import math
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

from tether.caller.fingerprint import Unreadable, caller_state
from tether.caller.lifeline import close_all, keep_from_forks, let_go, no_fork_meanwhile
from tether.caller.lifeline import identity as descriptor_identity
from tether.caller.request import ignored_now
from tether.linux.prctl import ZYGOTE_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from tether.caller.fingerprint import CallerState

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

#: A larger request takes the plain path (the socket's send buffer may refuse a smaller one).
_MAX_REQUEST: Final = 1 << 20
#: Room for the request's first line, by when its answer is needed (:func:`_exchange`).
_ANSWER_BY_SIZE: Final = 32
#: The most descriptors one request carries (the zygote's ``MAX_DESCRIPTORS``).
_MAX_DESCRIPTORS: Final = 16

_BOOTSTRAP: Final = (
    "import gc, sys; gc.disable(); sys.path.insert(0, sys.argv[1]); "
    "from tether.supervisor.zygote import main; "
    "raise SystemExit(main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))"
)

#: How long a zygote seen not running (stopped, traced) may take to answer, and one that runs
#: (a fork may wait seconds for a CPU on a busy machine; a fresh one starts an interpreter).
ANSWER_LIMIT: Final = 1.0
START_LIMIT: Final = 5.0
#: How often a zygote that has not answered yet is looked at (:meth:`_Zygote.stopped`).
_LOOK_EVERY: Final = 0.1


class _Zygote:
    """One running zygote: the socket to it, and what it was started with.

    A child of this process, spawned and reaped by a thread of tether's own (:meth:`_keep`):
    its parent-death signal follows that thread, which ends only with this process."""

    def __init__(self, package_root: str, identity: tuple[object, ...], limit: float) -> None:
        # Under the fork lock: a worker forked meanwhile would hold the socket.
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
        # ``-X tether-zygote`` names it for ``ps -f``; Python ignores an unknown ``-X``.
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
            # Under the fork lock: a worker forked meanwhile would hold subprocess's exec pipe.
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
        """Send one request: the pid forked, ``-1`` if none, :data:`UNKNOWN` if lost after it
        had it, ``None`` if lost before, :data:`TOO_BIG` if it does not fit. At most ``limit``
        seconds, then it is abandoned."""
        # Who sends it, as the kernel checks it: the zygote serves its caller alone.
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
        """The zygote's answer, in words; none if lost, or not in time (``limit`` while it runs,
        :data:`ANSWER_LIMIT` once seen stopped), and then it is abandoned."""
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
        """Whether the socket and the pidfd are still the ones made for this zygote: a program may
        have closed them and opened others under their numbers."""
        if descriptor_identity(self.socket.fileno()) != self._made:
            return False
        pidfd = self._pidfd
        return pidfd is None or descriptor_identity(pidfd) == self._pidfd_made

    def proof(self) -> int | None:
        """A descriptor showing the zygote that this thread may look into it (its own pipe, opened
        through ``/proc/<zygote>/fd``: same user, no fewer capabilities, no other Landlock domain);
        ``None``: it may not. :class:`OSError` for want of a descriptor."""
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


#: The answer when the zygote was lost with the request (the status channel says if it forked).
UNKNOWN: Final = 0

#: The answer when the request does not fit in one message: the zygote never saw it.
TOO_BIG: Final = -2

_zygote: _Zygote | None = None
_lock = threading.Lock()
#: Set on a thread in an exchange: a launch re-entered there (a handler) takes the plain path.
_exchanging = threading.local()
#: How many zygotes this process has started (for tests and the benchmark).
started = 0
#: Whether not even a fresh zygote can be shown a proof: every launch takes the plain path.
_unprovable = False


def _forget_in_child() -> None:
    """In a forked child: the zygote is the parent's; its socket is closed by
    :func:`~tether.caller.lifeline.keep_from_forks`, the pidfd here, if still theirs."""
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

    Returns the zygote's child's pid, or :data:`UNKNOWN` if the zygote was lost with the
    request. ``within``: time left to the deadline; every wait is bounded (module docstring)."""
    if _unprovable or getattr(_exchanging, "now", False):
        return None
    if within is not None and within <= 0:
        return None  # no time for an exchange: the plain path never waits on anyone
    try:
        state = caller_state()
    except Unreadable:
        # Cannot tell whether the zygote still fits: fail closed, let go of it now.
        forget()
        return None
    if state is None:
        return None  # no descriptor left to read it: this once, the plain path
    request = _request(spec_json, roles, state)
    # (``>=``: the proof goes with the descriptors; and room for the first line.)
    if len(request) > _MAX_REQUEST - _ANSWER_BY_SIZE or len(fds) >= _MAX_DESCRIPTORS:
        return None
    identity = state.identity
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
        # By when the answer is needed, on the first line: the zygote's wait for its spare is
        # bounded by the same clock (CLOCK_MONOTONIC).
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
    """This caller's zygote as it is now, and the proof for its request; ``None``: the plain
    path (this once, or for good if not even a fresh zygote can be shown a proof). Under
    :data:`_lock`; a zygote that no longer fits is replaced."""
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
        # Not even a fresh one can be shown: every launch takes the plain path.
        zygote.close()
        _zygote, _unprovable = None, True
        return None
    return zygote, proof


def _credentials() -> bytes:
    """This process's ``struct ucred`` for the zygote: its pid, effective user and group."""
    return struct.pack("iII", os.getpid(), os.geteuid(), os.getegid())


def _request(spec_json: bytes, roles: list[str], state: CallerState) -> bytes:
    """The request's header: the spec and what the supervisor must inherit, as of now (the
    rlimits and ignored signals as ``state``, read just before, says them)."""
    ignored = ignored_now() if state.ignored is None else state.ignored
    sigmask = sorted(int(n) for n in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    fields = (
        ("spec", json.dumps(spec_json.decode())),
        ("roles", json.dumps(roles)),
        ("environ", _environ_json()),
        ("rlimits", json.dumps(state.rlimits)),
        ("ignored", json.dumps(list(ignored))),
        ("sigmask", json.dumps(sigmask)),
    )
    # One JSON object, as ``json.dumps`` writes it, the environment's text spliced in.
    return ("{" + ", ".join(f'"{name}": {text}' for name, text in fields) + "}").encode()


#: The environment as last sent: ``os.environ``'s own bytes, and their JSON (:func:`_environ_json`).
_environ_sent: tuple[dict[bytes, bytes], str] = ({}, "")


def _environ_json() -> str:
    """``os.environ`` as of now, as JSON; its text reused while the environment is the same,
    compared whole (keys and values, as bytes: one C comparison, where decoding it again costs
    tens of microseconds per run)."""
    global _environ_sent  # noqa: PLW0603 - the last one sent, replaced whole
    data = getattr(os.environ, "_data", None)  # CPython's: the bytes os.environ decodes
    if not isinstance(data, dict):
        return json.dumps(dict(os.environ))
    seen, text = _environ_sent
    if text and data == seen:
        return text
    before = dict(data)
    text = json.dumps(dict(os.environ))
    if data == before:  # not changed by another thread meanwhile: this text is that environment
        _environ_sent = (before, text)
    return text

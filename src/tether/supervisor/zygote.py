"""The zygote: one caller's fork server, which forks a detached supervisor per request.

It forks the first request's supervisor at once, then loads the supervisor's side whole
and freezes it (``gc.freeze()``), and serves: each request is one ``SOCK_SEQPACKET``
message (a JSON header: the spec and the caller's process state as of the request) with the
run's descriptors attached. Only the caller as it started the zygote is served
(``SCM_CREDENTIALS`` and a proof, :func:`main`). Each supervisor is forked ahead as a
*spare* (:class:`_Spare`), with the cgroup of a run like the last made while it waits. The
socket is the zygote's lifeline; its parent-death signal ends it even while stopped. The
zygote passes the spec on unread; the supervisor checks it. Why, and what it promises:
``docs/architecture.md`` (Processes), ``docs/threat-model.md``.
"""

from __future__ import annotations

import array
import contextlib
import json
import math
import os
import select
import signal
import socket
import struct
import sys
import time

from tether.core.reasons import TETHER_FAILED
from tether.linux.cgroup import CgroupUnavailable, warm_attach_lock
from tether.linux.clone3 import clone_into_cgroup_likely
from tether.linux.descriptors import close_all_but
from tether.linux.double_fork import detach_and_become
from tether.linux.prctl import ZYGOTE_NAME, set_parent_death_signal, set_process_name
from tether.linux.run_cgroups import RunCgroups
from tether.supervisor.cgroup_choice import containment_setting, prepare_run_cgroups, start_warming
from tether.supervisor.detach import loaded, loading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, NoReturn

__all__ = ["MAX_DESCRIPTORS", "MAX_REQUEST", "main"]

#: The largest request, in bytes; a caller with a larger spec takes the plain path.
MAX_REQUEST: Final = 1 << 20
#: The most descriptors one request carries.
MAX_DESCRIPTORS: Final = 16


def main(sock_fd: int, caller: int, proof_fd: int) -> int:
    """Serve the caller (pid ``caller``) on ``sock_fd`` until it is gone.

    Only requests the kernel vouches for as the caller's (pid, the zygote's user and group)
    carrying ``proof_fd`` anew as their last descriptor; others are answered ``-1``."""
    loading()
    with contextlib.suppress(OSError, AttributeError):
        set_process_name(ZYGOTE_NAME)  # ``ps`` tells it from an orphaned ``python``
    with contextlib.suppress(OSError):
        set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != caller:
        os._exit(0)  # the caller is gone already, before the signal was asked for
    os.chdir("/")
    proof = _identity(proof_fd)
    server = socket.socket(fileno=sock_fd)
    # Set by the caller already; again here, for one that did not.
    server.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    here = _Here()
    warm = False
    spare: _Spare | None = None
    while True:
        try:
            request = _receive(server)
        except OSError:
            request = None
        if request is None:
            if spare is not None:
                spare.let_go()
            os._exit(0)  # the caller is gone (and the spare, which sees this one go)
        header, fds, sender = request
        if not _vouched_for(fds, sender, caller, proof):
            # Not the caller as it started this zygote: refused (the plain path).
            _close(fds)
            with contextlib.suppress(OSError):
                server.send(f"-1 {os.getpid()}".encode())
            continue
        limits = _serve(server, header, fds, spare, here)
        spare = None
        if not warm:
            warm = True
            _warm_up(limits)
        spare = _Spare.start(server, here, limits)


def _serve(
    server: socket.socket,
    header: bytes,
    fds: list[int],
    spare: _Spare | None,
    here: _Here,
) -> object:
    """Answer one request, through the spare if it takes it in time, else forked here;
    return its limits, for the next spare's cgroup made ahead."""
    answer_by, header = _answer_by(header)
    passed_over = None
    child = -1
    if spare is not None:
        child = spare.take(header, fds, answer_by)
        passed_over = spare if spare.killed else None
    forked = child < 0
    request = None
    if forked:
        request = _Request.read(header)
        child = _fork_supervisor(server, request, fds, here)
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    with contextlib.suppress(OSError):
        server.send(f"{child} {os.getpid()}".encode())
    if forked and child > 0:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, 0)
    if passed_over is not None:
        passed_over.remove_its_cgroups()  # after the answer: out of the launch's way
    if request is None:
        request = _Request.read(header)  # after the answer, too
    return None if request is None else request.spec.get("limits")


#: The longest a spare is given to say it took a request (well under a millisecond when
#: idle), and never more than half of what is left of the caller's bound.
SPARE_LIMIT: Final = 1.0


def _answer_by(message: bytes) -> tuple[float, bytes]:
    """The header, and by when (``time.monotonic()``) the caller needs the answer: the
    request's first line, else :data:`SPARE_LIMIT` from now."""
    first, newline, rest = message.partition(b"\n")
    try:
        if newline and rest.startswith(b"{"):
            return float(first), rest
    except ValueError:
        pass
    return time.monotonic() + SPARE_LIMIT, message


def _vouched_for(
    fds: list[int], sender: tuple[int, int, int], caller: int, proof: tuple[int, int] | None
) -> bool:
    """Whether the kernel vouches for a request as the caller's: its pid, the zygote's
    effective user and group, and the zygote's pipe (``proof``) as its last descriptor,
    which is taken out of ``fds`` and closed."""
    shown = fds.pop() if fds else -1
    vouched = proof is not None and _identity(shown) == proof
    with contextlib.suppress(OSError):
        os.close(shown)
    return vouched and sender == (caller, os.geteuid(), os.getegid())


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


#: Room for a request's ancillary data: its descriptors, and its sender's credentials.
_ANCILLARY: Final = socket.CMSG_SPACE(MAX_DESCRIPTORS * 4) + socket.CMSG_SPACE(12)


def _receive(server: socket.socket) -> tuple[bytes, list[int], tuple[int, int, int]] | None:
    """One request, its descriptors, and its sender as the kernel vouches for it
    (``SCM_CREDENTIALS``; ``(0, -1, -1)`` without them); ``None`` at end of file."""
    data, ancillary, _flags, _address = server.recvmsg(MAX_REQUEST, _ANCILLARY)
    fds: list[int] = []
    sender = (0, -1, -1)
    for level, kind, value in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_RIGHTS:
            fds += array.array("i", value[: len(value) - len(value) % 4])
        elif kind == socket.SCM_CREDENTIALS and len(value) >= 12:
            pid, uid, gid = struct.unpack("iII", value[:12])
            sender = (pid, uid, gid)
    if not data:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        return None
    return data, fds, sender


def _identity(fd: int) -> tuple[int, int] | None:
    """What ``fd`` is (device and inode); ``None`` if it is not open."""
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _warm_up(limits: object = None) -> None:
    """Load everything a supervisor loads after its launch, lazy imports and each run's
    redactor's reading included, then freeze it: shared by every fork, not private to each.
    ``limits``: the first run's, for the cgroups each spare makes ahead (:func:`_warm_cgroups`)."""
    with contextlib.suppress(Exception):
        import encodings.ascii  # noqa: F401 - the codec the record's checks ask for
        import pathlib  # noqa: F401 - the loop's, for a run with a record

        import tether.core.spec
        import tether.shared.paths
        import tether.shared.secrets
        import tether.supervisor.event_log
        import tether.supervisor.launch
        import tether.supervisor.loop
        import tether.supervisor.process_tree
        import tether.supervisor.sentry
        from tether.linux.prctl import bind

        bind()
        # What every run's redactor reads and compiles, read once for all the forks.
        tether.shared.secrets.prepare(os.environ)
        # The cgroups this process is in, found once: each spare finds them kept, as long as
        # its /proc/self/cgroup and mountinfo still read the same (own_cgroup says why).
        from tether.linux.cgroup import own_cgroup
        from tether.linux.cgroup1 import find_hierarchies

        find_hierarchies()
        own_cgroup()
    _warm_cgroups(limits)
    with contextlib.suppress(Exception):
        from tether.supervisor.loop import rehearse

        rehearse()  # one run's pure part, gone through once for all the forks
    loaded()


def _warm_cgroups(limits: object) -> None:
    """Make, check and remove one run's cgroups here as a spare makes them ahead (``limits``:
    the first run's), so that its forks share what that code writes on a first run
    (``docs/containment.md``, "How the cgroup is found and made")."""
    with contextlib.suppress(Exception):
        ahead = _made_ahead(limits)
        if ahead is not None:
            ahead.containment.intact()
            ahead.containment.join_takes_lock()
            ahead.containment.discard()


def _fork_supervisor(
    server: socket.socket, request: _Request | None, fds: list[int], here: _Here
) -> int:
    """Fork the request's supervisor (``setsid``, fork); return the child's pid, or -1.

    The cgroup is made here (named after the zygote, which outlives it) and the intermediate
    warms the join's lock before it exits (:mod:`tether.supervisor.cgroup_choice`)."""
    containment = None if request is None else _prepare(request)
    try:
        child = os.fork()
    except OSError:
        if containment is not None:
            containment.discard()
        return -1
    if child == 0:
        try:
            server.close()
        except BaseException:
            os._exit(TETHER_FAILED)

        def warm_the_join(_supervisor: int) -> None:
            if containment is not None and containment.join_takes_lock():
                warm_attach_lock()  # only a cgroup joined by writing needs the lock ready

        def become() -> NoReturn:
            if request is None:
                os._exit(TETHER_FAILED)  # not a request: the caller sees a lost supervisor
            _become(request, fds, containment, here)

        detach_and_become(become, failed=TETHER_FAILED, in_intermediate=warm_the_join)
    if containment is not None:
        containment.release()
    return child


class _Spare:
    """The next request's supervisor, forked and detached before the request comes.

    Its first act on a request is to say it took it; without that word in time (:meth:`take`)
    it is SIGKILLed through its pidfd and the zygote forks instead, so a request starts once
    (``docs/architecture.md``, Processes)."""

    __slots__ = ("intermediate", "killed", "pid", "pidfd", "socket")

    def __init__(self, intermediate: int, ours: socket.socket, pid: int, pidfd: int) -> None:
        #: The spare's parent, reaped: the pid the zygote answers a request with.
        self.intermediate = intermediate
        self.socket = ours
        self.pid = pid
        self.pidfd = pidfd
        #: Whether the zygote SIGKILLed it (it did not take a request in time, or was stopped).
        self.killed = False

    @classmethod
    def start(cls, server: socket.socket, here: _Here, limits: object) -> _Spare | None:
        """Fork a spare (``setsid``, fork: detached, as any supervisor); ``None`` if none can be."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        try:
            child = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if child == 0:
            try:
                server.close()
                ours.close()
            except BaseException:
                os._exit(TETHER_FAILED)

            def tell_its_pidfd(spare: int) -> None:
                pidfd = os.pidfd_open(spare)
                socket.send_fds(theirs, [str(spare).encode()], [pidfd])

            detach_and_become(
                lambda: _serve_as_spare(theirs, here, limits),
                failed=TETHER_FAILED,
                in_intermediate=tell_its_pidfd,
            )
        theirs.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(child, 0)
        try:
            said, pidfds, _flags, _address = socket.recv_fds(ours, 32, 1, socket.MSG_DONTWAIT)
        except OSError:
            said, pidfds = b"", []
        if not said.isdigit() or len(pidfds) != 1:
            for fd in pidfds:
                os.close(fd)
            ours.close()  # a spare without its pidfd here is not used: it sees end of file
            return None
        return cls(child, ours, int(said), pidfds[0])

    def take(self, header: bytes, fds: list[int], answer_by: float) -> int:
        """Pass the request on; the pid to answer with, ``-1`` if the spare did not take it,
        ``0`` (``UNKNOWN``) if it said so only after it was given up on. Waits at most
        :data:`SPARE_LIMIT`, and half of what is left until ``answer_by``."""
        wait = min(SPARE_LIMIT, max(0.0, answer_by - time.monotonic()) / 2)
        try:
            socket.send_fds(self.socket, [header], fds, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
        except OSError:
            self.close()
            return -1  # gone, or a request larger than the pair takes: fork instead
        try:
            poller = select.poll()
            poller.register(self.socket, select.POLLIN)
            if poller.poll(math.ceil(wait * 1000)) and self._took():
                return self.intermediate
            self._kill()
            # A word sent as the wait ended: it took the request, and may have run some of it.
            return 0 if self._took() else -1
        finally:
            self.close()

    def _took(self) -> bool:
        try:
            return self.socket.recv(16, socket.MSG_DONTWAIT) == _TAKEN
        except OSError:
            return False

    def _kill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            self.killed = True

    def close(self) -> None:
        """Close what the zygote holds of the spare (unused, it sees end of file and exits); a
        killed one's pidfd is kept for :meth:`remove_its_cgroups`."""
        self.socket.close()
        if not self.killed:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)

    def let_go(self) -> None:
        """The zygote is ending: close, after killing the spare if it is stopped (it would
        never see the end of file), and remove that one's cgroups."""
        with contextlib.suppress(OSError):
            if _stopped(self.pid, self.pidfd):
                self._kill()
        self.close()
        if self.killed:
            self.remove_its_cgroups()

    def remove_its_cgroups(self, within: float = SPARE_LIMIT) -> None:
        """Once the killed spare is dead (at most ``within`` seconds), remove the cgroups it made
        ahead, then its pidfd; one still frozen keeps them for ``tether prune``."""
        try:
            if select.select([self.pidfd], [], [], within)[0]:
                from tether.linux.run_cgroups import remove_left_by

                remove_left_by(self.pid)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)


#: What a spare says, first, when it gets its request.
_TAKEN: Final = b"taken"


def _stopped(pid: int, pidfd: int) -> bool:
    """Whether process ``pid`` (``pidfd``) is stopped or traced, as ``/proc`` says now."""
    from tether.linux.proctree import state_of

    state = state_of(pid)
    if select.select([pidfd], [], [], 0)[0]:
        return False  # gone: the state read was of another process, if of any
    return state in ("T", "t")


def _serve_as_spare(requests: socket.socket, here: _Here, limits: object) -> NoReturn:
    """In the spare: make a cgroup like the last run's, wait for the one request, become its
    supervisor; at end of file (no request will come), remove the cgroup and exit."""
    ahead = _made_ahead(limits)
    try:
        header, fds, _flags, _address = socket.recv_fds(requests, MAX_REQUEST, MAX_DESCRIPTORS)
    except OSError:
        header, fds = b"", []
    if header:
        # First, before anything of the request: the zygote forks it itself without this word.
        with contextlib.suppress(OSError):
            requests.send(_TAKEN, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    requests.close()
    request = _Request.read(header) if header else None
    containment = None if ahead is None else ahead.for_request(request, here)
    if containment is not None and containment.warming is None and containment.join_takes_lock():
        containment.warming = start_warming()  # now: the lock is ready a grace period from here
    if not header:
        os._exit(0)
    if request is None:
        os._exit(TETHER_FAILED)  # not a request: the caller sees a lost supervisor
    _become(request, fds, containment, here)


class _MadeAhead:
    """The containment of a run like the last (same limits, same setting), made before the request.

    Without limits only where the command will be born in it: a join by writing wants its lock
    warmed just before it."""

    __slots__ = ("containment", "limits", "setting")

    def __init__(self, setting: str, limits: object, containment: RunCgroups) -> None:
        self.setting = setting
        self.limits = limits
        self.containment = containment

    def for_request(self, request: _Request | None, here: _Here) -> RunCgroups | None:
        """This containment if ``request`` would make the same and it is intact (it may have been
        removed while it waited); else ``None``, and it is removed."""
        limits = self.limits
        if request is not None and request.spec.get("limits") == limits:
            with contextlib.suppress(CgroupUnavailable):
                same = containment_setting(request.environ) == self.setting
                # Limits were read under the zygote's environment (a user bus, say): the same.
                same = same and (limits is None or request.environ == here.environ)
                if same and self.containment.intact():
                    return self.containment
        self.containment.discard()
        return None


def _made_ahead(limits: object) -> _MadeAhead | None:
    """The cgroup of a run like the last one (``limits``), made ahead; ``None``: not worth it."""
    if not isinstance(limits, dict) and (limits is not None or not clone_into_cgroup_likely()):
        return None
    try:
        setting = containment_setting(os.environ)
    except CgroupUnavailable:
        return None
    if setting == "sweep":
        return None  # nothing to make, or limits refused: the supervisor says so
    containment = prepare_run_cgroups(limits, warm=False, supervisor=False)
    if limits is not None and containment.required_by != "resource limits":
        containment.discard()  # refused, or left to a systemd scope: the supervisor's to say
        return None
    return _MadeAhead(setting, limits, containment)


class _Request:
    """One request's header, parsed: the spec's fields and the caller's process state."""

    __slots__ = ("environ", "ignored", "rlimits", "roles", "sigmask", "spec")

    def __init__(self, fields: dict[str, object], spec: dict[str, object]) -> None:
        self.spec = spec
        self.roles: list[str] = fields["roles"]  # type: ignore[assignment]  # checked by use
        self.environ: dict[str, str] = fields["environ"]  # type: ignore[assignment]
        self.rlimits: dict[str, list[int]] = fields["rlimits"]  # type: ignore[assignment]
        self.ignored: list[int] = fields["ignored"]  # type: ignore[assignment]
        self.sigmask: list[int] = fields["sigmask"]  # type: ignore[assignment]

    @classmethod
    def read(cls, header: bytes) -> _Request | None:
        """The request in ``header``; ``None`` if it is not one (the child then fails)."""
        try:
            fields = json.loads(header)
            spec = json.loads(fields["spec"])
            request = cls(fields, spec)
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(spec, dict) or not isinstance(request.environ, dict):
            return None
        return request


def _prepare(request: _Request) -> RunCgroups | None:
    """The request's containment, from its limits and ``TETHER_CONTAINMENT``; ``None`` where the
    supervisor must make it (limits it cannot read, a systemd scope)."""
    limits = request.spec.get("limits")
    if not isinstance(limits, dict | None):
        return None
    environ = request.environ
    containment = prepare_run_cgroups(limits, warm=False, environ=environ, supervisor=False)
    # A systemd scope takes the process that asks for it: the supervisor asks, once forked.
    return None if containment.deferred else containment


def _become(
    request: _Request, fds: list[int], containment: RunCgroups | None, here: _Here
) -> NoReturn:
    """Take on the caller's process state as the request says (only what differs from the
    zygote's), then become its supervisor."""
    loading()
    roles = dict(zip(request.roles, fds, strict=True))
    # Every descriptor above the standard streams but the run's, above any limit.
    close_all_but(fds if containment is None else fds + containment.join_descriptors())
    if request.environ != here.environ:
        os.environ.clear()
        os.environ.update(request.environ)
    for name, (soft, hard) in request.rlimits.items():
        _set_limit(name, soft, hard)
    _ignore_as_the_caller(set(request.ignored), here.ignored)
    signal.pthread_sigmask(signal.SIG_SETMASK, request.sigmask)

    from tether.supervisor.detach import supervise_fields

    supervise_fields({**request.spec, "fds": roles}, containment)
    os._exit(TETHER_FAILED)


#: Dispositions not passed on: Python ignores the first two itself, the last two are fixed.
_NOT_PASSED: Final = frozenset({signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP})


class _Here:
    """The zygote's own process state a request is compared with, read once as it starts:
    the signals it ignores (it never changes a disposition) and its environment, as a plain
    dict (quick to compare; it never changes its own: only a supervisor forked from it takes
    on a request's)."""

    __slots__ = ("environ", "ignored")

    def __init__(self) -> None:
        self.ignored = _ignored_here()
        self.environ = dict(os.environ)


def _ignored_here() -> frozenset[int]:
    """The signals this process ignores, of those a request passes on (read once: the zygote
    never changes a disposition)."""
    return frozenset(
        number
        for number in signal.valid_signals()
        if number not in _NOT_PASSED and signal.getsignal(number) is signal.SIG_IGN
    )


def _ignore_as_the_caller(ignored: set[int], ignored_here: frozenset[int]) -> None:
    """Ignore what the caller ignores now, and only that: only the difference from
    ``ignored_here`` changes."""
    for number in ignored_here.symmetric_difference(ignored):
        if number in _NOT_PASSED:
            continue
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(number, signal.SIG_IGN if number in ignored else signal.SIG_DFL)


def _set_limit(name: str, soft: int, hard: int) -> None:
    import resource

    number = getattr(resource, name, None)
    if isinstance(number, int):
        resource.setrlimit(number, (soft, hard))


if __name__ == "__main__":  # pragma: no cover - exercised as a subprocess
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))

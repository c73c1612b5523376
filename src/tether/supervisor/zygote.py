"""The zygote: one caller's fork server, which forks a detached supervisor per request.

A Python program that launches hundreds of commands would otherwise start a
fresh interpreter for every supervisor, and each would load ``transitions``,
``structlog`` and the loop again: tens of milliseconds and megabytes of
private memory per run. Its first launch starts this one interpreter
instead (:mod:`tether.caller.zygote` on the caller's side), which

1. forks the supervisor of the first request at once, before it has loaded
   anything heavy (that supervisor takes today's path, watched by its sentry);
2. then loads the supervisor's side whole and freezes it (``gc.freeze()``), so
   every later supervisor is a fork that starts with everything loaded and
   shares those pages with the zygote and its siblings;
3. and then serves: each request is one message on a Unix ``SOCK_SEQPACKET``
   socket, a JSON header (the spec, the roles of the descriptors, the
   caller's environment, umask, resource limits, ignored signals and signal
   mask *at the time of the request*) with the run's descriptors attached
   (``SCM_RIGHTS``: the command's stdio, the caller's working directory, the
   record's directory, the lifeline's and the status channel's ends). It
   forks, the child calls ``setsid`` and forks again
   (:mod:`tether.linux.double_fork`, as ``tether run`` does), and the grandchild,
   detached, takes on the request's process state and becomes the
   supervisor (:func:`tether.supervisor.detach.become`); the zygote answers
   with the child's pid and its own, and reaps the child;
4. and, once a request is answered, forks the next request's supervisor the
   same way, ahead of time (:class:`_Spare`): the next request is passed on
   to it as it came, and the forks are out of the launch's way.

The zygote's socket is also its lifeline: the caller holds the other end
(close-on-exec, and closed in any child the caller forks), so its end of
file means the caller is gone, and the zygote exits. A zygote stopped
(SIGSTOP) cannot read that end of file; its parent-death signal (SIGKILL,
asked for at its start) still ends it with the caller. The supervisors it
forked never depended on it: each has its own lifeline to the caller.

The zygote never reads what the request carries beyond what it must pass on;
the supervisor checks the spec (:meth:`~tether.core.spec.RunSpec.from_json`)
as it would one read from a pipe.
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
from tether.supervisor.cgroup_choice import containment_setting, prepare_run_cgroups
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

    Only the caller, and only while it is as it was when it started this
    zygote: every request must come from the caller's pid with the zygote's
    own effective user and group, as the kernel vouches for them
    (``SCM_CREDENTIALS``), and carry, as its last descriptor, the zygote's own
    pipe ``proof_fd`` opened anew through ``/proc/<zygote>/fd`` (which the
    kernel allows only to a thread that may look into the zygote: not one
    with fewer capabilities, nor one in a Landlock domain). Any other request
    is refused (answered ``-1``: the caller takes the plain path).

    The zygote is the caller's child, in a session of its own, started by a
    thread of the caller's that lives as long as the caller does and reaps
    it: its parent-death signal (SIGKILL) then reaches it however the caller
    ends, even while it is stopped and cannot read its socket's end of file.
    """
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
    # Set by the caller before it started this process (every message since
    # carries its sender's credentials); set again here, for a caller that did not.
    server.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    ignored = _ignored_here()
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
            # Not the caller as it started this zygote (it gave up its user,
            # group or capabilities since, restricted itself, or it is another
            # process holding the socket): refused, and it takes the plain path.
            _close(fds)
            with contextlib.suppress(OSError):
                server.send(f"-1 {os.getpid()}".encode())
            continue
        _serve(server, header, fds, spare, ignored)
        spare = None
        if not warm:
            warm = True
            _warm_up()
        spare = _Spare.start(server, ignored)


def _serve(
    server: socket.socket,
    header: bytes,
    fds: list[int],
    spare: _Spare | None,
    ignored: frozenset[int],
) -> None:
    """Answer one request: through the spare if it takes it in time, else forked here."""
    answer_by, header = _answer_by(header)
    passed_over = None
    child = -1
    if spare is not None:
        child = spare.take(header, fds, answer_by)
        passed_over = spare if spare.killed else None
    forked = child < 0
    if forked:
        child = _fork_supervisor(server, header, fds, ignored)
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


#: The longest a spare is given to say it took a request (a wake-up and a ``send``: well
#: under a millisecond when idle; a busy machine's wait for a CPU is the rest); never
#: more than half of what is left of the caller's own bound (:func:`_answer_by`).
SPARE_LIMIT: Final = 1.0


def _answer_by(message: bytes) -> tuple[float, bytes]:
    """The request's header, and by when (``time.monotonic()``) the caller needs the answer.

    The caller puts that time on the request's first line: the caller's own
    bound on the exchange (its deadline, or the zygote's start limit), so that
    the zygote's wait for its spare is bounded by the same clock. A request
    without it is answered by :data:`SPARE_LIMIT` from now.
    """
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
    """One request, its descriptors, and who sent it; ``None`` at end of file.

    Who sent it is what the kernel vouches for (``SCM_CREDENTIALS``, on every
    message since ``SO_PASSCRED`` is set): the sender's pid, and the user and
    group it claimed, which the kernel lets it claim only if they are its
    own (real, effective or saved; any for a process with ``CAP_SETUID`` /
    ``CAP_SETGID``), or its real ones if it claimed none. ``(0, -1, -1)``
    without them: never a caller.
    """
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


def _warm_up() -> None:
    """Load everything a supervisor loads after its launch, then freeze it for the forks.

    Everything, lazy imports included (``pathlib`` for a run's record, the
    ``prctl`` binding): what a forked supervisor loads itself is private to
    it, a few hundred kilobytes each that a hundred supervisors do not share.
    And what each run's redactor would read and compile the same way (the
    schema's keys, the caller's environment's secrets, the pattern): about
    three milliseconds a run (:mod:`tether.shared.secrets`).
    """
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
    loaded()


def _fork_supervisor(
    server: socket.socket, header: bytes, fds: list[int], ignored: frozenset[int]
) -> int:
    """Fork the request's supervisor (detached: ``setsid``, fork); return the child's pid, or -1.

    The request is read once, here, before the forks: the child, whose every
    first touch of a page copies it, takes it parsed. The run's cgroup is made
    here too, and the intermediate,
    which has nothing else to do, takes the join's lock for nothing before it
    exits: the kernel's wait for that lock then passes while the supervisor
    takes on the request, not in the command's path
    (:mod:`tether.supervisor.cgroup_choice`). The cgroup is named after the
    zygote, which outlives the moment it stays empty (until the command joins).
    ``ignored``: the signals the zygote ignores (:func:`_ignored_here`).
    """
    request = _Request.read(header)
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
            _become(request, fds, containment, ignored)

        detach_and_become(become, failed=TETHER_FAILED, in_intermediate=warm_the_join)
    if containment is not None:
        containment.release()
    return child


class _Spare:
    """The next request's supervisor, forked and detached before the request comes.

    A launch through the zygote spent 4 to 7 ms in the zygote's fork, the
    intermediate's ``setsid`` and fork, and the hops between the three
    processes, before the supervisor ran a line of its own. The spare has
    done all that while the zygote had nothing to do (after a request is
    answered): it waits on a socket pair of its own, and the request, as it
    came, is passed on to it with its descriptors. From there it is the
    supervisor of a forked request (:func:`_serve_as_spare`): it takes on the
    caller's state *as of the request*, never of its own fork, and makes the
    run's cgroup itself.

    A spare that is gone (killed, or never started) costs nothing but the
    fork it saved: the zygote then forks as before. One spare per zygote, idle
    until used: blocked in one ``recv``, and ending when the zygote does (its
    end of the pair closes), so a caller's death takes it too.

    A spare sits idle for as long as its caller launches nothing, where any
    process of the same user may stop it (``SIGSTOP``), freeze it (a freezer
    cgroup) or starve it, and a request passed to a spare that does not run
    would hold its launch up for as long as it stays so. A look at its state
    first would be a race (stopped right after the look), so there is none:
    the spare's first act on a request, before anything else, is to say it
    took it, and the zygote waits for that word no longer than the caller's
    own bound allows (:meth:`take`, :data:`SPARE_LIMIT`). Without it in time,
    the spare is SIGKILLed through a pidfd of it (never a reused pid), which
    the intermediate, whose child it still is, sends the zygote before it
    exits: a spare that never said it took the request never ran a line of it,
    and a killed one never will (a frozen one dies as it thaws, before it runs
    any more of its own code), so the zygote forks the request's supervisor
    itself, and it starts once. Its cgroup made ahead is removed once it is
    dead (:meth:`remove_its_cgroups`), after the request is answered.
    """

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
    def start(cls, server: socket.socket, ignored: frozenset[int]) -> _Spare | None:
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
                lambda: _serve_as_spare(theirs, ignored),
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
        """Pass the request on to the spare; the pid to answer with, ``-1`` if it did not take
        it (the zygote forks instead), or ``0`` (the caller's ``UNKNOWN``) if it said it took
        it only after it was given up on.

        Waits for its word at most :data:`SPARE_LIMIT`, and at most half of
        what is left until ``answer_by`` (the other half is the zygote's own
        fork's). The zygote's copies of the descriptors stay the zygote's to close.
        """
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
        """Close what the zygote holds of the spare: unused, it sees end of file and exits.

        The pidfd of one the zygote killed is kept, for :meth:`remove_its_cgroups`.
        """
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
        """Once the killed spare is dead (waited for at most ``within`` seconds), remove the
        cgroups it made ahead, which it cannot remove itself; then let go of its pidfd.

        A spare still frozen then keeps them (and its lock on them), until it dies as it
        thaws; ``tether prune`` removes them after that.
        """
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


def _serve_as_spare(requests: socket.socket, ignored: frozenset[int]) -> NoReturn:
    """In the spare: make the usual run's cgroup, wait for the one request, become its supervisor.

    End of file (the zygote is gone, and with it the caller, or it closed
    this spare) means no request will come: remove the cgroup, and exit
    quietly.
    """
    ahead = _made_ahead()
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
    containment = None if ahead is None else ahead.for_request(request)
    if not header:
        os._exit(0)
    if request is None:
        os._exit(TETHER_FAILED)  # not a request: the caller sees a lost supervisor
    _become(request, fds, containment, ignored)


class _MadeAhead:
    """The containment of a run without limits under the zygote's setting, made before the request.

    Making a cgroup takes about 1.5 ms (most of it finding this process's own
    cgroup, whose ``cgroup.procs`` is read whole); a spare has the time before
    its request. Only worth it, and only done, for a command that will be born
    in the cgroup: a join by writing needs its lock warmed just before it
    (:mod:`tether.supervisor.cgroup_choice`).
    """

    __slots__ = ("containment", "setting")

    def __init__(self, setting: str, containment: RunCgroups) -> None:
        self.setting = setting
        self.containment = containment

    def for_request(self, request: _Request | None) -> RunCgroups | None:
        """This containment if ``request`` would make the same and it is intact; else ``None``
        (the supervisor makes its own), and it is removed.

        Intact: still there, still the cgroup made, and empty
        (:meth:`~tether.linux.run_cgroups.RunCgroups.intact`). It waited
        for as long as the caller launched nothing, where anyone with the
        right to may have removed it (``tether prune`` of another namespace, an
        administrator's cleanup): a fresh supervisor would make a new one, and
        so does this one.
        """
        if request is not None and request.spec.get("limits") is None:
            with contextlib.suppress(CgroupUnavailable):
                same = containment_setting(request.environ) == self.setting
                if same and self.containment.intact():
                    return self.containment
        self.containment.discard()
        return None


def _made_ahead() -> _MadeAhead | None:
    if not clone_into_cgroup_likely():
        return None
    try:
        setting = containment_setting(os.environ)
    except CgroupUnavailable:
        return None
    if setting == "sweep":
        return None  # nothing to make
    return _MadeAhead(setting, prepare_run_cgroups(None, warm=False))


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
    """The request's containment, from its limits and its ``TETHER_CONTAINMENT``.

    ``None`` for limits this cannot read: the supervisor reads them again, and
    says what is wrong with them; ``None`` too where the limits need a scope of
    the user's systemd, which the supervisor asks for itself.
    """
    limits = request.spec.get("limits")
    if not isinstance(limits, dict | None):
        return None
    environ = request.environ
    containment = prepare_run_cgroups(limits, warm=False, environ=environ, supervisor=False)
    # A systemd scope takes the process that asks for it: the supervisor asks, once forked.
    return None if containment.deferred else containment


def _become(
    request: _Request, fds: list[int], containment: RunCgroups | None, ignored: frozenset[int]
) -> NoReturn:
    """Take on the caller's process state as the request says, then become its supervisor.

    Only what differs from the zygote's own is set: the environment is
    rewritten only if the caller's changed since the zygote started (most
    requests: it did not), and only the signals whose disposition differs are
    touched. ``ignored``: what the zygote ignores (:func:`_ignored_here`).
    """
    loading()
    roles = dict(zip(request.roles, fds, strict=True))
    # Every descriptor above the standard streams but the run's, above any limit.
    close_all_but(fds if containment is None else fds + containment.join_descriptors())
    if os.environ != request.environ:
        os.environ.clear()
        os.environ.update(request.environ)
    for name, (soft, hard) in request.rlimits.items():
        _set_limit(name, soft, hard)
    _ignore_as_the_caller(set(request.ignored), ignored)
    signal.pthread_sigmask(signal.SIG_SETMASK, request.sigmask)

    from tether.supervisor.detach import supervise_fields

    supervise_fields({**request.spec, "fds": roles}, containment)
    os._exit(TETHER_FAILED)


#: Signals whose disposition is not the caller's to pass on: Python ignores the
#: first two itself (and every command gets them back), the last two cannot change.
_NOT_PASSED: Final = frozenset({signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP})


def _ignored_here() -> frozenset[int]:
    """The signals this process ignores, of those whose disposition a request passes on.

    Read once, as the zygote starts: it never changes a disposition after
    that, so every supervisor it forks starts with these.
    """
    return frozenset(
        number
        for number in signal.valid_signals()
        if number not in _NOT_PASSED and signal.getsignal(number) is signal.SIG_IGN
    )


def _ignore_as_the_caller(ignored: set[int], ignored_here: frozenset[int]) -> None:
    """Ignore what the caller ignores now, and only that (the zygote's may be older).

    ``ignored_here`` is what this process ignores already: only the difference changes.
    """
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

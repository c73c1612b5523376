"""Fork and exec the command, as :class:`subprocess.Popen` would, without loading ``subprocess``.

In ``Popen``'s order: the standard streams, the working directory, the umask, a process
group of its own, SIGPIPE and SIGXFSZ back to their default (with the other signals the
caller asks for), ``prepare``, every other descriptor closed, then the ``exec`` along the
candidates :func:`exec_candidates` worked out in the parent (``os.execvpe`` would import
``warnings`` in the child). Safe because the supervisor has one thread when it spawns; the
child says why it failed on a close-on-exec pipe. Why: ``docs/architecture.md`` (Processes).

Whatever the parent can work out it works out before the fork (the signals to change, the
encoded arguments and environment, the highest descriptor): every page the child writes is
a copy of its parent's, so the less Python the child runs, the cheaper each start.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import fcntl
import os
import select
import signal
import sys
import time

from tether.linux.clone3 import CloneUnavailable, fork_into_cgroup
from tether.linux.descriptors import close_all_but, descriptor_ceiling
from tether.shared.poll_wait import poll_ms

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Final

    #: ``os.execve``'s arguments: bytes where they could be encoded before the fork.
    _Environment = Mapping[str, str] | dict[bytes, bytes]

__all__ = ["SpawnFailed", "exec_candidates", "set_disposition", "spawn"]


class SpawnFailed(Exception):
    """The command could not be started: at which step, with which errno (or which message)."""

    def __init__(self, stage: str, errno: int | None, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.errno = errno
        self.message = message

    def __reduce__(self) -> tuple[type[SpawnFailed], tuple[str, int | None, str]]:
        return (type(self), (self.stage, self.errno, self.message))


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | None,
    umask: int | None,
    stdio: tuple[int | None, int | None, int | None],
    prepare: Callable[[bool], None],
    process_group: int = 0,
    pass_fds: tuple[tuple[int, int], ...] = (),
    born_in: int | None = None,
    until: float | None = None,
    hangup: int | None = None,
    dispositions: Mapping[int, int] | None = None,
    placed: Callable[[bool], None] | None = None,
) -> int:
    """Start ``argv`` in a new process group; return its pid, or raise :class:`SpawnFailed`.

    ``pass_fds``: (number in the command, descriptor here) pairs, let go of here before the
    command can run; ``born_in``: a cgroup v2 to be born in, ``prepare`` told whether it was.
    A child that has not reached its ``exec`` by ``until`` or the end of ``hangup`` is killed
    (stage ``start``, ``ETIMEDOUT``). ``dispositions``: signal number to ``SIG_DFL`` or
    ``SIG_IGN`` (as numbers) in the command, set after SIGPIPE and SIGXFSZ are defaulted;
    ``placed``: told here, once the command runs, whether it was born in ``born_in``."""
    environment = os.environ if env is None else env
    held = tuple(source for _number, source in pass_fds)
    try:
        _check(argv, environment)
        candidates = exec_candidates(argv[0], environment)
        errors_r, errors_w = os.pipe2(os.O_CLOEXEC)
    except BaseException:
        _close_all(held)
        raise
    go_r, go_w = os.pipe2(os.O_CLOEXEC) if pass_fds else (-1, -1)
    room = _room_for(pass_fds, errors_w, go_r)
    changes = _signal_changes(dispositions or {})
    arguments, encoded_candidates, encoded_environment = _encoded(argv, candidates, environment)
    ceiling = descriptor_ceiling()  # the child's table is this one, but for what it makes itself
    try:
        pid, in_cgroup = _fork(born_in)
    except OSError:
        _close_all((errors_r, errors_w, *held, go_r, go_w))
        raise
    if pid == 0:
        if go_w >= 0:
            os.close(go_w)
        _child(
            arguments,
            encoded_candidates,
            encoded_environment,
            cwd=cwd,
            umask=umask,
            stdio=stdio,
            prepare=prepare,
            born_in=in_cgroup,
            process_group=process_group,
            errors=errors_w,
            pass_fds=pass_fds,
            go=go_r,
            room=room,
            signals=changes,
            ceiling=ceiling,
        )
    _close_all((*held, go_r, go_w))  # the child may exec now
    os.close(errors_w)
    try:
        said = _exec_report(errors_r, until, hangup)
    finally:
        os.close(errors_r)
    if said is None:
        _kill_unstarted(pid)
        raise SpawnFailed(
            "start",
            errno_codes.ETIMEDOUT,
            "the command did not start before its deadline (it did not reach its exec: "
            "stopped, or in a frozen cgroup)"
            if hangup is None or not _hung_up(hangup)
            else "the caller was gone before the command reached its exec",
        )
    if not said:
        if placed is not None:
            placed(in_cgroup)
        return pid
    os.waitpid(pid, 0)
    stage, _, rest = said.decode("utf-8", "replace").partition(":")
    number, _, message = rest.partition(":")
    errno = int(number) if number.isdigit() else None
    raise SpawnFailed(stage, errno, message or (os.strerror(errno) if errno else stage))


def _exec_report(errors_r: int, until: float | None, hangup: int | None) -> bytes | None:
    """What the child reported before its exec (``b""``: it reached it); ``None`` if it did
    not by ``until``, or ``hangup`` ended first."""
    poller = select.poll()
    poller.register(errors_r, select.POLLIN)
    if hangup is not None:
        poller.register(hangup, 0)  # its end only (POLLHUP): a request on it is the loop's
    chunks: list[bytes] = []
    while True:
        if until is None:
            timeout = None
        else:
            left = until - time.monotonic()
            if left <= 0:
                return None
            timeout = poll_ms(left)
        for fd, events in poller.poll(timeout):
            if fd == errors_r:
                chunk = os.read(errors_r, 4096)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
            elif events & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
                return None


def _hung_up(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, 0)
    return bool(poller.poll(0))


def _kill_unstarted(pid: int) -> None:
    """SIGKILL the child that never reached its exec, and reap it if it dies in time (one
    frozen by the v1 freezer dies only once thawed: the subreaper's sweep reaps it then)."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)  # still this process's child, unreaped: never reused
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if select.select([pidfd], [], [], _REAP_LIMIT)[0]:
            os.waitpid(pid, 0)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def _handlers() -> tuple[Callable[[int, int], int], Callable[[int], object]]:
    """``_signal``'s own ``signal`` and ``getsignal``: numbers in and out, where
    :func:`signal.signal` converts to and from enums (Python code, in the child)."""
    try:
        import _signal  # type: ignore[import-not-found]  # CPython's, no stub

        return _signal.signal, _signal.getsignal
    except (ImportError, AttributeError):
        return signal.signal, signal.getsignal  # type: ignore[return-value]


#: ``signal.signal`` for numbers only (``SIG_DFL`` is ``0``, ``SIG_IGN`` ``1``), without the enums.
set_disposition, _getsignal = _handlers()

#: How long a child killed before its exec is waited for.
_REAP_LIMIT: Final = 1.0


def _fork(born_in: int | None) -> tuple[int, bool]:
    """Fork, into the cgroup ``born_in`` names where the kernel allows; and whether it did."""
    if born_in is not None:
        try:  # not suppress(): one object fewer for the child to write on its way back
            return fork_into_cgroup(born_in), True
        except (CloneUnavailable, OSError):  # fork and join instead
            pass
    return os.fork(), False


def _check(argv: Sequence[str], environment: Mapping[str, str]) -> None:
    """Refuse, in the parent, what ``Popen`` refuses before it forks."""
    if any("\0" in word for word in argv):
        raise SpawnFailed("setup", None, "embedded null byte")
    for name, value in environment.items():
        if "\0" in name or "\0" in value:
            raise SpawnFailed("setup", None, "embedded null byte")
        if "=" in name or not name:
            raise SpawnFailed("setup", None, "illegal environment variable name")


def exec_candidates(file: str, environment: Mapping[str, str]) -> tuple[str, ...]:
    """The paths ``os.execvpe(file, ..., environment)`` tries, in its order (``PATH``, or
    ``os.defpath``; an empty entry is the current directory)."""
    if os.path.dirname(file):
        return (file,)
    search = environment.get("PATH")
    directories = (os.defpath if search is None else search).split(os.pathsep)
    return tuple(os.path.join(directory, file) for directory in directories)


#: SIGPIPE and SIGXFSZ, which Python ignores, back to their default in the command, as ``Popen``.
_POPEN_DEFAULTS: Final = {int(signal.SIGPIPE): 0, int(signal.SIGXFSZ): 0}


def _signal_changes(dispositions: Mapping[int, int]) -> tuple[tuple[int, int], ...]:
    """The (signal, ``SIG_DFL`` or ``SIG_IGN`` as a number) pairs the child must set:
    :data:`_POPEN_DEFAULTS` and ``dispositions``, less those this process has already (the
    child starts with this process's)."""
    changes = []
    for number, handler in {**_POPEN_DEFAULTS, **dispositions}.items():
        try:
            now = _getsignal(number)
        except (ValueError, OSError):  # not a signal here: the child's try says so, as before
            now = None
        if now is None or now != handler:  # ``None``: a handler not set from Python
            changes.append((number, handler))
    return tuple(changes)


def _encoded(
    argv: Sequence[str], candidates: tuple[str, ...], environment: Mapping[str, str]
) -> tuple[list[bytes] | list[str], tuple[bytes, ...] | tuple[str, ...], _Environment]:
    """``argv``, ``candidates`` and ``environment`` encoded as ``os.execve`` would in the child;
    as given where one cannot be (the child's ``exec`` fails on it, as it did)."""
    codec, errors = _FILESYSTEM
    try:
        arguments: list[bytes] | list[str] = [word.encode(codec, errors) for word in argv]
        paths: tuple[bytes, ...] | tuple[str, ...] = tuple(
            path.encode(codec, errors) for path in candidates
        )
    except (UnicodeError, AttributeError):  # AttributeError: bytes given, as the child takes
        arguments, paths = list(argv), candidates
    try:
        encoded: _Environment = {
            name.encode(codec, errors): value.encode(codec, errors)
            for name, value in environment.items()
        }
    except (UnicodeError, AttributeError):
        encoded = environment
    return arguments, paths, encoded


#: What :func:`os.fsencode` encodes with (``str.encode`` directly: cheaper in the parent too).
_FILESYSTEM: Final = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _exec(
    candidates: tuple[bytes, ...] | tuple[str, ...],
    argv: list[bytes] | list[str],
    environment: _Environment,
) -> None:
    """``os.execvpe``'s loop over ``candidates``: the first error other than "not there" wins."""
    first_refusal: OSError | None = None
    last: OSError | None = None
    for path in candidates:
        try:
            os.execve(path, argv, environment)  # noqa: S606 - the command, as given
        except (FileNotFoundError, NotADirectoryError) as error:
            last = error
        except OSError as error:
            last = error
            first_refusal = first_refusal or error
    failure = first_refusal or last
    assert failure is not None  # there is always a candidate
    raise failure


def _child(
    argv: list[bytes] | list[str],
    candidates: tuple[bytes, ...] | tuple[str, ...],
    environment: _Environment,
    *,
    cwd: str | None,
    umask: int | None,
    stdio: tuple[int | None, int | None, int | None],
    prepare: Callable[[bool], None],
    born_in: bool,
    process_group: int,
    errors: int,
    pass_fds: tuple[tuple[int, int], ...],
    go: int,
    room: tuple[int, int, int] | None,
    signals: tuple[tuple[int, int], ...],
    ceiling: int | None,
) -> None:
    """In the child: never returns. ``room``: the descriptor limits for the moves
    (:func:`_room_for`); ``signals``: :func:`_signal_changes`; ``ceiling``: one above the
    highest descriptor inherited (:func:`~tether.linux.descriptors.descriptor_ceiling`)."""
    stage = "dup"
    try:
        # A source among 0-2 could be overwritten by an earlier dup2: move them all up first.
        sources = [None if fd is None else os.dup(fd) if fd < 3 else fd for fd in stdio]
        for target, source in enumerate(sources):
            if source is not None:
                os.dup2(source, target)  # inheritable, as a standard stream must be
        stage = "chdir"
        if cwd is not None:
            os.chdir(cwd)
        if umask is not None:
            os.umask(umask)
        os.setpgid(0, process_group)
        for number, handler in signals:
            try:  # noqa: SIM105 - a suppress() would be one more object the child writes
                set_disposition(number, handler)
            except (OSError, ValueError):  # one the caller could not have had either
                pass
        stage = "prepare"
        prepare(born_in)
        if room is not None:
            import resource  # loaded by the parent already (_room_for)

            resource.setrlimit(resource.RLIMIT_NOFILE, (room[0], room[2]))
        if pass_fds:
            errors, go = _hand_on(pass_fds, errors, go)
            close_all_but((errors, go, *(number for number, _source in pass_fds)), ceiling=ceiling)
        else:
            close_all_but((errors,), ceiling=ceiling)
        if room is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (room[1], room[2]))  # the caller's
        if go >= 0:
            os.read(go, 1)  # end of file: the supervisor let go of its copies
            os.close(go)
        stage = "exec"
        _exec(candidates, argv, environment)
    except BaseException as error:  # every failure is the parent's to report
        _report(errors, stage, error)
    os._exit(255)


def _room_for(
    pass_fds: tuple[tuple[int, int], ...], errors: int, go: int
) -> tuple[int, int, int] | None:
    """The soft descriptor limit the moves of ``pass_fds`` need (``dup2`` refuses a number at
    or above it; ``subprocess`` hands on any), with the limits to give back; ``None``: no need."""
    if not pass_fds:
        return None
    highest = max(errors, go, *(max(pair) for pair in pass_fds))
    needed = highest + len(pass_fds) + 3
    try:
        if needed <= os.sysconf("SC_OPEN_MAX"):
            return None
    except (OSError, ValueError):
        return None
    import resource  # only for such a caller: the child finds it loaded

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (needed if hard == resource.RLIM_INFINITY else min(needed, hard)), soft, hard


def _hand_on(pass_fds: tuple[tuple[int, int], ...], errors: int, go: int) -> tuple[int, int]:
    """In the child: each pair's descriptor at its number, inheritable, for any set of numbers
    (all copied above them first, as ``_posixsubprocess`` does); the pipes' new numbers."""
    if all(number == source for number, source in pass_fds):
        for number, _source in pass_fds:
            os.set_inheritable(number, True)
        return errors, go
    above = max(errors, go, *(max(pair) for pair in pass_fds)) + 1
    copies = [fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, above) for _number, source in pass_fds]
    errors = fcntl.fcntl(errors, fcntl.F_DUPFD_CLOEXEC, above)
    if go >= 0:
        go = fcntl.fcntl(go, fcntl.F_DUPFD_CLOEXEC, above)
    for (number, _source), copy in zip(pass_fds, copies, strict=True):
        os.dup2(copy, number)  # inheritable, as dup2 leaves it
    return errors, go


def _close_all(fds: tuple[int, ...]) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def _report(errors: int, stage: str, error: BaseException) -> None:
    if isinstance(error, OSError) and error.errno is not None:
        # A cgroup's join names its cgroup.procs: the step, kept with the errno.
        where = error.filename if stage == "prepare" and isinstance(error.filename, str) else ""
        said = f"{stage}:{error.errno}:" + (
            f"{error.strerror}, writing its pid to {where}" if where else ""
        )
    else:
        said = f"{stage}::{error}"
    with contextlib.suppress(OSError):
        os.write(errors, said.encode("utf-8", "replace")[:4000])
    os._exit(255)

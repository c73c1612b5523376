"""What ``tether.launch`` and its three siblings take, declared once (:class:`LaunchOptions`),
and checked, each error naming its argument, before anything is started (:func:`request_of`):
a bad call leaves nothing behind. What each option means: docs/api.md, "Reference".
"""

from __future__ import annotations

import codecs
import contextlib
import errno as errno_codes
import io
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import IO, Any, Final, TypedDict

from tether.caller.capture import default_encoding
from tether.caller.launch_errors import LaunchError
from tether.caller.lifeline import tethers_own
from tether.caller.request import LimitsUnavailable, RequestError, build_request, command_words
from tether.core.limits import LIMIT_NAMES
from tether.core.reasons import TETHER_FAILED
from tether.core.spec import RunSpec
from tether.shared.record_file import RecordError

__all__ = [
    "DEVNULL",
    "PIPE",
    "STDOUT",
    "Duration",
    "LaunchOptions",
    "RecordOption",
    "RunOptions",
    "Stdio",
    "StdioPlan",
    "request_of",
]

#: Seconds, a :class:`~datetime.timedelta`, or a string as the CLI takes it (``"5m"``).
Duration = float | str | timedelta
#: ``None``/``True``: a new file in the default directory; a path; ``False``: no record.
RecordOption = str | os.PathLike[str] | bool | None
#: ``None`` (the caller's own), a descriptor, a file object, a path, :data:`PIPE`, :data:`DEVNULL`,
#: and for ``stderr`` :data:`STDOUT`.
Stdio = int | IO[Any] | str | os.PathLike[str] | None

#: subprocess's values, so its constants work here too.
PIPE: Final = -1
STDOUT: Final = -2
DEVNULL: Final = -3


class LaunchOptions(TypedDict, total=False):
    """The keywords of :func:`tether.launch` and its three siblings, all optional: docs/api.md,
    "Reference" (the limits: :data:`~tether.core.limits.LIMITS`)."""

    deadline: Duration | None
    grace: Duration | None
    idle: Duration | None
    record: RecordOption
    record_argv: bool
    label: str | None
    cwd: str | os.PathLike[str] | None
    env: Mapping[str, str] | None
    stdin: Stdio
    stdout: Stdio
    stderr: Stdio
    text: bool | None
    encoding: str | None
    errors: str | None
    memory_max: int | str | None
    memory_swap_max: int | str | None
    cpu_max: float | str | None
    pids_max: int | None
    pass_fds: Sequence[int]
    close_fds: bool


class RunOptions(LaunchOptions, total=False):
    """:class:`LaunchOptions`, and what only :func:`tether.run` takes, as :func:`subprocess.run`
    (docs/api.md, "Capture output, give input")."""

    capture_output: bool
    input: bytes | str | None
    timeout: Duration | None
    max_output_bytes: int | None


_KNOWN: Final = frozenset(LaunchOptions.__annotations__)
_RUN_ONLY: Final = frozenset(RunOptions.__annotations__) - _KNOWN
#: The options that make the request; the rest are the command's standard streams.
_LIMITS: Final = frozenset(LIMIT_NAMES)
_STREAMS: Final = frozenset({"stdin", "stdout", "stderr", "text", "encoding", "errors"})
_REQUEST: Final = _KNOWN - _STREAMS - _LIMITS - {"pass_fds", "close_fds"}


@dataclass
class StdioPlan:
    """The command's three descriptors (``None``: this process's own), those opened here (closed
    once the supervisor has its copies), and this process's ends of pipes, by stream name."""

    fds: list[int | None]
    opened: list[int] = field(default_factory=list)
    pipes: dict[str, int] = field(default_factory=dict)
    #: ``None`` for bytes.
    encoding: str | None = None
    errors: str | None = None
    #: Output files opened here, not truncated yet: (descriptor, path, created here).
    outputs: list[tuple[int, str, bool]] = field(default_factory=list)
    passed: tuple[int, ...] = ()

    def commit(self) -> None:
        """The call goes ahead: truncate the output files, as a shell's ``>`` does."""
        for fd, _path, _created in self.outputs:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, 0)
        self.outputs = []

    def close(self) -> None:
        """Undo this plan: a launch that did not happen leaves no file it made, truncates none."""
        for fd, path, created in self.outputs:
            if created:
                _remove_if_same(path, fd)
        self.outputs = []
        for fd in (*self.opened, *self.pipes.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.opened, self.pipes = [], {}


def _remove_if_same(path: str, fd: int) -> None:
    """Remove the file this plan created at ``path``, unless something else is there now."""
    with contextlib.suppress(OSError):
        held, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
        if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
            os.unlink(path)


def request_of(
    function: str, argv: Sequence[str | os.PathLike[str]], options: LaunchOptions
) -> tuple[RunSpec, StdioPlan]:
    """Check ``options`` for a call of ``function``; return the request and the stdio, or raise
    :class:`TypeError`, :class:`ValueError`, or :class:`LaunchError` (125) for the record."""
    asked_at = time.monotonic()
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        hint = (
            " (it is run()'s; with launch(), pass stdin/stdout/stderr=tether.PIPE "
            "and use the handle's streams)"
            if unknown[0] in _RUN_ONLY
            else ""
        )
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}{hint}")
    arguments: dict[str, Any] = dict(options)
    request = {key: arguments[key] for key in _REQUEST if key in arguments}
    request["limits"] = {key: arguments[key] for key in LIMIT_NAMES if key in arguments}
    command_words(argv)  # a string argv is named before anything is opened
    passed = passed_descriptors(arguments.get("pass_fds", ()), arguments.get("close_fds", True))
    # The streams first: the record's check makes its directory, a refused call must not.
    plan = stdio_plan(
        arguments.get("stdin"),
        arguments.get("stdout"),
        arguments.get("stderr"),
        text=arguments.get("text"),
        encoding=arguments.get("encoding"),
        errors=arguments.get("errors"),
    )
    plan.passed = passed
    try:
        spec = build_request(argv, asked_at=asked_at, **request)
        plan.commit()
    except BaseException as failure:
        plan.close()
        if isinstance(failure, LimitsUnavailable):
            raise LaunchError(str(failure), exit_status=TETHER_FAILED) from None
        if isinstance(failure, RequestError):
            raise ValueError(str(failure)) from None
        if isinstance(failure, RecordError):
            raise LaunchError(
                str(failure), errno=failure.errno, exit_status=TETHER_FAILED
            ) from None
        raise
    return spec, plan


def passed_descriptors(pass_fds: object, close_fds: object) -> tuple[int, ...]:
    """``pass_fds`` checked as :mod:`subprocess` checks it, and against what tether holds
    (docs/api.md, "Reference"); sorted, without repeats."""
    if close_fds is not True:
        raise ValueError(
            f"close_fds: only True is supported, not {close_fds!r} (tether never hands "
            "its caller's descriptors on wholesale; name them in pass_fds)"
        )
    if isinstance(pass_fds, str | bytes) or not isinstance(pass_fds, Sequence | set | frozenset):
        raise TypeError(f"pass_fds: a sequence of descriptor numbers, not {pass_fds!r}")
    for fd in pass_fds:
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(f"pass_fds: {fd!r} is not a descriptor number (an int)")
        if fd < 0:
            raise ValueError(f"pass_fds: {fd} is not a descriptor number (negative)")
        if fd <= 2:
            raise ValueError(
                f"pass_fds: {fd} is a standard stream; give it as stdin, stdout or stderr"
            )
        if tethers_own(fd):
            raise ValueError(f"pass_fds: {fd} is tether's own (a run's lifeline or channel)")
        try:
            os.fstat(fd)
        except OSError as error:
            raise LaunchError(
                f"pass_fds: {fd} is not an open file descriptor",
                errno=error.errno,
                exit_status=TETHER_FAILED,
            ) from None
    return tuple(sorted(set(pass_fds)))


def text_encoding(text: object, encoding: object, errors: object) -> tuple[str | None, str | None]:
    """The encoding of the pipes (``None``: bytes), as :mod:`subprocess` chooses it."""
    for name, value in (("encoding", encoding), ("errors", errors)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string or None, not {value!r}")
    if not (text or encoding is not None or errors is not None):
        return None, None
    checked = encoding if isinstance(encoding, str) and encoding else default_encoding()
    try:
        codecs.lookup(checked)
    except LookupError:
        raise ValueError(f"encoding: unknown encoding {checked!r}") from None
    return checked, errors if isinstance(errors, str) else None


def stdio_plan(
    stdin: Stdio,
    stdout: Stdio,
    stderr: Stdio,
    *,
    text: object = None,
    encoding: object = None,
    errors: object = None,
) -> StdioPlan:
    """Resolve the three streams: open paths, ``/dev/null`` and pipes (see :data:`Stdio`)."""
    chosen_encoding, chosen_errors = text_encoding(text, encoding, errors)
    plan = StdioPlan(fds=[], encoding=chosen_encoding, errors=chosen_errors)
    paths: dict[tuple[int, int], int] = {}

    def from_path(path: str | os.PathLike[str], name: str) -> int:
        fd, created = _open_path(path, name)
        plan.opened.append(fd)
        if name != "stdin":
            plan.outputs.append((fd, os.fspath(path), created))
        # stdout and stderr to one file: one descriptor, one offset, as a shell's 2>&1.
        return paths.setdefault(_identity(fd), fd)

    def resolve(stream: Stdio, name: str) -> int | None:
        if stream is None:
            return None
        if isinstance(stream, str | os.PathLike):
            return from_path(stream, name)
        if isinstance(stream, bool) or not isinstance(stream, int):
            return _descriptor_of(stream, name)
        if stream == DEVNULL:
            plan.opened.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
            return plan.opened[-1]
        if stream == PIPE:
            read_end, write_end = os.pipe()
            ours, theirs = (write_end, read_end) if name == "stdin" else (read_end, write_end)
            plan.pipes[name] = ours
            plan.opened.append(theirs)
            return theirs
        if stream < 0:
            raise ValueError(
                f"{name}: {stream} is not a stream (STDOUT is for stderr only); pass "
                "tether.PIPE, tether.DEVNULL, a file, a path or a file descriptor"
            )
        _check_open(stream, name)
        return stream

    try:
        plan.fds = [resolve(stdin, "stdin"), resolve(stdout, "stdout")]
        plan.fds.append(
            (1 if plan.fds[1] is None else plan.fds[1])
            if isinstance(stderr, int) and not isinstance(stderr, bool) and stderr == STDOUT
            else resolve(stderr, "stderr")
        )
    except BaseException:
        plan.close()
        raise
    return plan


def _identity(fd: int) -> tuple[int, int]:
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


def _open_path(path: str | os.PathLike[str], name: str) -> tuple[int, bool]:
    """Open a path given as a stream, as a shell's ``<`` and ``>`` with docs/api.md's three
    precautions; the descriptor, and whether it was created here. An output is truncated only
    once the whole call is checked (:meth:`StdioPlan.commit`)."""
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise TypeError(f"{name}: a path must be a non-empty string, not {path!r}")
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    created = False
    try:
        if name == "stdin":
            fd = os.open(text, flags | os.O_RDONLY)
        else:
            try:
                fd = os.open(text, flags | os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                created = True
            except FileExistsError:
                fd = os.open(text, flags | os.O_WRONLY)
    except OSError as error:
        reason = (
            "it is a symbolic link (refused: give the file itself)"
            if error.errno == errno_codes.ELOOP
            else _no_such_device(text)
            if error.errno == errno_codes.ENXIO
            else error.strerror or str(error)
        )
        raise ValueError(f"{name}: cannot open {text!r}: {reason}") from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
        os.close(fd)
        raise ValueError(
            f"{name}: {text!r} is not a regular file or a device (a FIFO, a socket or a "
            "directory is refused)"
        )
    os.set_blocking(fd, True)
    return fd, created


def _no_such_device(text: str) -> str:
    """What ``ENXIO`` meant for ``text``: a FIFO nobody reads, a terminal not ours (``/dev/tty``,
    5:0, without a controlling terminal), or no device."""
    try:
        mode, device = (found := os.stat(text)).st_mode, found.st_rdev
    except OSError:
        mode, device = 0, 0
    if stat.S_ISFIFO(mode):
        return "it is a FIFO with nobody reading it"
    if stat.S_ISCHR(mode) and (os.major(device), os.minor(device)) == (5, 0):
        return "this process has no controlling terminal"
    return os.strerror(errno_codes.ENXIO)


def _descriptor_of(stream: object, name: str) -> int:
    """The descriptor behind a file object, or a :class:`TypeError` that says what to pass."""
    fileno = getattr(stream, "fileno", None)
    try:
        fd = fileno() if callable(fileno) else None
    except (OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if not isinstance(fd, int) or isinstance(fd, bool):
        raise TypeError(
            f"{name}: {type(stream).__name__} object has no file descriptor, and the command "
            "can only write to one; to keep the output in memory pass "
            f"{name}=tether.PIPE (or capture_output=True to run()), otherwise a real file, "
            "a path, a file descriptor or tether.DEVNULL"
        )
    _check_open(fd, name)
    return fd


def _check_open(fd: int, name: str) -> None:
    try:
        mode = os.fstat(fd).st_mode
    except (OSError, OverflowError):
        raise ValueError(f"{name}: {fd} is not an open file descriptor") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{name}: descriptor {fd} is a directory")

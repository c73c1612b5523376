"""What ``tether.launch`` takes, declared once, and checked before anything is started.

:class:`LaunchOptions` lists every keyword the four functions (``launch``,
``run``, ``launch_async``, ``run_async``) accept, with its type; the functions
take them as ``**options: Unpack[LaunchOptions]``, so the list exists once and
type checkers still see each keyword. :func:`request_of` turns them into the
request (through :func:`tether.caller.request.build_request`, the builder
every door shares, which holds the defaults) and the command's standard
streams. Every argument is checked with an error that names it, and nothing
is started until all of them pass, so a bad call leaves nothing behind.
"""

from __future__ import annotations

import io
import os
import stat
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import IO, Any, Final, TypedDict

from tether.caller.request import RequestError, build_request
from tether.caller.start import LaunchError
from tether.core.reasons import TETHER_FAILED
from tether.core.spec import RunSpec
from tether.shared.record_file import RecordError

__all__ = ["Duration", "LaunchOptions", "RecordOption", "Stdio", "request_of"]

#: A duration: seconds (``int`` or ``float``), a :class:`~datetime.timedelta`,
#: or a string as the CLI takes it (``"30"``, ``"30s"``, ``"5m"``, ``"1.5h"``).
Duration = float | str | timedelta
#: Where the record goes: ``None`` (or ``True``) for a new file in the default
#: directory, a path for that file, ``False`` for no record at all.
RecordOption = str | os.PathLike[str] | bool | None
#: A standard stream for the command: ``None`` (the caller's own), a file
#: descriptor, a file object, or :data:`subprocess.DEVNULL`; for ``stderr``
#: also :data:`subprocess.STDOUT`.
Stdio = int | IO[Any] | None

# subprocess's constants, by value, so that this module need not import it.
_PIPE: Final = -1
_STDOUT: Final = -2
_DEVNULL: Final = -3


class LaunchOptions(TypedDict, total=False):
    """The keywords of :func:`tether.launch` and its three siblings (all optional).

    ``deadline``: stop the command this long after the call (``None`` or ``0``:
    never). ``grace``: how long SIGTERM gets before SIGKILL (default 10 s;
    ``None``: never escalate). ``record``: where the record goes.
    ``record_argv``: keep the whole command line in the record, redacted
    (default: only the command's name and working directory). ``label``:
    a name for the run, kept in the record. ``cwd``, ``env``: the command's
    working directory and environment (default: this process's).
    ``stdin``, ``stdout``, ``stderr``: its standard streams (default: this
    process's).
    """

    deadline: Duration | None
    grace: Duration | None
    record: RecordOption
    record_argv: bool
    label: str | None
    cwd: str | os.PathLike[str] | None
    env: Mapping[str, str] | None
    stdin: Stdio
    stdout: Stdio
    stderr: Stdio


_KNOWN: Final = frozenset(LaunchOptions.__annotations__)
#: The options that make the request; the rest are the command's standard streams.
_REQUEST: Final = _KNOWN - {"stdin", "stdout", "stderr"}


def request_of(
    function: str, argv: Sequence[str | os.PathLike[str]], options: LaunchOptions
) -> tuple[RunSpec, list[int | None], list[int]]:
    """Check ``options`` for a call of ``function``; return the request and the stdio.

    Returns the spec, the command's three descriptors (``None``: the caller's
    own) and the descriptors opened here, which the caller closes once the
    supervisor has its copies. Raises :class:`TypeError` or
    :class:`ValueError` for a bad argument and :class:`LaunchError` (125) for
    a record that cannot be written.
    """
    asked_at = time.monotonic()
    unknown = sorted(set(options) - _KNOWN)
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    arguments: dict[str, Any] = dict(options)
    request = {key: arguments[key] for key in _REQUEST if key in arguments}
    # The streams first: the request's record check makes the record's
    # directory, which a call refused for its streams must not leave behind.
    stdio, opened = stdio_descriptors(
        arguments.get("stdin"), arguments.get("stdout"), arguments.get("stderr")
    )
    try:
        spec = build_request(argv, asked_at=asked_at, **request)
    except BaseException as failure:
        for fd in opened:
            os.close(fd)
        if isinstance(failure, RequestError):
            raise ValueError(str(failure)) from None
        if isinstance(failure, RecordError):
            raise LaunchError(
                str(failure), errno=failure.errno, exit_status=TETHER_FAILED
            ) from None
        raise
    return spec, stdio, opened


def stdio_descriptors(
    stdin: Stdio, stdout: Stdio, stderr: Stdio
) -> tuple[list[int | None], list[int]]:
    """The three descriptors for the command (``None``: the caller's), and any opened here."""
    opened: list[int] = []

    def resolve(stream: Stdio, name: str) -> int | None:
        if stream is None:
            return None
        if isinstance(stream, bool) or not isinstance(stream, int):
            return _descriptor_of(stream, name)
        if stream == _DEVNULL:
            opened.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
            return opened[-1]
        if stream < 0:
            raise ValueError(
                f"{name}: tether does not capture output (no PIPE or STDOUT here); "
                "pass a file, a file descriptor or subprocess.DEVNULL"
            )
        _check_open(stream, name)
        return stream

    try:
        fds = [resolve(stdin, "stdin"), resolve(stdout, "stdout")]
        fds.append(
            (1 if fds[1] is None else fds[1])
            if isinstance(stderr, int) and stderr == _STDOUT
            else resolve(stderr, "stderr")
        )
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    return fds, opened


def _descriptor_of(stream: object, name: str) -> int:
    """The descriptor behind a file object, or a :class:`TypeError` that says what to pass."""
    fileno = getattr(stream, "fileno", None)
    try:
        fd = fileno() if callable(fileno) else None
    except (OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if not isinstance(fd, int) or isinstance(fd, bool):
        raise TypeError(
            f"{name}: {stream!r} has no file descriptor (an in-memory stream?); pass a real "
            "file, a file descriptor or subprocess.DEVNULL"
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

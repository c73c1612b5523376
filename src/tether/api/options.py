"""Checking what ``tether.launch`` is given, before anything is started.

Every argument is checked in the caller, with an error that names it: a NaN,
negative or infinite duration, a string where a list of words was meant, an
environment that is not strings, a record path that cannot be written, a
``PIPE`` tether cannot honour. Nothing is started until all of them pass, so
a bad call leaves nothing behind.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, Final

from tether.caller.start import LaunchError
from tether.core.reasons import TETHER_FAILED

__all__ = [
    "DEFAULT_GRACE",
    "Duration",
    "RecordOption",
    "Stdio",
    "command_words",
    "environment_copy",
    "record_path_for",
    "seconds_of",
    "stdio_descriptors",
]

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

#: The default grace between the gentle signal and SIGKILL, as for ``tether run``.
DEFAULT_GRACE: Final = 10.0

# subprocess's constants, by value, so that this module need not import it.
_PIPE: Final = -1
_STDOUT: Final = -2
_DEVNULL: Final = -3


def seconds_of(value: object, *, name: str) -> float:
    """``value`` as seconds; ``ValueError`` naming ``name`` if it is no duration."""
    if isinstance(value, str):
        from tether.core.durations import parse_duration

        return parse_duration(value, flag=name)
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{name} must be a number of seconds, a timedelta or a string like '5m', not {value!r}"
        )
    try:
        seconds = float(value)
    except OverflowError:
        raise ValueError(f"{name}: invalid duration {value!r} (too large)") from None
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{name}: invalid duration {value!r} (must be a finite number)")
    if seconds < 0:
        raise ValueError(f"{name}: invalid duration {value!r} (must not be negative)")
    return seconds


def command_words(argv: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    if isinstance(argv, str | bytes):
        raise TypeError(
            f"argv must be a list of strings, not one string: write [{argv!r}] "
            "or split the command line with shlex.split()"
        )
    words = tuple(os.fspath(word) for word in argv)
    for word in words:
        if not isinstance(word, str):
            raise TypeError(f"argv must hold strings (or paths), not {word!r}")
    if not words:
        raise ValueError("argv is empty: there is no command to run")
    return words


def environment_copy(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    copied = dict(env)
    for key, value in copied.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map strings to strings, not {key!r} to {type(value)}")
    return copied


def record_path_for(record: RecordOption) -> str | None:
    """The absolute record path, checked as the CLI checks it, or ``None`` for no record."""
    if record is False:
        return None
    if record is None or record is True:
        from tether.shared.paths import new_record_path

        path = new_record_path()
    else:
        path = Path(os.fspath(record))
    from tether.shared.record_file import RecordError, check_record_path

    try:
        check_record_path(path)
    except RecordError as error:
        raise LaunchError(str(error), errno=error.errno, exit_status=TETHER_FAILED) from None
    return str(path.absolute())


def stdio_descriptors(
    stdin: Stdio, stdout: Stdio, stderr: Stdio
) -> tuple[list[int | None], list[int]]:
    """The three descriptors for the command (``None``: the caller's), and any opened here."""
    opened: list[int] = []

    def resolve(stream: Stdio, name: str) -> int | None:
        if stream is None:
            return None
        if isinstance(stream, int):
            if stream == _DEVNULL:
                opened.append(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
                return opened[-1]
            if stream < 0:
                raise ValueError(
                    f"{name}: tether does not capture output (no PIPE or STDOUT here); "
                    "pass a file, a file descriptor or subprocess.DEVNULL"
                )
            return stream
        return stream.fileno()

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

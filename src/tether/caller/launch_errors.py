"""A run that could not be started, as the ``OSError`` subclasses :mod:`subprocess` raises.

One exception, :class:`LaunchError`, for every way a launch fails before the command runs, so
every door catches one class and ``except OSError`` keeps working as around :mod:`subprocess`;
a command not found or not executable is also a :class:`FileNotFoundError` or
:class:`PermissionError`, as ``subprocess.run`` raises (docs/api.md, "When the command cannot
be started").
"""

from __future__ import annotations

import errno as errno_codes
import os

from tether.core.reasons import TETHER_FAILED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = ["CommandNotExecutable", "CommandNotFound", "LaunchError", "cannot_start", "launch_error"]


class LaunchError(OSError):
    """The supervisor could not be started, or said the command could not be.

    ``errno`` is the reason where known, ``exit_status`` the status the CLI would exit with
    (127, 126, 125), ``record_path`` the ``launch_failed`` record, ``filename`` the program.
    """

    def __init__(
        self,
        message: str,
        *,
        errno: int | None = None,
        exit_status: int | None = None,
        record_path: Path | None = None,
        filename: str | None = None,
    ) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = None if errno is None else os.strerror(errno)
        self.exit_status = exit_status
        self.record_path = record_path
        self.filename = filename

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        fields = {
            "errno": self.errno,
            "exit_status": self.exit_status,
            "record_path": self.record_path,
            "filename": self.filename,
        }
        return (_rebuild, (type(self), self.args[0], fields))


def _rebuild(kind: type[LaunchError], message: str, fields: dict[str, Any]) -> LaunchError:
    return kind(message, **fields)


def cannot_start(error: OSError) -> LaunchError:
    """The :class:`LaunchError` for a supervisor the system would not start (status 125)."""
    return LaunchError(
        f"cannot start the supervisor: {error.strerror or error}",
        errno=error.errno,
        exit_status=TETHER_FAILED,
    )


class CommandNotFound(LaunchError, FileNotFoundError):
    """The command was not found (``ENOENT``, status 127): a :class:`FileNotFoundError`."""


class CommandNotExecutable(LaunchError, PermissionError):
    """The command may not be executed (``EACCES``, status 126): a :class:`PermissionError`."""


_BY_ERRNO: dict[int, type[LaunchError]] = {
    errno_codes.ENOENT: CommandNotFound,
    errno_codes.EACCES: CommandNotExecutable,
    errno_codes.EPERM: CommandNotExecutable,
}


def launch_error(
    message: str,
    *,
    errno: int | None,
    exit_status: int | None,
    record_path: Path | None,
    program: str,
) -> LaunchError:
    """The exception for a command that could not start, by its errno; ``program`` is
    ``filename``."""
    kind = _BY_ERRNO.get(errno) if errno is not None else None
    if kind is None:
        return LaunchError(message, errno=errno, exit_status=exit_status, record_path=record_path)
    return kind(
        message, errno=errno, exit_status=exit_status, record_path=record_path, filename=program
    )

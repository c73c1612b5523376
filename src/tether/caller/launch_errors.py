"""A run that could not be started, as the ``OSError`` subclasses :mod:`subprocess` raises.

One exception, :class:`LaunchError`, for every way a launch fails before the
command runs (the supervisor could not be started, or said the command could
not be), so that every door (the CLI, the API, Ray) catches one class and
reads one set of fields, and ``except OSError`` around a launch keeps working
as it does around :mod:`subprocess`.

``subprocess.run(["no-such-program"])`` raises :class:`FileNotFoundError`, and
a file that is not executable :class:`PermissionError`; programs catch those
by name. Only the two subclasses here are also those built-in subclasses, so
an ``except FileNotFoundError`` written for ``subprocess.run`` keeps catching
the same thing. :func:`launch_error` picks the class from the errno the
supervisor reported.

Imported on the path to ``tether run``'s launch: no ``typing`` or ``pathlib``
at run time.
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

    An :class:`OSError`, as :mod:`subprocess` raises when a program cannot be
    started, so ``except OSError`` around a launch keeps working. ``errno`` is
    the reason where one is known (``ENOENT``: not found, ``EACCES``: not
    executable); ``exit_status`` is the status the CLI would exit with (127,
    126, 125); ``record_path`` is the ``launch_failed`` record written for the
    attempt, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        errno: int | None = None,
        exit_status: int | None = None,
        record_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.errno = errno
        self.strerror = None if errno is None else os.strerror(errno)
        self.exit_status = exit_status
        self.record_path = record_path

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_launch_error,
            (self.args[0], self.errno, self.exit_status, self.record_path),
        )


def _rebuild_launch_error(
    message: str, errno: int | None, exit_status: int | None, record_path: Path | None
) -> LaunchError:
    return LaunchError(message, errno=errno, exit_status=exit_status, record_path=record_path)


def cannot_start(error: OSError) -> LaunchError:
    """The :class:`LaunchError` for a supervisor the system would not start (status 125)."""
    return LaunchError(
        f"cannot start the supervisor: {error.strerror or error}",
        errno=error.errno,
        exit_status=TETHER_FAILED,
    )


class _NamedLaunchError(LaunchError):
    """A :class:`LaunchError` about one program, named in ``filename`` as :mod:`subprocess` does."""

    def __init__(
        self,
        message: str,
        *,
        errno: int | None = None,
        exit_status: int | None = None,
        record_path: Path | None = None,
        filename: str | None = None,
    ) -> None:
        super().__init__(message, errno=errno, exit_status=exit_status, record_path=record_path)
        self.filename = filename

    def __reduce__(self) -> tuple[object, ...]:
        fields = {
            "errno": self.errno,
            "exit_status": self.exit_status,
            "record_path": self.record_path,
            "filename": self.filename,
        }
        return (_rebuild, (type(self), self.args[0], fields))


def _rebuild(
    kind: type[_NamedLaunchError], message: str, fields: dict[str, Any]
) -> _NamedLaunchError:
    return kind(message, **fields)


class CommandNotFound(_NamedLaunchError, FileNotFoundError):
    """The command was not found (``ENOENT``, status 127): a :class:`FileNotFoundError`."""


class CommandNotExecutable(_NamedLaunchError, PermissionError):
    """The command may not be executed (``EACCES``, status 126): a :class:`PermissionError`."""


_BY_ERRNO: dict[int, type[_NamedLaunchError]] = {
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
    """The exception for a command the supervisor could not start, by its errno.

    ``program`` is ``argv[0]`` as given; it becomes ``filename``, as in the
    :class:`OSError` :mod:`subprocess` raises. Any other errno (``ENOEXEC``,
    ``E2BIG``, ...) is a plain :class:`LaunchError`, as :mod:`subprocess`'s is
    a plain :class:`OSError`.
    """
    kind = _BY_ERRNO.get(errno) if errno is not None else None
    if kind is None:
        return LaunchError(message, errno=errno, exit_status=exit_status, record_path=record_path)
    return kind(
        message, errno=errno, exit_status=exit_status, record_path=record_path, filename=program
    )

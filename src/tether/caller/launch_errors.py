"""A command that could not be started, as the ``OSError`` subclass :mod:`subprocess` raises.

``subprocess.run(["no-such-program"])`` raises :class:`FileNotFoundError`, and
a file that is not executable :class:`PermissionError`; programs catch those
by name. tether's :class:`~tether.caller.start.LaunchError` is an
:class:`OSError` too, but only its two subclasses here are also those
built-in subclasses, so an ``except FileNotFoundError`` written for
``subprocess.run`` keeps catching the same thing. :func:`launch_error` picks
the class from the errno the supervisor reported.
"""

from __future__ import annotations

import errno as errno_codes
from pathlib import Path
from typing import Any

from tether.caller.start import LaunchError

__all__ = ["CommandNotExecutable", "CommandNotFound", "launch_error"]


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

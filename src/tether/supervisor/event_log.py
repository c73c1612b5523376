"""The supervisor's event log: the story of one run, one JSON object a line.

A new regular file of this run's or none; a line that cannot be written is dropped and counted,
never raised; written through a private structlog logger (docs/record.md, "Where the evidence
goes"; docs/architecture.md, "Why some mechanisms are built as they are").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from datetime import UTC, datetime, timedelta

from tether.shared import in_progress
from tether.shared.record_file import open_record_directory
from tether.supervisor.deferred import absent, deferred, uncollected

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType
    from typing import Final, Self

    from structlog.typing import EventDict, FilteringBoundLogger

    from tether.core.redaction import Redactor

#: What structlog binds or looks for as it loads, and tether never uses (see
#: :mod:`tether.supervisor.deferred`; tests/test_deferred_imports.py checks it).
_DEFERRED: Final = ("asyncio", "structlog.stdlib", "structlog.threadlocal")
_ABSENT: Final = ("colorama", "better_exceptions", "rich", "twisted")

with uncollected(), deferred(*_DEFERRED), absent(*_ABSENT):
    import structlog

__all__ = ["INCOMPLETE_EVENT", "EventLog"]

_FILE_MODE: Final = 0o600
_CREATE_FLAGS: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | os.O_APPEND
    | os.O_NOFOLLOW
    | os.O_NONBLOCK
    | os.O_CLOEXEC
)

#: The last line of a log that lost lines, when it can still be written.
INCOMPLETE_EVENT: Final = "event_log_incomplete"


def _stamp(logger: object, method_name: str, event_dict: EventDict) -> EventDict:
    """Put ``ts``, ``mono`` and ``event`` first, then the fields in their order."""
    mono = event_dict.pop("mono", None)
    event = event_dict.pop("event", None)
    event_dict.pop("ts", None)
    wall = datetime.now(UTC)
    if mono is None:
        mono = time.monotonic()
    elif isinstance(mono, int | float):  # the wall-clock time of the line's own moment
        wall -= timedelta(seconds=time.monotonic() - mono)
    return {
        "ts": wall.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "mono": mono,
        "event": event,
        **event_dict,
    }


def _kind(mode: int) -> str:
    """How to name a file that is not a regular one, in a one-line message."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _clear_the_name(directory_fd: int, path: Path) -> None:
    """Unlink an earlier regular file at the log's name; refuse anything else that is there."""
    try:
        mode = os.stat(path.name, dir_fd=directory_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise OSError(errno.EEXIST, f"it is {_kind(mode)}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path.name, dir_fd=directory_fd)


def _create_private(path: Path, directory_fd: int) -> int:
    """Create this run's log at ``path``, mode 0600 whatever the umask; return its descriptor."""
    _clear_the_name(directory_fd, path)
    try:
        fd = os.open(path.name, _CREATE_FLAGS, _FILE_MODE, dir_fd=directory_fd)
    except FileNotFoundError:
        if os.fstat(directory_fd).st_nlink == 0:
            raise OSError(errno.ENOENT, "its directory was removed") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EEXIST, "it is not a regular file")
        os.fchmod(fd, _FILE_MODE)
        in_progress.hold(fd)  # until this supervisor is gone: prune leaves the run alone
    except BaseException:
        os.close(fd)
        raise
    return fd


class _LineWriter:
    """Where structlog's lines go: one ``write`` each, never an exception; ``size``: whole lines'
    bytes."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.size = 0
        self.dropped = 0
        self.problem: str | None = None

    def info(self, line: str) -> None:
        """Write ``line`` and its newline; on failure count it dropped and say why, once."""
        fd = self.fd
        if fd is None:
            self.drop("the event log is closed")
            return
        try:
            data = (line + "\n").encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except (OSError, ValueError) as error:
            self.drop(_words(error))
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size)
            return
        self.size += len(data)

    # structlog calls the method named like the level; every level is one line.
    msg = log = debug = warning = error = critical = exception = info

    def drop(self, problem: str) -> None:
        self.dropped += 1
        if self.problem is None:
            self.problem = problem

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _words(error: BaseException) -> str:
    """The system's words for ``error``, without the file name ``str(OSError)`` adds."""
    if isinstance(error, OSError) and error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


class EventLog:
    """A JSON-lines event log file, written through a private structlog logger."""

    def __init__(self, path: Path, fd: int, redactor: Redactor) -> None:
        """Prefer :meth:`open`; this takes over ``fd``, a file already open for writing."""
        self.path = path
        self._writer = _LineWriter(fd)
        self._closed = False
        self._log: FilteringBoundLogger = structlog.wrap_logger(
            self._writer,
            processors=[redactor, _stamp, structlog.processors.JSONRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(0),
            context_class=dict,
            cache_logger_on_first_use=False,
        ).bind()

    @classmethod
    def open(cls, path: Path, redactor: Redactor, *, directory_fd: int | None = None) -> EventLog:
        """Create this run's event log at ``path`` (in ``directory_fd``), replacing an earlier
        one."""
        if directory_fd is not None:
            return cls(path, _create_private(path, directory_fd), redactor)
        held = open_record_directory(path.parent)
        try:
            return cls(path, _create_private(path, held), redactor)
        finally:
            os.close(held)

    @property
    def lines_dropped(self) -> int:
        """How many lines could not be written so far."""
        return self._writer.dropped

    @property
    def problem(self) -> str | None:
        """What went wrong the first time a line could not be written, in a few words."""
        return self._writer.problem

    def emit(self, event: str, **fields: object) -> None:
        """Write one line and hand it to the OS; a line that cannot be is counted, never raised."""
        if self._closed:
            raise ValueError(f"event log {self.path} is closed")
        try:
            self._log.msg(event, **fields)
        except Exception as error:  # a field that cannot be rendered costs its line only
            self._writer.drop(_words(error))

    def close(self) -> None:
        """Say that lines are missing, if any are and it still can, then close; safe twice."""
        if self._closed:
            return
        dropped = self._writer.dropped
        if dropped:
            self.emit(INCOMPLETE_EVENT, lines_dropped=dropped, error=self._writer.problem)
        self._closed = True
        self._writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

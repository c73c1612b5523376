"""The supervisor's event log: the story of one run, one JSON object a line.

The record says how a run ended; the event log says how it got there, for the
operator who has to review it afterwards. It is written as things happen, and
every line is handed to the operating system before :meth:`EventLog.emit`
returns, so a supervisor that is SIGKILLed mid-run still leaves everything it
knew up to that moment. Durability against a power cut is the record's job
(fsync once, at the end), not the log's: an fsync per line would cost more than
the rest of the supervisor's work.

The log is written through structlog, but through a *private* logger:
``structlog.wrap_logger`` with every setting passed explicitly, so neither
tether's caller nor any library that configured structlog globally can change
what (or whether) tether logs, and tether never calls ``structlog.configure()``
or touches stdlib ``logging``. Only the supervisor process imports this module;
structlog costs tens of milliseconds to import, which callers should not pay.

Each line starts with ``ts`` (UTC, ISO 8601, microseconds), ``mono`` (the
monotonic clock, which is what deadlines are measured on; an explicit
``mono=`` field wins, so a line can carry the time its event was seen) and
``event``, followed by the fields in the order given. The :class:`Redactor`
runs before the time stamp is added: a clock reading cannot carry a secret, and
scrubbing a short literal secret out of it could only corrupt it.

:class:`EventLog` satisfies :class:`tether.supervisor.loop.EventSink`, which is all the
supervisor's loop depends on; for a run that keeps no files the loop uses
:class:`tether.supervisor.loop.NullEventLog`, so that it need not import ``structlog``.
"""

from __future__ import annotations

import os
import stat
import time
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TextIO

import structlog
from structlog.typing import EventDict, FilteringBoundLogger

from tether.core.redaction import Redactor

__all__ = ["EventLog"]

_FILE_MODE: Final = 0o600
_OPEN_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC


def _stamp(logger: object, method_name: str, event_dict: EventDict) -> EventDict:
    """Put ``ts``, ``mono`` and ``event`` first, then the fields in their order."""
    mono = event_dict.pop("mono", None)
    event = event_dict.pop("event", None)
    event_dict.pop("ts", None)
    return {
        "ts": datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "mono": time.monotonic() if mono is None else mono,
        "event": event,
        **event_dict,
    }


def _open_private(path: Path) -> TextIO:
    """Open ``path`` for appending, mode 0600 whatever the umask, never through a symlink."""
    fd = os.open(path, _OPEN_FLAGS, _FILE_MODE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"event log {path} is not a regular file")
        os.fchmod(fd, _FILE_MODE)
        return os.fdopen(fd, "a", encoding="utf-8", buffering=1)
    except BaseException:
        os.close(fd)
        raise


class EventLog:
    """A JSON-lines event log file, written through a private structlog logger."""

    def __init__(self, path: Path, file: TextIO, redactor: Redactor) -> None:
        """Prefer :meth:`open`; this wraps a text file that is already open."""
        self.path = path
        self._file = file
        self._log: FilteringBoundLogger = structlog.wrap_logger(
            structlog.WriteLogger(file),
            processors=[redactor, _stamp, structlog.processors.JSONRenderer()],
            wrapper_class=structlog.make_filtering_bound_logger(0),
            context_class=dict,
            cache_logger_on_first_use=False,
        ).bind()

    @classmethod
    def open(cls, path: Path, redactor: Redactor) -> EventLog:
        """Open (creating or appending to) the event log at ``path``."""
        return cls(path, _open_private(path), redactor)

    def emit(self, event: str, **fields: object) -> None:
        """Write one line for ``event`` and hand it to the OS before returning."""
        if self._file.closed:
            raise ValueError(f"event log {self.path} is closed")
        self._log.msg(event, **fields)

    def close(self) -> None:
        """Close the file; safe to call twice."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

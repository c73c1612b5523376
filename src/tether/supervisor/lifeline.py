"""The supervisor's end of the lifeline: what the caller wrote, as the core's events.

Reads what is waiting without ever blocking, turns each request into the
core's event and says what was heard in few lines (the bytes are decoded in
:mod:`tether.shared.lifeline`). Why: ``docs/architecture.md``, "Channels".
"""

from __future__ import annotations

import os
import select

from tether.core import events
from tether.core.events import CallerLost, Event, SignalRequested
from tether.shared import lifeline as wire
from tether.shared.lifeline import PASS_ON_BASE, LifelineDecoder
from tether.shared.signals import signal_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final, Protocol

    from tether.shared.lifeline import Vocabulary

    class Tell(Protocol):
        """How the loop holds a line for the event log until its turn has acted."""

        def __call__(self, event: str, mono: float | None = None, /, **fields: object) -> None:
            """Hold ``event`` with ``fields``, stamped ``mono``."""


__all__ = ["LifelineReader"]

#: One read, and the most read in one turn of the loop (the loop keeps its deadlines).
_LIFELINE_READ: Final = 1 << 16
_LIFELINE_TURN: Final = 1 << 20


class LifelineReader:
    """The lifeline's reading end as the loop hears it; ``fd`` ``None``: a run without one."""

    def __init__(self, fd: int | None, vocabulary: Vocabulary) -> None:
        self.fd = fd
        self._decoder = LifelineDecoder(vocabulary)
        self._pending: tuple[bytes, bool] | None = None  # what the sentry read, untranslated
        #: Requests to act on without telling (past :data:`~tether.shared.lifeline.TOLD_REQUESTS`).
        self._untold: list[Event] = []

    def take_over(self, data: bytes, closed: bool) -> None:
        """What the sentry read before the loop ran, heard at the next :meth:`read`."""
        self._pending = (data, closed) if data or closed else None

    def read(self, now: float, tell: Tell) -> tuple[list[Event], bool]:
        """The requests written since the last turn, then ``CallerLost`` at end of file; and
        whether the lifeline ended."""
        assert self.fd is not None
        if self._pending is not None:
            (data, closed), self._pending = self._pending, None
        else:
            data, closed = _drain(self.fd, _LIFELINE_TURN)
        tally = self._decoder
        events: list[Event] = []
        for request in tally.decode(data):
            event = _request_event(request, now)
            if tally.tell(request):
                tell("lifeline_request", now, request=_describe_request(request))
            else:
                self._untold.append(event)
            events.append(event)
        if tally.unknown_report_due():
            tell("lifeline_unknown_bytes", now, count=tally.unknown)
        if tally.untold_report_due():
            tell("lifeline_requests_untold", now, count=tally.untold)
        if closed:
            extra = {"unknown_bytes": tally.unknown} if tally.unknown else {}
            if tally.untold:
                extra["untold_requests"] = tally.untold
            tell("lifeline_closed", now, **extra)
            events.append(CallerLost(now))
        return events, closed

    def untold(self, event: Event) -> bool:
        """Whether ``event`` answers a request to act on without telling; asked once per event."""
        if not any(untold is event for untold in self._untold):
            return False
        self._untold = [untold for untold in self._untold if untold is not event]
        return True


_EVENTS: Final[dict[bytes, Callable[[float], Event]]] = {
    wire.CANCEL: events.CancelRequested,
    wire.KILL_NOW: events.KillRequested,
    wire.TIME_OUT: events.TimeOutRequested,
    wire.SUSPEND: events.SuspendRequested,
    wire.RESUME: events.ResumeRequested,
}


def _request_event(request: bytes, now: float) -> Event:
    """The core's event for one lifeline request (see :mod:`tether.shared.lifeline`)."""
    made = _EVENTS.get(request)
    return SignalRequested(now, _pass_on_name(request)) if made is None else made(now)


def _pass_on_name(request: bytes) -> str:
    name = signal_name(str(request[0] - PASS_ON_BASE))
    assert name is not None  # only bytes of named signals are requests (ALL)
    return name


def _describe_request(request: bytes) -> str:
    if request[0] >= PASS_ON_BASE:
        return f"pass on {_pass_on_name(request)}"
    return request.decode("ascii")


def _drain(fd: int, bound: int) -> tuple[bytes, bool]:
    """Read what is waiting on ``fd`` (up to about ``bound`` bytes); and whether it was closed.

    Never blocks, even where the seed door's caller left ``fd`` blocking: each read after
    the first waits for ``poll``. A read error is end of file (the caller cannot be heard).
    """
    chunks: list[bytes] = []
    size = 0
    more = select.poll()
    more.register(fd, select.POLLIN)
    while size < bound:
        try:
            chunk = os.read(fd, _LIFELINE_READ)
        except BlockingIOError:
            break
        except OSError:
            chunk = b""
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
        if not more.poll(0):
            break
    return b"".join(chunks), False

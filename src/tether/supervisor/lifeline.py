"""The supervisor's end of the lifeline: what the caller wrote, as the core's events.

The caller's end is :mod:`tether.caller.lifeline`; the bytes are spelt and
decoded in :mod:`tether.shared.lifeline`, which the sentry uses too, before
the core is loaded. What is left is the
loop's: reading what is waiting without ever blocking (the seed door's
caller chose whether the descriptor blocks), turning each request into the
core's event, and saying what was heard, in few enough lines that a caller
writing a mebibyte of anything costs the log a few lines and the loop one
turn per MiB. Requests past the first few of a kind are acted on without a
line each (:meth:`LifelineReader.untold`); the loop asks which when it
feeds them, so that it neither logs nor reports them one by one.
"""

from __future__ import annotations

import os
import select

from tether.core.events import (
    CallerLost,
    CancelRequested,
    Event,
    KillRequested,
    ResumeRequested,
    SignalRequested,
    SuspendRequested,
    TimeOutRequested,
)
from tether.shared.lifeline import (
    CANCEL,
    KILL_NOW,
    PASS_ON_BASE,
    RESUME,
    SUSPEND,
    TIME_OUT,
    LifelineDecoder,
)
from tether.shared.signals import signal_name

# Loaded once the command runs, while its caller waits: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Protocol

    from tether.shared.lifeline import Vocabulary

    class Tell(Protocol):
        """How the loop holds a line for the event log until its turn has acted."""

        def __call__(self, event: str, mono: float | None = None, /, **fields: object) -> None:
            """Hold ``event`` with ``fields``, stamped ``mono``."""


__all__ = ["LifelineReader"]

#: One read of the lifeline, and the most read in one turn of the loop: a
#: caller that streams bytes gets one turn per MiB, and the loop its deadlines.
_LIFELINE_READ: Final = 1 << 16
_LIFELINE_TURN: Final = 1 << 20


class LifelineReader:
    """The lifeline's reading end as the loop hears it; ``fd`` ``None``: a run without one."""

    def __init__(self, fd: int | None, vocabulary: Vocabulary) -> None:
        self.fd = fd
        self._decoder = LifelineDecoder(vocabulary)
        #: The lifeline's bytes and end of file as the sentry read them, not yet translated.
        self._pending: tuple[bytes, bool] | None = None
        #: Requests to act on without telling (past :data:`~tether.shared.lifeline.TOLD_REQUESTS`).
        self._untold: list[Event] = []

    def take_over(self, data: bytes, closed: bool) -> None:
        """What the sentry read before the loop ran: heard at the next :meth:`read`.

        A sentry that heard nothing hands over nothing: the next :meth:`read`
        then reads the descriptor. (Held as an empty hand-over, it stood in for
        the first read after it: the wake that the caller's death or request
        caused read nothing and turned into a ``Tick`` for the core, with its
        ``step`` line, and the command's signal waited for the turn after.)
        """
        self._pending = (data, closed) if data or closed else None

    def read(self, now: float, tell: Tell) -> tuple[list[Event], bool]:
        """The requests the caller wrote since the last turn, then ``CallerLost`` at end of file.

        Returns the events and whether the lifeline ended. A turn decodes
        what it read in bulk (:class:`~tether.shared.lifeline.LifelineDecoder`):
        each request once at most, junk and requests past the first few
        counted, not logged one by one.
        """
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


def _request_event(request: bytes, now: float) -> Event:
    """The core's event for one lifeline request (see :mod:`tether.shared.lifeline`)."""
    if request == CANCEL:
        return CancelRequested(now)
    if request == KILL_NOW:
        return KillRequested(now)
    if request == TIME_OUT:
        return TimeOutRequested(now)
    if request == SUSPEND:
        return SuspendRequested(now)
    if request == RESUME:
        return ResumeRequested(now)
    return SignalRequested(now, _pass_on_name(request))


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

    Never blocks, whether or not ``fd`` is in non-blocking mode (the seed
    door's caller chose): it was readable when the loop woke, and each further
    read waits for ``poll`` to say there is more. A read error counts as end of
    file, as the caller can no longer be heard.
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
            return b"".join(chunks), True
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
        if not more.poll(0):
            break
    return b"".join(chunks), False

"""The one client of the status pipe: typed messages in, a lost supervisor handled once.

Every door reads through :class:`StatusClient`, which on an end of file without ``finished``
stops what is left and writes the fallback record itself (docs/architecture.md, "Channels").
"""

from __future__ import annotations

import contextlib
import os
import select
import time
import weakref

from tether.caller.lifeline import identity
from tether.core.spec import RunSpec
from tether.shared.poll_wait import poll_ms
from tether.shared.protocol import Finished, Message, Spawned, Started, decode

__all__ = ["HoldingStatusClient", "StatusClient"]

#: Status lines are short; a longer one is not a message (and is not kept whole).
_MAX_LINE_BYTES = 1 << 16
#: The most one read takes.
_CHUNK = 65536


class StatusClient:
    """The caller's end of one run's status pipe (its owner closes it: :meth:`close`)."""

    def __init__(self, spec: RunSpec, fd: int) -> None:
        os.set_blocking(fd, False)
        self.spec = spec
        self.fd: int | None = fd
        #: What the descriptor is, checked before each read: a number is no name.
        self._identity = identity(fd)
        self.started: Started | None = None
        #: What the command said of itself before its exec: where it is, for a
        #: supervisor lost before it said ``started``.
        self.spawned: Spawned | None = None
        self.finished: Finished | None = None
        self._partial = b""

    def read_available(self) -> list[Message]:
        """The messages since the last call, without blocking; a lost supervisor is handled on the
        way."""
        if self.fd is None or self.finished is not None:
            return []
        at_eof = self._read_in()
        *lines, self._partial = self._partial.split(b"\n")
        messages: list[Message] = []
        for line in lines:
            if line.strip():
                message = decode(line)
                messages.append(message)
                if isinstance(message, Started) and self.started is None:
                    self.started = message
                elif isinstance(message, Spawned) and self.spawned is None:
                    self.spawned = message
                elif isinstance(message, Finished):
                    self.finished = message
                    break
        # A line cut short by the end of the pipe is a supervisor that died mid-write.
        if self.finished is None and at_eof:
            from tether.caller.fallback import after_supervisor_lost

            self.finished = after_supervisor_lost(self.spec, self.started or self.spawned)
            messages.append(self.finished)
        return messages

    def _read_in(self) -> bool:
        """Add what can be read now to what is held; whether the channel is at its end."""
        if self.fd is not None and identity(self.fd) != self._identity:
            # The program closed it (and may have opened something else under its
            # number): never read nor close what is not this channel. The run
            # cannot be followed any more: as a supervisor lost.
            self.fd = None
            return True
        while self.fd is not None:
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                return False
            except OSError:
                chunk = b""
            if not chunk:
                return True
            self._partial += chunk
            if len(self._partial) > _MAX_LINE_BYTES and b"\n" not in self._partial:
                self._partial = self._partial[-_MAX_LINE_BYTES:]
            if len(chunk) < _CHUNK:
                # All there was (a stream socket hands over what it holds): no read to see
                # EAGAIN; what comes later, the channel's readiness says.
                return False
        return False

    def abandon(self) -> Finished:
        """Give the supervisor up as lost (silent within the launch's bound): what its end of file
        would do."""
        if self.finished is None:
            from tether.caller.fallback import after_supervisor_lost

            self.finished = after_supervisor_lost(self.spec, self.started or self.spawned)
        return self.finished

    def wait(self, timeout: float | None = None) -> list[Message]:
        """Block until something arrives (or ``timeout`` seconds pass); return what did."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            messages = self.read_available()
            if messages or self.fd is None or self.finished is not None:
                return messages
            remaining = None if end is None else max(0.0, end - time.monotonic())
            if remaining == 0:
                return []
            # poll(), not select(): a busy caller may hold descriptors above 1024.
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            poller.poll(poll_ms(remaining))

    def wait_finished(self) -> Finished:
        """Block until the run is over, close the pipe, and say how it ended."""
        while self.finished is None:
            self.wait()
        self.close()
        return self.finished

    def close(self) -> None:
        """Close the pipe once ``finished`` is in (not in :meth:`read_available`: a loop may still
        watch it)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _close_quietly(fd: int, made: tuple[int, int] | None) -> None:
    """Close ``fd`` if it is still what was ``made`` (never a number the program reused)."""
    if identity(fd) == made:
        with contextlib.suppress(OSError):
            os.close(fd)


class HoldingStatusClient(StatusClient):
    """A status client that holds the record directory for the fallback record until the run is
    over."""

    def __init__(self, spec: RunSpec, fd: int, record_dir: int) -> None:
        super().__init__(spec, fd)
        made = identity(record_dir)
        self._record_dir, self._record_dir_made = record_dir, made
        self._let_go_of_record_dir = weakref.finalize(self, _close_quietly, record_dir, made)

    def read_available(self) -> list[Message]:
        if self.finished is None and identity(self._record_dir) != self._record_dir_made:
            # The program closed the held directory (its number may be another
            # file's now): no fallback record through it, nor by its path.
            self.spec = self.spec.replace(record_path=None)
        messages = super().read_available()
        if self.finished is not None:
            self._let_go_of_record_dir()
        return messages

    def close(self) -> None:
        super().close()
        self._let_go_of_record_dir()

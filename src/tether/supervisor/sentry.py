"""The sentry: from the launch until the loop runs, acting on what cannot wait.

A thread that sends the group the signals the core certainly sends first
(:func:`tether.core.first_signals.first_signals`), then hands the loop all it read and sent to
replay (docs/architecture.md, "Processes" and "Why some mechanisms are built as they are").
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import sys
import time

from tether.core.first_signals import CALLER_LOST, CANCEL, KILL, TICK, first_signals
from tether.linux.proctree import descendants
from tether.shared.lifeline import CANCEL as CANCEL_BYTE
from tether.shared.lifeline import KILL_NOW
from tether.shared.poll_wait import poll_ms
from tether.supervisor.launch import CANCEL_SIGNALS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["Handover", "Sentry"]

#: The switch interval while the sentry stands (s): how long a busy main thread may keep the
#: interpreter from the woken sentry. It costs nothing while the sentry waits in ``poll()``.
_SWITCH_INTERVAL: Final = 0.0001

_READ: Final = 1 << 16

#: Written to the signal wakeup pipe to stand the sentry down: no signal is numbered 0.
_STAND_DOWN: Final = b"\0"

#: The stop signal, as the sentry names it to :func:`first_signals`.
_STOP: Final = "stop signal"

#: How long to wait for the sentry before writing the word to stand down again.
_RETRY_SECONDS: Final = 0.05


class Handover:
    """What the sentry read (lifeline, signals), sent (with when) and walked, for the loop to
    replay."""

    __slots__ = ("acted_at", "lifeline", "lifeline_closed", "sent", "signals", "walked")

    def __init__(self) -> None:
        self.lifeline = bytearray()  # grown in place: a flood costs no copy per read
        self.lifeline_closed = False
        self.signals = b""
        self.sent: list[tuple[int, float]] = []
        self.acted_at: float | None = None
        self.walked: set[int] = set()


class Sentry:
    """A thread that watches one run from the command's launch until the loop takes over."""

    def __init__(
        self,
        *,
        lifeline: int | None,
        wakeup: int,
        wakeup_write: int,
        leader: int,
        pgid: int,
        own_group: bool,
        deadline_at: float | None,
        stop_signal: int,
    ) -> None:
        self._lifeline = lifeline
        self._wakeup = wakeup
        self._wakeup_write = wakeup_write
        self._leader = leader
        self._pgid = pgid
        self._own_group = own_group
        self._deadline_at = deadline_at
        #: The numbers of the names :func:`first_signals` answers with (the stop
        #: signal under a name of its own: it may have no name :mod:`signal` knows).
        self._numbers = {_STOP: stop_signal, "SIGCONT": signal.SIGCONT, "SIGKILL": signal.SIGKILL}
        self._seen = Handover()
        self._stopping = False
        self._killed = False
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(_SWITCH_INTERVAL)
        try:
            _thread.start_new_thread(self._watch, ())
        except BaseException:
            self._done.release()
            self._restore()
            raise

    def stand_down(self) -> Handover:
        """Stop the thread (a word on the wakeup pipe: no descriptor of its own) and hand over."""
        while True:
            try:
                os.write(self._wakeup_write, _STAND_DOWN)
            except BlockingIOError:
                pass
            except OSError:
                break  # cannot happen to a pipe held open; nothing else would wake it
            if self._done.acquire(timeout=_RETRY_SECONDS):
                self._done.release()
                break
        self._restore()
        return self._seen

    def _restore(self) -> None:
        sys.setswitchinterval(self._switch_interval)

    def _watch(self) -> None:
        try:
            self._keep_watch()
        except BaseException:  # noqa: S110 - a thread has nobody to tell; the loop still comes
            pass
        finally:
            self._done.release()

    def _keep_watch(self) -> None:
        poller = select.poll()
        poller.register(self._wakeup, select.POLLIN)
        if self._lifeline is not None:
            poller.register(self._lifeline, select.POLLIN)
        while not self._killed:
            ready = {fd for fd, _mask in poller.poll(self._timeout_ms())}
            now = time.monotonic()
            if self._wakeup in ready and self._read_signals(now):
                return
            if self._lifeline is not None and self._lifeline in ready:
                self._read_lifeline(poller, now)
            deadline = self._deadline_at
            if deadline is not None and now >= deadline:
                self._answer(TICK, now)

    def _timeout_ms(self) -> int | None:
        deadline = self._deadline_at
        if deadline is None or self._stopping:
            return None
        # Rounded up: waking a millisecond early would only mean a second wait.
        return poll_ms(deadline - time.monotonic())

    def _read_lifeline(self, poller: select.poll, now: float) -> None:
        lifeline = self._lifeline
        assert lifeline is not None
        try:
            chunk = os.read(lifeline, _READ)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""  # the caller can no longer be heard: as the loop reads it
        if not chunk:
            self._seen.lifeline_closed = True
            poller.unregister(lifeline)
            self._lifeline = None
            self._answer(CALLER_LOST, now)
            return
        self._seen.lifeline += chunk
        if KILL_NOW in chunk:
            self._answer(KILL, now)
        elif CANCEL_BYTE in chunk:
            self._answer(CANCEL, now)

    def _read_signals(self, now: float) -> bool:
        """Read the wakeup pipe; act on a cancel; return whether the word to stand down came."""
        try:
            chunk = os.read(self._wakeup, 256)
        except OSError:
            return False
        standing_down = _STAND_DOWN in chunk
        chunk = chunk.replace(_STAND_DOWN, b"")
        self._seen.signals += chunk
        if any(number in CANCEL_SIGNALS for number in chunk):
            self._answer(CANCEL, now)
        return standing_down

    def _answer(self, trigger: str, now: float) -> None:
        """Send the group what the core certainly sends first for ``trigger``."""
        if self._stopping:
            names: tuple[str, ...] = ("SIGKILL",) if trigger == KILL else ()
        else:
            self._stopping = True
            deadline = self._deadline_at
            overdue = deadline is not None and now >= deadline
            names = first_signals(trigger, overdue=overdue, stop_signal=_STOP)
        for name in names:
            self._send(self._numbers[name], now)
        self._killed = self._killed or "SIGKILL" in names

    def _send(self, number: int, now: float) -> None:
        if self._seen.acted_at is None:
            # Walked before the first signal: counted after it, a member its own parent reaps
            # meanwhile would be missed (docs/performance.md, "Caller death").
            self._seen.walked = _descendants()
        try:
            if self._own_group:
                os.killpg(self._pgid, number)
            else:  # the caller's group (a command on its terminal): the leader alone
                os.kill(self._leader, number)
        except OSError:
            return
        self._seen.sent.append((number, now))
        if self._seen.acted_at is None:
            self._seen.acted_at = now


def _descendants() -> set[int]:
    """The supervisor's descendants as ``/proc`` shows them now, to count; best effort."""
    found: set[int] = set()
    try:
        for pid, _parent in descendants(os.getpid()):
            found.add(pid)
    except OSError:
        pass
    return found

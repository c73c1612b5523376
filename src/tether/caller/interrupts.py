"""Signals to a command-line caller, turned into requests on the lifeline.

A handler writes one byte (the supervisor does the stopping); one that arrives before there is
a lifeline is kept and sent then; a second Ctrl-C at ``tether run`` kills (docs/cli.md,
"Signals").
"""

from __future__ import annotations

import signal
from types import FrameType

from tether.caller.fork import start
from tether.caller.lifeline import Lifeline
from tether.caller.relay import relay_job_control
from tether.caller.start import Spawn
from tether.core.spec import RunSpec
from tether.shared.lifeline import CANCEL, KILL_NOW

__all__ = ["LifelineRequests", "start_interruptible"]


class LifelineRequests:
    """Installs handlers for SIGINT, SIGTERM and SIGHUP that send requests to one run."""

    def __init__(self, *, second_interrupt_kills: bool) -> None:
        self._second_interrupt_kills = second_interrupt_kills
        self._lifeline: Lifeline | None = None
        self._pending: list[bytes] = []
        self._interrupts = 0
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, self._on_signal)
        relay_job_control(self)

    def send(self, byte: bytes) -> None:
        """Send ``byte`` on the lifeline, or keep it until there is one (handler-safe)."""
        if self._lifeline is None:
            self._pending.append(byte)
        else:
            self._lifeline.request(byte)

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        if number == signal.SIGINT:
            self._interrupts += 1
        kill = self._second_interrupt_kills and self._interrupts >= 2
        self.send(KILL_NOW if kill else CANCEL)

    def attach(self, lifeline: Lifeline) -> None:
        """Start sending on ``lifeline``, including what arrived during the launch."""
        self._lifeline = lifeline
        for byte in self._pending:
            lifeline.request(byte)
        self._pending.clear()


def start_interruptible(spec: RunSpec, *, second_interrupt_kills: bool) -> Spawn:
    """Start ``spec``'s supervisor with this program's signals, handled from before the start, as
    requests."""
    requests = LifelineRequests(second_interrupt_kills=second_interrupt_kills)
    spawn = start(spec)
    requests.attach(spawn.lifeline)
    return spawn

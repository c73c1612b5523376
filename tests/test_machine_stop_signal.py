"""The core with another stop signal and with no escalation (what ``tether timeout`` needs)."""

from __future__ import annotations

import math

from tether.core.effects import Exit, SignalTree, WriteRecord
from tether.core.events import CommandExited, Launched, Tick
from tether.core.machine import Phase, RunMachine


def test_the_stop_signal_replaces_sigterm() -> None:
    machine = RunMachine(deadline_at=10.0, grace_seconds=1.0, stop_signal="SIGINT")
    machine.feed(Launched(0.0, 42))
    assert machine.feed(Tick(10.0)) == [SignalTree("SIGINT"), SignalTree("SIGCONT")]
    assert machine.feed(Tick(11.0)) == [SignalTree("SIGKILL")]


def test_an_infinite_grace_never_escalates_and_never_asks_for_a_tick() -> None:
    machine = RunMachine(deadline_at=10.0, grace_seconds=math.inf)
    machine.feed(Launched(0.0, 42))
    assert machine.feed(Tick(10.0)) == [SignalTree("SIGTERM"), SignalTree("SIGCONT")]
    assert machine.phase is Phase.TERMINATING
    assert machine.next_deadline is None
    assert machine.feed(Tick(1e12)) == []
    effects = machine.feed(CommandExited(1e12, 0, others_alive=False))
    assert isinstance(effects[0], WriteRecord)
    assert not effects[0].verdict.escalated_to_sigkill
    assert effects[1] == Exit(124)

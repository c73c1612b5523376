"""The core with another stop signal and with no escalation (what ``tether timeout`` needs)."""

from __future__ import annotations

import math

from tether.core.effects import Exit, SignalTree, WriteRecord
from tether.core.events import CallerLost, CommandExited, Launched, Tick
from tether.core.machine import CALLER_LOST_GRACE_SECONDS, Phase, RunMachine


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


def test_a_lost_caller_bounds_an_infinite_grace() -> None:
    """Nobody is left to wait: the command gets the default grace, then SIGKILL."""
    machine = RunMachine(deadline_at=10.0, grace_seconds=math.inf, stop_signal="SIGCHLD")
    machine.feed(Launched(0.0, 42))
    machine.feed(Tick(10.0))
    assert machine.next_deadline is None
    # Lost 3 s into the stop: the grace counts from the first stop signal.
    assert machine.feed(CallerLost(13.0)) == []
    assert machine.next_deadline == 10.0 + CALLER_LOST_GRACE_SECONDS
    assert machine.feed(Tick(10.0 + CALLER_LOST_GRACE_SECONDS)) == [SignalTree("SIGKILL")]
    # Lost long after the stop began: SIGKILL at once.
    late = RunMachine(deadline_at=1.0, grace_seconds=math.inf)
    late.feed(Launched(0.0, 42))
    late.feed(Tick(1.0))
    assert late.feed(CallerLost(500.0)) == [SignalTree("SIGKILL")]
    # Lost while watching: the stop starts now and ends by the bound.
    watched = RunMachine(deadline_at=None, grace_seconds=math.inf)
    watched.feed(Launched(0.0, 42))
    assert watched.feed(CallerLost(2.0)) == [SignalTree("SIGTERM"), SignalTree("SIGCONT")]
    assert watched.next_deadline == 2.0 + CALLER_LOST_GRACE_SECONDS

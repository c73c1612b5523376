"""The core's requests from a relaying caller: time up now, a signal passed on, job control.

Driven by a fake clock, as ``test_machine.py``: ``tether timeout`` passes on
the signals it receives (GNU does), hears SIGALRM as its own timer, and both
doors stop and continue the tree with themselves (Ctrl-Z, ``fg``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tether.core.effects import SignalTree, WriteRecord
from tether.core.events import (
    CommandExited,
    Launched,
    ResumeRequested,
    SignalRequested,
    SuspendRequested,
    Tick,
    TimeOutRequested,
)
from tether.core.machine import Phase, RunMachine
from tether.core.reasons import Reason


def watching(*, grace: float, deadline_at: float | None = 110.0) -> RunMachine:
    machine = RunMachine(deadline_at=deadline_at, grace_seconds=grace)
    machine.feed(Launched(now=100.0, pid=42))
    return machine


def verdict_reason(effects: Sequence[object]) -> tuple[Reason, int]:
    write = next(effect for effect in effects if isinstance(effect, WriteRecord))
    return write.verdict.reason, write.verdict.exit_status


def test_a_signal_passed_on_is_the_commands_to_act_on() -> None:
    machine = watching(grace=math.inf)
    effects = machine.feed(SignalRequested(101.0, "SIGINT"))
    assert effects == [SignalTree("SIGINT"), SignalTree("SIGCONT")]
    assert machine.phase is Phase.WATCHING  # the deadline still counts, as in GNU
    assert machine.next_deadline == 110.0
    done = machine.feed(CommandExited(101.5, -2, others_alive=False))
    assert verdict_reason(done) == (Reason.COMPLETED, 130)


def test_kill_and_cont_are_passed_on_alone() -> None:
    machine = watching(grace=math.inf)
    assert machine.feed(SignalRequested(101.0, "SIGCONT")) == [SignalTree("SIGCONT")]
    assert machine.feed(SignalRequested(101.0, "SIGKILL")) == [SignalTree("SIGKILL")]


def test_with_kill_after_the_first_signal_passed_on_starts_the_kill_timer() -> None:
    machine = watching(grace=2.0)
    machine.feed(SignalRequested(101.0, "SIGUSR1"))
    assert machine.phase is Phase.TERMINATING
    assert machine.next_deadline == 103.0
    assert machine.feed(Tick(103.0)) == [SignalTree("SIGKILL")]
    done = machine.feed(CommandExited(103.1, -9, others_alive=False))
    assert verdict_reason(done) == (Reason.DEADLINE_EXCEEDED, 124)


def test_a_command_that_ends_of_a_signal_passed_on_completed() -> None:
    machine = watching(grace=2.0)
    machine.feed(SignalRequested(101.0, "SIGTERM"))
    done = machine.feed(CommandExited(101.2, -15, others_alive=False))
    assert verdict_reason(done) == (Reason.COMPLETED, 143)


def test_time_up_now_is_the_deadline() -> None:
    machine = watching(grace=math.inf, deadline_at=1000.0)
    assert machine.feed(TimeOutRequested(101.0)) == [
        SignalTree("SIGTERM"),
        SignalTree("SIGCONT"),
    ]
    done = machine.feed(CommandExited(101.2, -15, others_alive=False))
    assert verdict_reason(done) == (Reason.DEADLINE_EXCEEDED, 124)


def test_time_up_twice_changes_nothing() -> None:
    machine = watching(grace=math.inf)
    machine.feed(TimeOutRequested(101.0))
    assert machine.feed(TimeOutRequested(101.1)) == []


def test_the_tree_stops_and_continues_with_its_caller_and_time_runs_on() -> None:
    machine = watching(grace=2.0)
    assert machine.feed(SuspendRequested(101.0)) == [SignalTree("SIGSTOP")]
    assert machine.next_deadline == 110.0
    assert machine.feed(ResumeRequested(102.0)) == [SignalTree("SIGCONT")]
    machine.feed(SuspendRequested(103.0))
    # Stopped at the deadline: the stop signal, and SIGCONT so it can act on it.
    assert machine.feed(Tick(110.0)) == [SignalTree("SIGTERM"), SignalTree("SIGCONT")]


def test_requests_after_the_record_change_nothing() -> None:
    machine = watching(grace=math.inf)
    machine.feed(CommandExited(101.0, 0, others_alive=False))
    for event in (
        SignalRequested(102.0, "SIGINT"),
        TimeOutRequested(102.0),
        SuspendRequested(102.0),
        ResumeRequested(102.0),
    ):
        assert machine.feed(event) == []

"""Every path of a run through the pure core, driven by a fake clock.

The machine never reads a clock: each event carries the monotonic time it was
seen at, so these tests replay minutes of a run in microseconds, with no
sleeping, no processes and no patching. That is what lets them say "nothing
before the deadline, SIGTERM and SIGCONT at it, SIGKILL exactly when the grace
runs out" as comparisons of lists instead of as races against a real clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import pytest

from tether.core.effects import Effect, Exit, SignalTree, Verdict, WriteRecord
from tether.core.events import (
    CallerLost,
    CancelRequested,
    CommandExited,
    Event,
    KillRequested,
    Launched,
    LaunchFailed,
    Tick,
    TreeEmptied,
)
from tether.core.machine import DEFAULT_SETTLE_SECONDS, IllegalEvent, Phase, RunMachine
from tether.core.reasons import Reason

TERM: list[Effect] = [SignalTree("SIGTERM"), SignalTree("SIGCONT")]
KILL: list[Effect] = [SignalTree("SIGKILL")]

PID = 4242


def watching(
    *,
    deadline_at: float | None = 110.0,
    grace: float = 2.0,
    settle: float = DEFAULT_SETTLE_SECONDS,
    at: float = 100.0,
) -> RunMachine:
    """A machine whose command was launched at ``at`` and is being watched."""
    machine = RunMachine(deadline_at=deadline_at, grace_seconds=grace, settle_seconds=settle)
    assert machine.feed(Launched(now=at, pid=PID)) == []
    assert machine.phase is Phase.WATCHING
    return machine


def record_of(effects: Sequence[Effect]) -> Verdict:
    """The verdict of a step that finished the run: a record, then the exit with its status."""
    assert len(effects) >= 2
    *_, write, exit_ = effects
    assert isinstance(write, WriteRecord)
    assert exit_ == Exit(write.verdict.exit_status)
    return write.verdict


def assert_recorded(machine: RunMachine) -> None:
    assert machine.phase is Phase.RECORDED
    assert machine.next_deadline is None


# -- the command finishes by itself ---------------------------------------------


@pytest.mark.parametrize(
    ("returncode", "status"),
    [(0, 0), (3, 3), (255, 255), (-9, 137), (-15, 143), (-2, 130)],
)
def test_command_finishing_reports_its_own_status(returncode: int, status: int) -> None:
    machine = watching()
    assert machine.next_deadline == 110.0
    assert machine.reason is None

    effects = machine.feed(CommandExited(now=105.0, returncode=returncode, others_alive=False))

    assert effects == [
        WriteRecord(
            Verdict(
                reason=Reason.COMPLETED,
                exit_status=status,
                returncode=returncode,
                escalated_to_sigkill=False,
                stop_started_at=None,
                finished_at=105.0,
            )
        ),
        Exit(status),
    ]
    assert record_of(effects).shutdown_seconds is None
    assert machine.reason is Reason.COMPLETED
    assert_recorded(machine)


# -- the deadline ---------------------------------------------------------------


def test_deadline_sends_term_and_cont_at_the_deadline_and_kill_when_the_grace_runs_out() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)

    assert machine.feed(Tick(now=105.0)) == []
    assert machine.feed(Tick(now=109.999)) == []
    assert (machine.phase, machine.next_deadline) == (Phase.WATCHING, 110.0)

    assert machine.feed(Tick(now=110.0)) == TERM
    assert (machine.phase, machine.next_deadline) == (Phase.TERMINATING, 112.0)
    assert machine.reason is Reason.DEADLINE_EXCEEDED

    assert machine.feed(Tick(now=111.0)) == []
    assert machine.feed(Tick(now=111.999)) == []
    assert (machine.phase, machine.next_deadline) == (Phase.TERMINATING, 112.0)

    assert machine.feed(Tick(now=112.0)) == KILL
    assert machine.phase is Phase.KILLING
    assert machine.next_deadline == 112.0 + DEFAULT_SETTLE_SECONDS

    effects = machine.feed(CommandExited(now=112.25, returncode=-9, others_alive=False))
    assert effects == [
        WriteRecord(
            Verdict(
                reason=Reason.DEADLINE_EXCEEDED,
                exit_status=124,
                returncode=-9,
                escalated_to_sigkill=True,
                stop_started_at=110.0,
                finished_at=112.25,
            )
        ),
        Exit(124),
    ]
    assert record_of(effects).shutdown_seconds == 2.25
    assert_recorded(machine)


def test_command_exiting_during_the_grace_is_not_killed() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)
    assert machine.feed(Tick(now=110.0)) == TERM

    verdict = record_of(machine.feed(CommandExited(now=111.5, returncode=-15, others_alive=False)))

    assert verdict.reason is Reason.DEADLINE_EXCEEDED
    assert verdict.exit_status == 124
    assert verdict.returncode == -15
    assert not verdict.escalated_to_sigkill
    assert verdict.stop_started_at == 110.0
    assert verdict.shutdown_seconds == 1.5
    assert not verdict.unkillable
    assert_recorded(machine)
    # The grace's end passes quietly: nothing is left to kill.
    assert machine.feed(Tick(now=112.0)) == []


def test_command_ignoring_term_is_killed_and_the_record_says_so() -> None:
    machine = watching(deadline_at=None, grace=3.0)
    assert machine.feed(CancelRequested(now=101.0)) == TERM
    assert machine.feed(Tick(now=102.0)) == []
    assert machine.feed(Tick(now=103.999)) == []

    assert machine.feed(Tick(now=104.0)) == KILL

    verdict = record_of(machine.feed(CommandExited(now=104.01, returncode=-9, others_alive=False)))
    assert verdict.reason is Reason.CANCELLED
    assert verdict.exit_status == 130
    assert verdict.escalated_to_sigkill
    assert verdict.stop_started_at == 101.0


def test_deadline_counts_from_the_callers_asking_not_from_the_launch() -> None:
    # deadline_at is absolute: a slow launch does not buy the command more time.
    machine = watching(deadline_at=110.0, at=104.0)
    assert machine.next_deadline == 110.0
    assert machine.feed(Tick(now=109.0)) == []
    assert machine.feed(Tick(now=110.0)) == TERM


@pytest.mark.parametrize("late_by", [0.0, 0.5, 30.0])
def test_launch_at_or_after_the_deadline_stops_the_command_at_once(late_by: float) -> None:
    machine = RunMachine(deadline_at=100.0, grace_seconds=2.0)

    assert machine.feed(Launched(now=100.0 + late_by, pid=PID)) == TERM

    assert machine.phase is Phase.TERMINATING
    assert machine.reason is Reason.DEADLINE_EXCEEDED
    # The grace counts from the SIGTERM actually sent, not from the deadline.
    assert machine.next_deadline == 102.0 + late_by
    verdict = record_of(
        machine.feed(CommandExited(now=101.0 + late_by, returncode=-15, others_alive=False))
    )
    assert verdict.exit_status == 124
    assert verdict.stop_started_at == 100.0 + late_by


def test_no_deadline_never_fires() -> None:
    machine = watching(deadline_at=None)
    assert machine.next_deadline is None
    for now in (100.0, 1e6, 1e12):
        assert machine.feed(Tick(now=now)) == []
        assert machine.next_deadline is None
    assert machine.phase is Phase.WATCHING
    assert machine.reason is None

    # The other ways to stop still work, with their own timer.
    assert machine.feed(CancelRequested(now=2e12)) == TERM
    assert machine.next_deadline == 2e12 + 2.0


# -- the caller, and people who ask --------------------------------------------


def test_caller_lost_stops_the_command_with_130_and_parent_lost() -> None:
    machine = watching()
    assert machine.feed(CallerLost(now=103.0)) == TERM
    assert machine.reason is Reason.PARENT_LOST
    assert machine.next_deadline == 105.0

    verdict = record_of(machine.feed(CommandExited(now=103.5, returncode=-15, others_alive=False)))
    assert verdict == Verdict(
        reason=Reason.PARENT_LOST,
        exit_status=130,
        returncode=-15,
        escalated_to_sigkill=False,
        stop_started_at=103.0,
        finished_at=103.5,
    )
    assert_recorded(machine)


def test_cancel_stops_the_command_with_130_and_cancelled() -> None:
    machine = watching()
    assert machine.feed(CancelRequested(now=103.0)) == TERM
    assert machine.reason is Reason.CANCELLED

    verdict = record_of(machine.feed(CommandExited(now=104.0, returncode=0, others_alive=False)))
    # A command that handles SIGTERM and exits 0 was still stopped, not completed.
    assert (verdict.reason, verdict.exit_status, verdict.returncode) == (Reason.CANCELLED, 130, 0)
    assert verdict.shutdown_seconds == 1.0


def test_kill_now_while_watching_skips_term() -> None:
    machine = watching(settle=4.0)

    assert machine.feed(KillRequested(now=103.0)) == KILL
    assert machine.phase is Phase.KILLING
    assert machine.reason is Reason.CANCELLED
    assert machine.next_deadline == 107.0

    verdict = record_of(machine.feed(CommandExited(now=103.5, returncode=-9, others_alive=False)))
    assert verdict == Verdict(
        reason=Reason.CANCELLED,
        exit_status=130,
        returncode=-9,
        escalated_to_sigkill=True,
        stop_started_at=103.0,
        finished_at=103.5,
    )


def test_kill_now_while_terminating_escalates_and_keeps_the_reason() -> None:
    machine = watching(deadline_at=110.0, grace=10.0)
    assert machine.feed(Tick(now=110.0)) == TERM

    assert machine.feed(KillRequested(now=111.0)) == KILL
    assert machine.phase is Phase.KILLING
    assert machine.next_deadline == 111.0 + DEFAULT_SETTLE_SECONDS

    verdict = record_of(machine.feed(CommandExited(now=111.5, returncode=-9, others_alive=False)))
    assert verdict.reason is Reason.DEADLINE_EXCEEDED
    assert verdict.exit_status == 124
    assert verdict.escalated_to_sigkill
    assert verdict.stop_started_at == 110.0


# -- what the command leaves behind --------------------------------------------


def test_stragglers_are_stopped_and_the_run_stays_completed() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)

    assert machine.feed(CommandExited(now=105.0, returncode=3, others_alive=True)) == TERM
    assert machine.phase is Phase.TERMINATING
    assert machine.reason is Reason.COMPLETED
    assert machine.next_deadline == 107.0

    verdict = record_of(machine.feed(TreeEmptied(now=106.0)))
    assert verdict == Verdict(
        reason=Reason.COMPLETED,
        exit_status=3,
        returncode=3,
        escalated_to_sigkill=False,
        stop_started_at=105.0,
        finished_at=106.0,
    )
    assert verdict.shutdown_seconds == 1.0
    assert_recorded(machine)


def test_stubborn_stragglers_are_killed_and_the_status_is_still_the_commands() -> None:
    machine = watching(deadline_at=106.0, grace=2.0)
    assert machine.feed(CommandExited(now=105.0, returncode=0, others_alive=True)) == TERM

    # The command finished before its deadline: the deadline no longer applies.
    assert machine.feed(Tick(now=106.0)) == []
    assert machine.reason is Reason.COMPLETED
    assert machine.feed(Tick(now=107.0)) == KILL

    verdict = record_of(machine.feed(TreeEmptied(now=107.1)))
    assert (verdict.reason, verdict.exit_status, verdict.returncode) == (Reason.COMPLETED, 0, 0)
    assert verdict.escalated_to_sigkill


def test_command_exiting_with_others_alive_while_terminating_waits_for_the_tree() -> None:
    machine = watching(deadline_at=None, grace=2.0)
    assert machine.feed(CallerLost(now=101.0)) == TERM

    assert machine.feed(CommandExited(now=101.5, returncode=-15, others_alive=True)) == []
    assert machine.phase is Phase.TERMINATING
    assert machine.next_deadline == 103.0

    verdict = record_of(machine.feed(TreeEmptied(now=102.0)))
    assert (verdict.reason, verdict.exit_status, verdict.returncode) == (
        Reason.PARENT_LOST,
        130,
        -15,
    )
    assert not verdict.escalated_to_sigkill


# -- the settle bound after SIGKILL --------------------------------------------


def test_a_tree_that_survives_sigkill_is_recorded_as_unkillable() -> None:
    machine = watching(deadline_at=110.0, grace=2.0, settle=3.0)
    assert machine.feed(Tick(now=110.0)) == TERM
    assert machine.feed(Tick(now=112.0)) == KILL
    assert machine.feed(Tick(now=114.999)) == []

    verdict = record_of(machine.feed(Tick(now=115.0)))

    assert verdict == Verdict(
        reason=Reason.DEADLINE_EXCEEDED,
        exit_status=124,
        returncode=None,
        escalated_to_sigkill=True,
        stop_started_at=110.0,
        finished_at=115.0,
        unkillable=True,
    )
    assert_recorded(machine)


def test_stragglers_that_survive_sigkill_keep_the_commands_status() -> None:
    machine = watching(deadline_at=None, grace=1.0, settle=1.0)
    assert machine.feed(KillRequested(now=101.0)) == KILL
    assert machine.feed(CommandExited(now=101.2, returncode=-9, others_alive=True)) == []
    assert machine.phase is Phase.KILLING

    verdict = record_of(machine.feed(Tick(now=102.0)))
    assert verdict.unkillable
    assert verdict.returncode == -9
    assert (verdict.reason, verdict.exit_status) == (Reason.CANCELLED, 130)


# -- launch failures ------------------------------------------------------------


@pytest.mark.parametrize(
    ("errno", "stage", "status"),
    [
        (2, "exec", 127),  # ENOENT: not found
        (13, "exec", 126),  # EACCES: found, not executable
        (8, "exec", 126),  # ENOEXEC
        (None, "exec", 126),
        (2, "setup", 125),  # a missing working directory is tether's failure, not "not found"
        (11, "setup", 125),  # EAGAIN: no more processes
        (None, "setup", 125),
    ],
)
def test_launch_failure_maps_to_the_timeout_statuses(
    errno: int | None, stage: Literal["exec", "setup"], status: int
) -> None:
    machine = RunMachine(deadline_at=110.0, grace_seconds=2.0)

    effects = machine.feed(
        LaunchFailed(now=100.0, errno=errno, message="it went wrong", stage=stage)
    )

    assert effects == [
        WriteRecord(
            Verdict(
                reason=Reason.LAUNCH_FAILED,
                exit_status=status,
                returncode=None,
                escalated_to_sigkill=False,
                stop_started_at=None,
                finished_at=100.0,
                launch_errno=errno,
                launch_error="it went wrong",
            )
        ),
        Exit(status),
    ]
    assert machine.reason is Reason.LAUNCH_FAILED
    assert_recorded(machine)
    # The deadline was never armed, so passing it does nothing.
    assert machine.feed(Tick(now=200.0)) == []


# -- a grace of zero --------------------------------------------------------------


def test_grace_zero_sends_kill_in_the_same_step_as_term() -> None:
    machine = watching(deadline_at=110.0, grace=0.0)
    assert machine.feed(Tick(now=110.0)) == TERM + KILL
    assert machine.phase is Phase.KILLING
    assert machine.next_deadline == 110.0 + DEFAULT_SETTLE_SECONDS

    verdict = record_of(machine.feed(CommandExited(now=110.0, returncode=-9, others_alive=False)))
    assert verdict.escalated_to_sigkill
    assert verdict.shutdown_seconds == 0.0


def test_grace_zero_applies_to_cancel_too() -> None:
    machine = watching(grace=0.0)
    assert machine.feed(CancelRequested(now=101.0)) == TERM + KILL
    assert machine.reason is Reason.CANCELLED


# -- time is checked on every event, not only on ticks -------------------------


def test_cancel_after_an_overdue_deadline_is_a_deadline() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)

    assert machine.feed(CancelRequested(now=111.0)) == TERM

    assert machine.reason is Reason.DEADLINE_EXCEEDED
    assert machine.next_deadline == 113.0
    verdict = record_of(machine.feed(CommandExited(now=111.5, returncode=-15, others_alive=False)))
    assert (verdict.reason, verdict.exit_status) == (Reason.DEADLINE_EXCEEDED, 124)


def test_caller_lost_after_an_overdue_deadline_is_a_deadline() -> None:
    machine = watching(deadline_at=110.0)
    assert machine.feed(CallerLost(now=110.0)) == TERM
    assert machine.reason is Reason.DEADLINE_EXCEEDED


def test_kill_after_an_overdue_deadline_terms_first_then_kills() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)
    assert machine.feed(KillRequested(now=111.0)) == TERM + KILL
    assert machine.reason is Reason.DEADLINE_EXCEEDED
    assert machine.phase is Phase.KILLING


def test_an_exit_reported_after_an_overdue_deadline_is_a_deadline() -> None:
    machine = watching(deadline_at=110.0)

    effects = machine.feed(CommandExited(now=110.5, returncode=0, others_alive=False))

    assert effects[:2] == TERM
    verdict = record_of(effects)
    assert (verdict.reason, verdict.exit_status, verdict.returncode) == (
        Reason.DEADLINE_EXCEEDED,
        124,
        0,
    )
    assert verdict.shutdown_seconds == 0.0


def test_an_exit_reported_after_an_overdue_grace_is_escalated() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)
    assert machine.feed(Tick(now=110.0)) == TERM

    effects = machine.feed(CommandExited(now=113.0, returncode=-15, others_alive=False))

    assert effects[:1] == KILL
    assert record_of(effects).escalated_to_sigkill


def test_a_tick_long_after_the_deadline_fires_one_timer_at_a_time() -> None:
    # The grace counts from the SIGTERM sent now, so a late tick cannot skip it.
    machine = watching(deadline_at=110.0, grace=2.0)
    assert machine.feed(Tick(now=500.0)) == TERM
    assert machine.next_deadline == 502.0


def test_an_exit_reported_at_the_settle_bound_comes_too_late() -> None:
    # Timers fire before the event that arrived after them, the settle bound too:
    # the run is recorded as unkillable and the exit only confirms it afterwards.
    machine = watching(deadline_at=None, settle=1.0)
    assert machine.feed(KillRequested(now=101.0)) == KILL

    effects = machine.feed(CommandExited(now=102.0, returncode=-9, others_alive=False))

    verdict = record_of(effects)
    assert verdict.unkillable
    assert verdict.returncode is None
    assert_recorded(machine)


def test_a_zero_grace_sends_sigkill_in_the_same_step() -> None:
    machine = watching(deadline_at=110.0, grace=0.0, settle=1.0)
    assert machine.feed(Tick(now=110.0)) == TERM + KILL
    assert machine.phase is Phase.KILLING


def test_a_zero_settle_bound_is_refused() -> None:
    # It would record the tree as unkillable in the very step that sent SIGKILL.
    with pytest.raises(ValueError, match="settle"):
        RunMachine(deadline_at=110.0, grace_seconds=0.0, settle_seconds=0.0)


# -- late and repeated events ---------------------------------------------------


def test_cancel_while_terminating_is_a_no_op() -> None:
    machine = watching(deadline_at=110.0, grace=2.0)
    assert machine.feed(Tick(now=110.0)) == TERM

    assert machine.feed(CancelRequested(now=110.5)) == []
    assert machine.feed(CancelRequested(now=111.0)) == []

    assert (machine.phase, machine.next_deadline) == (Phase.TERMINATING, 112.0)
    assert machine.reason is Reason.DEADLINE_EXCEEDED
    assert machine.feed(Tick(now=112.0)) == KILL


def test_caller_lost_after_cancel_keeps_cancelled() -> None:
    machine = watching()
    assert machine.feed(CancelRequested(now=101.0)) == TERM
    assert machine.feed(CallerLost(now=101.5)) == []
    assert machine.reason is Reason.CANCELLED
    verdict = record_of(machine.feed(CommandExited(now=102.0, returncode=-15, others_alive=False)))
    assert verdict.reason is Reason.CANCELLED


def test_cancel_after_caller_lost_keeps_parent_lost() -> None:
    machine = watching()
    assert machine.feed(CallerLost(now=101.0)) == TERM
    assert machine.feed(CancelRequested(now=101.5)) == []
    assert machine.reason is Reason.PARENT_LOST


@pytest.mark.parametrize(
    "event",
    [CancelRequested(now=101.0), CallerLost(now=101.0), KillRequested(now=101.0), Tick(101.0)],
    ids=lambda event: type(event).__name__,
)
def test_requests_while_killing_are_no_ops(event: Event) -> None:
    machine = watching(settle=5.0)
    assert machine.feed(KillRequested(now=100.5)) == KILL

    assert machine.feed(event) == []

    assert (machine.phase, machine.next_deadline) == (Phase.KILLING, 105.5)
    assert machine.reason is Reason.CANCELLED


def _recorded_by_completion() -> RunMachine:
    machine = watching()
    record_of(machine.feed(CommandExited(now=101.0, returncode=0, others_alive=False)))
    return machine


def _recorded_after_stragglers() -> RunMachine:
    machine = watching()
    assert machine.feed(CommandExited(now=101.0, returncode=0, others_alive=True)) == TERM
    record_of(machine.feed(TreeEmptied(now=101.5)))
    return machine


def _recorded_by_launch_failure() -> RunMachine:
    machine = RunMachine(deadline_at=110.0, grace_seconds=2.0)
    record_of(machine.feed(LaunchFailed(now=100.0, errno=2, message="no such file")))
    return machine


def _recorded_unkillable() -> RunMachine:
    machine = watching(settle=1.0)
    assert machine.feed(KillRequested(now=101.0)) == KILL
    assert record_of(machine.feed(Tick(now=102.0))).unkillable
    return machine


AFTER_RECORD: list[tuple[Callable[[], RunMachine], Event]] = [
    (_recorded_by_completion, Tick(now=200.0)),
    (_recorded_by_completion, CallerLost(now=200.0)),
    (_recorded_by_completion, CancelRequested(now=200.0)),
    (_recorded_by_completion, KillRequested(now=200.0)),
    (_recorded_by_completion, TreeEmptied(now=200.0)),
    (_recorded_after_stragglers, TreeEmptied(now=200.0)),
    (_recorded_after_stragglers, KillRequested(now=200.0)),
    (_recorded_by_launch_failure, Tick(now=200.0)),
    (_recorded_by_launch_failure, CallerLost(now=200.0)),
    (_recorded_by_launch_failure, CommandExited(now=200.0, returncode=0, others_alive=False)),
    (_recorded_unkillable, CommandExited(now=200.0, returncode=-9, others_alive=False)),
    (_recorded_unkillable, Tick(now=200.0)),
]


@pytest.mark.parametrize(
    ("make", "event"),
    AFTER_RECORD,
    ids=[f"{make.__name__.strip('_')}-{type(ev).__name__}" for make, ev in AFTER_RECORD],
)
def test_anything_after_recorded_does_nothing(make: Callable[[], RunMachine], event: Event) -> None:
    machine = make()
    reason = machine.reason

    assert machine.feed(event) == []
    assert machine.feed(Tick(now=event.now + 1e6)) == []

    assert_recorded(machine)
    assert machine.reason is reason


# -- illegal events raise and change nothing ------------------------------------


def _launching() -> RunMachine:
    return RunMachine(deadline_at=110.0, grace_seconds=2.0, settle_seconds=3.0)


def _watching() -> RunMachine:
    return watching(deadline_at=110.0, grace=2.0, settle=3.0, at=100.0)


def _terminating() -> RunMachine:
    machine = _watching()
    assert machine.feed(CancelRequested(now=104.0)) == TERM
    return machine


def _terminating_after_exit() -> RunMachine:
    machine = _watching()
    assert machine.feed(CommandExited(now=104.0, returncode=1, others_alive=True)) == TERM
    return machine


def _killing_after_exit() -> RunMachine:
    machine = _watching()
    assert machine.feed(KillRequested(now=104.0)) == KILL
    assert machine.feed(CommandExited(now=104.5, returncode=-9, others_alive=True)) == []
    return machine


ILLEGAL: list[tuple[str, Callable[[], RunMachine], Event]] = [
    ("second launch", _watching, Launched(now=105.0, pid=PID + 1)),
    ("launch failed after launch", _watching, LaunchFailed(now=105.0, errno=2, message="x")),
    ("launch while terminating", _terminating, Launched(now=105.0, pid=PID)),
    ("launch after record", _recorded_by_completion, Launched(now=105.0, pid=PID)),
    (
        "exit before launch",
        _launching,
        CommandExited(now=105.0, returncode=0, others_alive=False),
    ),
    ("tick before launch", _launching, Tick(now=105.0)),
    ("cancel before launch", _launching, CancelRequested(now=105.0)),
    ("caller lost before launch", _launching, CallerLost(now=105.0)),
    ("kill before launch", _launching, KillRequested(now=105.0)),
    ("tree emptied before launch", _launching, TreeEmptied(now=105.0)),
    (
        "exit twice",
        _terminating_after_exit,
        CommandExited(now=105.0, returncode=0, others_alive=False),
    ),
    (
        "exit twice while killing",
        _killing_after_exit,
        CommandExited(now=105.0, returncode=0, others_alive=False),
    ),
    (
        "exit twice after record",
        _recorded_by_completion,
        CommandExited(now=105.0, returncode=0, others_alive=False),
    ),
    ("tree emptied while watching", _watching, TreeEmptied(now=105.0)),
    ("tree emptied before exit", _terminating, TreeEmptied(now=105.0)),
    ("time backwards while watching", _watching, Tick(now=99.0)),
    ("time backwards while terminating", _terminating, CancelRequested(now=103.999)),
    (
        "time backwards with an exit",
        _terminating,
        CommandExited(now=103.0, returncode=0, others_alive=False),
    ),
    ("time backwards after record", _recorded_by_completion, Tick(now=100.5)),
]


@pytest.mark.parametrize(
    ("make", "event"),
    [(make, event) for _, make, event in ILLEGAL],
    ids=[name for name, _, _ in ILLEGAL],
)
def test_illegal_events_raise_and_change_nothing(
    make: Callable[[], RunMachine], event: Event
) -> None:
    machine, twin = make(), make()

    with pytest.raises(IllegalEvent):
        machine.feed(event)

    assert machine.phase is twin.phase
    assert machine.next_deadline == twin.next_deadline
    assert machine.reason is twin.reason
    # Later behaviour is the twin's too, including how far the clock has got:
    # the illegal event's time was not taken.
    for later in _continuation(twin):
        assert machine.feed(later) == twin.feed(later)
        assert (machine.phase, machine.next_deadline) == (twin.phase, twin.next_deadline)


def _continuation(machine: RunMachine) -> list[Event]:
    """Events that drive any phase to the end, from just after the fixtures' last event."""
    if machine.phase is Phase.LAUNCHING:
        return [
            Launched(now=104.5, pid=PID),
            Tick(now=110.0),
            CommandExited(now=111.0, returncode=-15, others_alive=False),
            Tick(now=200.0),
        ]
    return [
        Tick(now=104.75),
        Tick(now=106.0),
        Tick(now=110.0),
        Tick(now=112.0),
        Tick(now=120.0),
        Tick(now=130.0),
    ]


def test_illegal_event_later_than_the_deadline_does_not_fire_it() -> None:
    machine = _terminating_after_exit()
    assert machine.next_deadline == 106.0

    with pytest.raises(IllegalEvent):
        machine.feed(CommandExited(now=500.0, returncode=0, others_alive=False))

    assert (machine.phase, machine.next_deadline) == (Phase.TERMINATING, 106.0)
    # The clock did not move to 500: an earlier time is still acceptable.
    assert machine.feed(Tick(now=105.0)) == []


# -- construction ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("grace", "settle", "deadline_at"),
    [
        (-1.0, 5.0, 10.0),
        (1.0, -0.5, 10.0),
        (math.nan, 5.0, 10.0),
        (1.0, math.nan, 10.0),
        (1.0, 5.0, math.nan),
    ],
)
def test_timers_that_could_never_fire_are_refused(
    grace: float, settle: float, deadline_at: float
) -> None:
    with pytest.raises(ValueError, match=r"grace|settle|deadline"):
        RunMachine(deadline_at=deadline_at, grace_seconds=grace, settle_seconds=settle)


def test_a_new_machine_is_launching_with_no_timer() -> None:
    machine = RunMachine(deadline_at=10.0, grace_seconds=1.0)
    assert machine.phase is Phase.LAUNCHING
    assert machine.next_deadline is None
    assert machine.reason is None


def test_the_table_is_built_once_per_process_not_once_per_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's machine is a copy of the table built at import: a millisecond a run saved."""
    import transitions

    built: list[object] = []
    original = transitions.Machine.__init__

    def counting(self: transitions.Machine, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(transitions.Machine, "__init__", counting)
    machine = watching()
    machine.feed(CommandExited(now=105.0, returncode=0, others_alive=False))
    assert machine.phase is Phase.RECORDED
    assert built == []


def test_runs_interleaved_keep_their_own_phases_queues_and_effects() -> None:
    first, second = watching(), watching()
    assert first._machine is not second._machine
    assert first._machine._transition_queue is not second._machine._transition_queue
    assert first._machine.events["tick"].machine is first._machine
    assert second.feed(CancelRequested(now=101.0)) == [
        SignalTree("SIGTERM"),
        SignalTree("SIGCONT"),
    ]
    phases_before = (first.phase, second.phase)
    effects = first.feed(CommandExited(now=102.0, returncode=3, others_alive=False))
    assert [type(effect) for effect in effects] == [WriteRecord, Exit]
    assert phases_before == (Phase.WATCHING, Phase.TERMINATING)
    assert (first.phase, second.phase) == (Phase.RECORDED, Phase.TERMINATING)


# -- what an adapter may send ahead of the core --------------------------------


def _names(effects: Sequence[Effect]) -> list[str]:
    return [effect.signal for effect in effects if isinstance(effect, SignalTree)]


@pytest.mark.parametrize(
    ("event", "promised"),
    [
        (CallerLost(now=105.0), ("SIGTERM", "SIGCONT")),
        (CancelRequested(now=105.0), ("SIGTERM", "SIGCONT")),
        (KillRequested(now=105.0), ("SIGKILL",)),
        # The deadline passed first: the stop it calls for comes before the request's.
        (CallerLost(now=111.0), ("SIGTERM", "SIGCONT")),
        (KillRequested(now=111.0), ("SIGTERM", "SIGCONT", "SIGKILL")),
        (Tick(now=111.0), ("SIGTERM", "SIGCONT")),
        (Tick(now=105.0), ()),
        (CommandExited(now=105.0, returncode=0, others_alive=True), ()),
    ],
)
def test_a_watching_run_promises_the_signals_it_then_sends_first(
    event: Event, promised: tuple[str, ...]
) -> None:
    machine = watching(deadline_at=110.0)
    assert machine.first_signals(event) == promised
    assert machine.phase is Phase.WATCHING  # asking changes nothing
    assert _names(machine.feed(event))[: len(promised)] == list(promised)


def test_a_stopping_run_promises_nothing() -> None:
    machine = watching()
    machine.feed(CancelRequested(now=101.0))
    assert machine.first_signals(CallerLost(now=102.0)) == ()
    assert machine.first_signals(KillRequested(now=102.0)) == ()
    launching = RunMachine(deadline_at=None, grace_seconds=1.0)
    assert launching.first_signals(CallerLost(now=1.0)) == ()

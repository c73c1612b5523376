"""Invariants of the core under random event sequences, checked with hypothesis.

The unit tests in ``test_machine.py`` show the paths somebody thought of; this
file feeds the machine what nobody thought of: requests, exits and ticks in any
legal order, with random gaps (zero included, and ticks landing exactly on, or
just before, the machine's own timers), random deadlines (some already passed
at launch, some absent) and random graces. Whatever happens, the promises
tether makes must hold:

* SIGTERM (then SIGCONT) comes before any SIGKILL, unless somebody asked to kill
  now; SIGKILL never comes before the grace ran out, unless asked; once the
  caller is lost, even an endless grace ends (after the default grace);
* an overdue timer is never left pending, and an overdue deadline is acted on
  before the event that arrived after it;
* at most one record, and the exit right after it iff the run is recorded;
  nothing after that;
* the record's exit status agrees with its reason;
* an illegal event, wherever it comes, raises and changes nothing;
* the signals the core promises before it is fed (``first_signals``, which an
  adapter sends the group ahead) are the first ones it then sends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.effects import Effect, Exit, SignalTree, Verdict, WriteRecord
from tether.core.events import (
    ActivitySeen,
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
from tether.core.machine import CALLER_LOST_GRACE_SECONDS, IllegalEvent, Phase, RunMachine
from tether.core.reasons import Reason, status_of

SETTINGS = settings(max_examples=300, deadline=None)

TERM = SignalTree("SIGTERM")
CONT = SignalTree("SIGCONT")
KILL = SignalTree("SIGKILL")


def _finite(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)


times = _finite(0.0, 50.0)
durations = st.one_of(st.just(0.0), _finite(0.0, 10.0))
gaps = st.one_of(st.just(0.0), _finite(0.0, 5.0))

KINDS = (
    "tick",
    "tick_at_timer",
    "tick_before_timer",
    "caller_lost",
    "cancel",
    "kill",
    "exit",
    "tree_emptied",
    "activity",
    "activity_at_timer",
)


@dataclass(frozen=True)
class Step:
    """One drawn step: how long after the previous event, and what kind of event."""

    gap: float
    kind: str
    returncode: int
    others_alive: bool


@dataclass(frozen=True)
class Scenario:
    """A whole run: the machine's settings, how the launch went, and what followed."""

    deadline_at: float | None
    grace: float
    settle: float
    launch_at: float
    launch_fails: bool
    steps: list[Step]
    idle: float | None = None


scenarios = st.builds(
    Scenario,
    deadline_at=st.one_of(st.none(), times),
    # Long and endless graces too: a lost caller must bound them.
    grace=st.one_of(durations, _finite(10.0, 40.0), st.just(math.inf)),
    settle=_finite(0.001, 10.0),
    launch_at=times,
    launch_fails=st.integers(min_value=0, max_value=9).map(lambda n: n == 0),
    steps=st.lists(
        st.builds(
            Step,
            gap=gaps,
            kind=st.sampled_from(KINDS),
            returncode=st.integers(min_value=-64, max_value=255),
            others_alive=st.booleans(),
        ),
        max_size=25,
    ),
    # The idle bound: none, or a bound the steps can reach and outlast.
    idle=st.one_of(st.none(), _finite(0.001, 8.0)),
)


@dataclass
class Trace:
    """What one run was fed and what it answered, step by step."""

    steps: list[tuple[Event, list[Effect]]] = field(default_factory=list)
    term_at: float | None = None
    kill_at: float | None = None
    caller_lost: bool = False
    #: When the run last did something, as the idle bound counts it (launch, activity).
    active_at: float | None = None

    def grace(self, scenario: Scenario) -> float:
        """The grace the machine must keep: the caller's loss bounds it."""
        if self.caller_lost:
            return min(scenario.grace, CALLER_LOST_GRACE_SECONDS)
        return scenario.grace

    @property
    def effects(self) -> list[Effect]:
        return [effect for _, effects in self.steps for effect in effects]

    @property
    def exited(self) -> bool:
        return any(isinstance(event, CommandExited) for event, _ in self.steps)

    @property
    def now(self) -> float:
        return self.steps[-1][0].now


def event_for(step: Step, machine: RunMachine, trace: Trace) -> Event:  # noqa: PLR0911 - one per kind
    """The legal event a step stands for, ``step.gap`` after the last one or at a timer."""
    now = trace.now + step.gap
    timer = machine.next_deadline
    match step.kind:
        case "tick_at_timer" if timer is not None:
            return Tick(now=max(trace.now, timer))
        case "tick_before_timer" if timer is not None:
            # The last representable moment before the timer: nothing may happen yet.
            return Tick(now=max(trace.now, math.nextafter(timer, -math.inf)))
        case "caller_lost":
            return CallerLost(now=now)
        case "cancel":
            return CancelRequested(now=now)
        case "kill":
            return KillRequested(now=now)
        case "exit" if not trace.exited:
            return CommandExited(
                now=now, returncode=step.returncode, others_alive=step.others_alive
            )
        case "tree_emptied" if trace.exited:
            return TreeEmptied(now=now)
        case "activity":
            return ActivitySeen(now=now)
        case "activity_at_timer" if timer is not None:
            # Seen at the wake-up for the idle bound: it happened before it, so it counts.
            return ActivitySeen(now=max(trace.now, timer))
        case _:
            return Tick(now=now)


def new_machine(scenario: Scenario) -> RunMachine:
    return RunMachine(
        deadline_at=scenario.deadline_at,
        grace_seconds=scenario.grace,
        settle_seconds=scenario.settle,
        idle_seconds=scenario.idle,
    )


def first_event(scenario: Scenario) -> Event:
    if scenario.launch_fails:
        return LaunchFailed(now=scenario.launch_at, errno=2, message="not found")
    return Launched(now=scenario.launch_at, pid=1234)


def drive(scenario: Scenario) -> tuple[RunMachine, Trace]:
    """Run a scenario, checking the invariants that hold after every single step."""
    machine = new_machine(scenario)
    trace = Trace()
    feed(machine, first_event(scenario), trace, scenario)
    for step in scenario.steps:
        feed(machine, event_for(step, machine, trace), trace, scenario)
    return machine, trace


def feed(machine: RunMachine, event: Event, trace: Trace, scenario: Scenario) -> None:
    before = machine.phase
    promised = machine.first_signals(event)

    effects = machine.feed(event)
    # What the core promised an adapter may send ahead is where its answer starts.
    sent = [effect.signal for effect in effects if isinstance(effect, SignalTree)]
    assert sent[: len(promised)] == list(promised)
    if promised:
        assert before is Phase.WATCHING
    trace.steps.append((event, effects))
    idle_at = track_activity(before, machine, event, trace, scenario)
    if isinstance(event, CallerLost) and before in (Phase.WATCHING, Phase.TERMINATING):
        trace.caller_lost = True

    for effect in effects:
        if effect == TERM:
            trace.term_at = event.now
        elif effect == KILL:
            trace.kill_at = event.now
    if before is Phase.RECORDED:
        assert effects == [], "no effect after recorded"
        assert machine.phase is Phase.RECORDED
    # An overdue timer is never left pending, and each phase waits for its own timer.
    assert machine.next_deadline is None or machine.next_deadline > event.now
    match machine.phase:
        case Phase.WATCHING:
            timers = [scenario.deadline_at]
            if scenario.idle is not None:
                assert trace.active_at is not None
                timers.append(trace.active_at + scenario.idle)
            known = [timer for timer in timers if timer is not None]
            assert machine.next_deadline == (min(known) if known else None)
        case Phase.TERMINATING:
            assert trace.term_at is not None
            grace_over = trace.term_at + trace.grace(scenario)
            assert machine.next_deadline == (None if math.isinf(grace_over) else grace_over)
        case Phase.KILLING:
            assert trace.kill_at is not None
            assert machine.next_deadline == trace.kill_at + scenario.settle
        case Phase.RECORDED:
            assert machine.next_deadline is None
        case Phase.LAUNCHING:
            raise AssertionError("a fed machine is never launching")
    check_overdue(
        before, event, effects=effects, machine=machine, idle_at=idle_at, scenario=scenario
    )


def track_activity(
    before: Phase, machine: RunMachine, event: Event, trace: Trace, scenario: Scenario
) -> float | None:
    """Keep the trace's last activity; return when the idle bound ran out before ``event``."""
    idle_at = None
    if before is Phase.WATCHING and scenario.idle is not None:
        assert trace.active_at is not None
        idle_at = trace.active_at + scenario.idle
    seen = isinstance(event, ActivitySeen) and before is Phase.WATCHING
    if machine.phase is Phase.WATCHING and (isinstance(event, Launched) or seen):
        trace.active_at = event.now
    return idle_at


def check_overdue(
    before: Phase,
    event: Event,
    *,
    effects: list[Effect],
    machine: RunMachine,
    idle_at: float | None,
    scenario: Scenario,
) -> None:
    # An overdue deadline (or idle bound) is acted on first, whatever the event was; activity
    # is the one event that comes before the idle bound (it happened before it was seen).
    if isinstance(event, ActivitySeen):
        idle_at = None
    deadline = scenario.deadline_at
    overdue_deadline = deadline is not None and event.now >= deadline
    overdue_idle = idle_at is not None and event.now >= idle_at
    if (
        before in (Phase.LAUNCHING, Phase.WATCHING)
        and not isinstance(event, LaunchFailed)
        and (overdue_deadline or overdue_idle)
    ):
        assert effects[:2] == [TERM, CONT]
        idle_first = overdue_idle and (deadline is None or (idle_at or 0) < deadline)
        if not overdue_deadline or idle_first:
            assert machine.reason is Reason.IDLE_EXCEEDED
        else:
            assert machine.reason is Reason.DEADLINE_EXCEEDED
    # The idle bound never stops a run early, nor one that has none.
    if before is Phase.WATCHING and machine.reason is Reason.IDLE_EXCEEDED:
        assert idle_at is not None
        assert event.now >= idle_at


@SETTINGS
@given(scenarios)
def test_signals_come_in_order_and_never_early(scenario: Scenario) -> None:
    _, trace = drive(scenario)
    effects = trace.effects

    assert effects.count(TERM) <= 1
    assert effects.count(KILL) <= 1
    assert effects.count(CONT) == effects.count(TERM)
    if TERM in effects:
        # SIGCONT right after SIGTERM, so a stopped process can act on it.
        assert effects[effects.index(TERM) + 1] == CONT
    if KILL not in effects:
        return
    kill_step = next(i for i, (_, answered) in enumerate(trace.steps) if KILL in answered)
    asked = any(isinstance(event, KillRequested) for event, _ in trace.steps[: kill_step + 1])
    if not asked:
        # Nobody asked to kill: TERM went first and the whole grace ran out.
        assert TERM in effects[: effects.index(KILL)]
        assert trace.term_at is not None
        assert trace.kill_at is not None
        assert trace.kill_at >= trace.term_at + trace.grace(scenario)


@SETTINGS
@given(scenarios)
def test_exactly_one_record_then_the_exit_then_nothing(scenario: Scenario) -> None:
    machine, trace = drive(scenario)
    effects = trace.effects
    writes = [i for i, e in enumerate(effects) if isinstance(e, WriteRecord)]
    exits = [i for i, e in enumerate(effects) if isinstance(e, Exit)]

    assert len(writes) <= 1
    assert len(exits) == (1 if machine.phase is Phase.RECORDED else 0)
    assert len(writes) == len(exits)
    if exits:
        assert exits[0] == writes[0] + 1 == len(effects) - 1, "the exit is last, after the record"
        write, exit_ = effects[writes[0]], effects[exits[0]]
        assert isinstance(write, WriteRecord)
        assert isinstance(exit_, Exit)
        assert exit_.status == write.verdict.exit_status
        assert machine.reason is write.verdict.reason


@SETTINGS
@given(scenarios)
def test_the_record_agrees_with_itself_and_with_the_run(scenario: Scenario) -> None:
    machine, trace = drive(scenario)
    records = [
        (index, effect.verdict)
        for index, (_, effects) in enumerate(trace.steps)
        for effect in effects
        if isinstance(effect, WriteRecord)
    ]
    if not records:
        assert machine.phase is not Phase.RECORDED
        return
    [(index, verdict)] = records
    fed = [event for event, _ in trace.steps[: index + 1]]

    check_status(verdict)
    assert verdict.finished_at == fed[-1].now
    assert verdict.escalated_to_sigkill == (trace.kill_at is not None)
    stops = [t for t in (trace.term_at, trace.kill_at) if t is not None]
    assert verdict.stop_started_at == min(stops, default=None)
    if verdict.shutdown_seconds is not None:
        assert verdict.shutdown_seconds >= 0
    earlier = [event for event in fed[:-1] if isinstance(event, CommandExited)]
    last = fed[-1]
    if earlier:
        assert verdict.returncode == earlier[0].returncode
    elif isinstance(last, CommandExited) and not verdict.unkillable:
        assert verdict.returncode == last.returncode
    elif isinstance(last, CommandExited):
        # Unkillable in the step that reported the exit: the settle bound was already over
        # (the exit came too late to count).
        assert verdict.returncode in (None, last.returncode)
    else:
        # No exit known when recorded: the launch failed, or the tree outlived SIGKILL and
        # the settle bound (an exit reported at or after that bound comes too late: timers
        # fire before the event that arrived after them).
        assert verdict.returncode is None
        assert verdict.reason is Reason.LAUNCH_FAILED or verdict.unkillable
    if verdict.unkillable:
        assert verdict.escalated_to_sigkill


def check_status(verdict: Verdict) -> None:
    match verdict.reason:
        case Reason.DEADLINE_EXCEEDED:
            assert verdict.exit_status == 124
            assert verdict.idle_seconds is None
        case Reason.IDLE_EXCEEDED:
            assert verdict.exit_status == 124
            assert verdict.idle_seconds is not None
        case Reason.CANCELLED | Reason.PARENT_LOST:
            assert verdict.exit_status == 130
        case Reason.COMPLETED:
            assert verdict.returncode is not None
            assert verdict.exit_status == status_of(verdict.returncode)
        case Reason.LAUNCH_FAILED:
            assert verdict.exit_status in (125, 126, 127)
            assert verdict.returncode is None
            assert verdict.stop_started_at is None
        case _:
            raise AssertionError(f"a supervisor never records {verdict.reason}")


ILLEGAL_KINDS = ("backwards", "second_launch", "exit_twice", "tree_before_exit")


def illegal_event(kind: str, trace: Trace) -> Event | None:
    """An event that cannot happen after ``trace`` (``None`` if this kind could)."""
    now = trace.now
    match kind:
        case "backwards":
            return Tick(now=math.nextafter(now, -math.inf))
        case "second_launch":
            return Launched(now=now + 1.0, pid=99)
        case "exit_twice" if trace.exited:
            # Later than every timer: it must not fire them either.
            return CommandExited(now=now + 1000.0, returncode=0, others_alive=False)
        case "tree_before_exit" if not trace.exited:
            return TreeEmptied(now=now + 1000.0)
        case _:
            return None


@SETTINGS
@given(scenarios, st.integers(min_value=0, max_value=25), st.sampled_from(ILLEGAL_KINDS))
def test_an_illegal_event_anywhere_changes_nothing(scenario: Scenario, at: int, kind: str) -> None:
    _, reference = drive(scenario)
    at = min(at, len(reference.steps) - 1)
    machine = new_machine(scenario)
    for event, _ in reference.steps[: at + 1]:
        machine.feed(event)
    illegal = illegal_event(kind, Trace(steps=reference.steps[: at + 1]))
    if illegal is None:
        return
    state = (machine.phase, machine.next_deadline, machine.reason)

    try:
        machine.feed(illegal)
    except IllegalEvent:
        pass
    else:
        raise AssertionError(f"{illegal} was accepted in {state[0]}")

    assert (machine.phase, machine.next_deadline, machine.reason) == state
    # And the rest of the run goes exactly as if the illegal event had never come.
    for event, effects in reference.steps[at + 1 :]:
        assert machine.feed(event) == effects


@SETTINGS
@given(scenarios)
def test_the_same_events_give_the_same_effects(scenario: Scenario) -> None:
    """The core is a function of its inputs: no hidden clock, no randomness, no global state."""
    _, first = drive(scenario)
    machine = new_machine(scenario)
    assert [machine.feed(event) for event, _ in first.steps] == [e for _, e in first.steps]


def test_scenarios_reach_every_phase_and_reason() -> None:
    """Guard the generator itself: a property that never sees a SIGKILL proves little."""
    seen_phases: set[Phase] = set()
    seen_reasons: set[Reason] = set()
    seen_unkillable: list[bool] = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(scenarios)
    def collect(scenario: Scenario) -> None:
        machine, trace = drive(scenario)
        seen_phases.update(
            p
            for p in Phase
            if p is machine.phase or (p is Phase.KILLING and trace.kill_at is not None)
        )
        if machine.reason is not None:
            seen_reasons.add(machine.reason)
        seen_unkillable.extend(
            e.verdict.unkillable for e in trace.effects if isinstance(e, WriteRecord)
        )

    collect()
    assert seen_phases >= {Phase.WATCHING, Phase.TERMINATING, Phase.KILLING, Phase.RECORDED}
    assert seen_reasons >= {r for r in Reason if r is not Reason.SUPERVISOR_LOST}
    assert any(seen_unkillable)

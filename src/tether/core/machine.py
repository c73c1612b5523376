"""The core: one run's life as a table of transitions (:data:`_TABLE`), events in and effects
out; why it is built so: docs/architecture.md, "The core is pure".
"""

from __future__ import annotations

import math
from collections import deque
from enum import StrEnum

from transitions import Machine

from tether.core.effects import Effect, Exit, SignalName, SignalTree, Verdict, WriteRecord
from tether.core.events import (
    ActivitySeen,
    CallerLost,
    CancelRequested,
    CommandExited,
    Event,
    KillRequested,
    Launched,
    LaunchFailed,
    ResumeRequested,
    SignalRequested,
    SuspendRequested,
    Tick,
    TimeOutRequested,
    TreeEmptied,
)
from tether.core.first_signals import first_signals, stop_signals
from tether.core.reasons import (
    CANNOT_EXECUTE,
    DEADLINE_EXCEEDED,
    NOT_FOUND,
    STOPPED,
    TETHER_FAILED,
    Reason,
    status_of,
)
from tether.core.spec import DEFAULT_GRACE_SECONDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from transitions.core import TransitionConfigDict

#: How long the tree may take to go after SIGKILL before the run is recorded anyway
#: (``unkillable``): only a process stuck in the kernel (uninterruptible I/O) takes this long.
DEFAULT_SETTLE_SECONDS: Final = 5.0

#: The longest grace once the caller is gone: even an endless one (``timeout`` without
#: ``-k``) ends then, counted from the first stop signal, so the command cannot outlive it.
CALLER_LOST_GRACE_SECONDS: Final = DEFAULT_GRACE_SECONDS

#: errno.ENOENT, without importing a module for one number.
_ENOENT: Final = 2


class Phase(StrEnum):
    """Where one run is in its life."""

    LAUNCHING = "launching"
    WATCHING = "watching"
    TERMINATING = "terminating"
    KILLING = "killing"
    RECORDED = "recorded"


class IllegalEvent(RuntimeError):
    """An event that cannot happen in the run's current phase; nothing was changed."""


_TRIGGER: Final[dict[type[Event], str]] = {
    Launched: "launched",
    LaunchFailed: "launch_failed",
    CallerLost: "caller_lost",
    CancelRequested: "cancel",
    KillRequested: "kill",
    CommandExited: "command_exited",
    TreeEmptied: "tree_emptied",
    Tick: "tick",
    TimeOutRequested: "time_out",
    SignalRequested: "pass_on",
    SuspendRequested: "suspend",
    ResumeRequested: "resume",
    ActivitySeen: "activity",
}

_W, _T, _K, _R = Phase.WATCHING, Phase.TERMINATING, Phase.KILLING, Phase.RECORDED


def _row(
    trigger: str,
    source: Phase | list[Phase],
    dest: Phase | None,
    after: str | None = None,
    *,
    when: str | None = None,
    before: str | None = None,
) -> TransitionConfigDict:
    row: TransitionConfigDict = {"trigger": trigger, "source": source, "dest": dest}
    for key, value in (("after", after), ("conditions", when), ("before", before)):
        if value is not None:
            row[key] = value  # type: ignore[literal-required]
    return row


# For one trigger, rows are tried in order: conditional rows come before their
# fallback. A row with dest None is an internal transition, a deliberate no-op
# for an event that is late but harmless (a cancel while already stopping).
_TABLE: Final[list[TransitionConfigDict]] = [
    _row("launched", Phase.LAUNCHING, _W, "arm_deadline"),
    _row("launch_failed", Phase.LAUNCHING, _R, "finish_launch_failed"),
    # Timers: the idle bound and the deadline while watching (whichever came
    # first), the grace while terminating, the settle bound while killing.
    _row("tick", _W, _T, "stop_for_idle", when="idle_expired"),
    _row("tick", _W, _T, "stop_for_deadline", when="timer_expired"),
    _row("tick", _T, _K, "escalate", when="timer_expired"),
    _row("tick", _K, _R, "finish_unkillable", when="timer_expired"),
    _row("tick", [_W, _T, _K, _R], None),
    # Requests from outside.
    _row("cancel", _W, _T, "stop_for_cancel"),
    _row("cancel", [_T, _K, _R], None),
    _row("caller_lost", _W, _T, "stop_for_caller_lost"),
    # Already stopping, with an endless grace (timeout without -k): the caller's
    # death still bounds it, or the command could outlive its caller.
    _row("caller_lost", _T, None, "bound_the_grace"),
    _row("caller_lost", [_K, _R], None),
    _row("kill", _W, _K, "kill_now"),
    _row("kill", _T, _K, "escalate"),
    _row("kill", [_K, _R], None),
    # timeout's SIGALRM from outside: the deadline, now.
    _row("time_out", _W, _T, "stop_for_deadline"),
    _row("time_out", [_T, _K, _R], None),
    # A signal passed on (timeout): the command's to act on. With a finite grace
    # (-k), GNU starts the KILL timer at the first signal sent, whatever it was.
    _row("pass_on", _W, _T, "pass_on_and_arm_kill", when="grace_is_finite"),
    _row("pass_on", [_W, _T], None, "pass_signal_on"),
    _row("pass_on", [_K, _R], None),
    # Job control: the tree stops and continues with its caller; timers keep running.
    _row("suspend", [_W, _T], None, "suspend_tree"),
    _row("resume", [_W, _T], None, "resume_tree"),
    _row("suspend", [_K, _R], None),
    _row("resume", [_K, _R], None),
    # The command's own exit, and the end of whatever it left behind.
    _row("command_exited", [_W, _T, _K], _R, "finish", when="tree_is_empty", before="note_exit"),
    _row("command_exited", _W, _T, "stop_stragglers", before="note_exit"),
    _row("command_exited", [_T, _K], None, "note_exit"),
    _row("command_exited", _R, None, "note_exit"),
    _row("tree_emptied", [_T, _K], _R, "finish"),
    _row("tree_emptied", _R, None),
    # Output or CPU time: the idle time counts again (only while watching it matters).
    _row("activity", _W, None, "note_activity"),
    _row("activity", [_T, _K, _R], None),
]


class _Run:
    """The model ``transitions`` drives: the run's facts and the effects of the current step.
    No method may share a trigger's name (``transitions`` would load :mod:`inspect` to warn)."""

    def __init__(
        self,
        *,
        deadline_at: float | None,
        grace_seconds: float,
        settle_seconds: float,
        stop_signal: SignalName = "SIGTERM",
        idle_seconds: float | None = None,
    ) -> None:
        self.deadline_at = deadline_at
        self.idle_seconds = idle_seconds
        #: When the run last did something (its launch, then each ActivitySeen).
        self.active_at: float | None = None
        self.idle_for: float | None = None
        #: Set while an ActivitySeen is handled: what it reports came before it was
        #: seen, so the idle bound waits for it (the deadline does not).
        self.idle_held = False
        self.grace_seconds = grace_seconds
        self.settle_seconds = settle_seconds
        self.stop_signal = stop_signal
        self.state = Phase.LAUNCHING
        self.now = -math.inf
        self.event: Event | None = None
        self.effects: list[Effect] = []
        self.reason: Reason | None = None
        self.timer_at: float | None = None
        self.returncode: int | None = None
        self.exited = False
        self.escalated = False
        self.stop_started_at: float | None = None

    def timer_expired(self) -> bool:
        return self.timer_at is not None and self.now >= self.timer_at

    def idle_at(self) -> float | None:
        """When the idle bound runs out, while watching a run that has one."""
        if self.idle_seconds is None or self.active_at is None or self.state is not _W:
            return None
        return None if self.idle_held else self.active_at + self.idle_seconds

    def idle_expired(self) -> bool:
        """The idle bound ran out, and before the deadline did (the first to pass wins)."""
        idle_at = self.idle_at()
        if idle_at is None or self.now < idle_at:
            return False
        return self.timer_at is None or idle_at < self.timer_at or self.now < self.timer_at

    def due(self) -> bool:
        """Some timer ran out: the deadline, the grace, the settle bound or the idle bound."""
        idle_at = self.idle_at()
        return self.timer_expired() or (idle_at is not None and self.now >= idle_at)

    def grace_is_finite(self) -> bool:
        return not math.isinf(self.grace_seconds)

    def tree_is_empty(self) -> bool:
        return isinstance(self.event, CommandExited) and not self.event.others_alive

    # -- callbacks: record facts, append effects, never fail ---------------

    def arm_deadline(self) -> None:
        self.timer_at = self.deadline_at
        self.active_at = self.now

    def note_activity(self) -> None:
        # Never backwards: an event is never older than the last one (checked on feed).
        self.active_at = self.now

    def stop_for_idle(self) -> None:
        assert self.active_at is not None
        self.idle_for = self.now - self.active_at
        self._terminate(Reason.IDLE_EXCEEDED)

    def note_exit(self) -> None:
        assert isinstance(self.event, CommandExited)
        self.exited = True
        self.returncode = self.event.returncode

    def stop_for_deadline(self) -> None:
        self._terminate(Reason.DEADLINE_EXCEEDED)

    def stop_for_cancel(self) -> None:
        self._terminate(Reason.CANCELLED)

    def stop_for_caller_lost(self) -> None:
        self._terminate(Reason.PARENT_LOST)
        self.bound_the_grace()

    def bound_the_grace(self) -> None:
        assert self.stop_started_at is not None
        if self.reason is None:  # stopping for a signal passed on: the caller went meanwhile
            self.reason = Reason.PARENT_LOST
        bounded = self.stop_started_at + min(self.grace_seconds, CALLER_LOST_GRACE_SECONDS)
        if self.timer_at is None or bounded < self.timer_at:
            self.timer_at = max(bounded, self.now)

    def stop_stragglers(self) -> None:
        self._terminate(Reason.COMPLETED)

    def pass_signal_on(self) -> None:
        event = self.event
        assert isinstance(event, SignalRequested)
        self._signal(event.signal)
        if event.signal not in ("SIGKILL", "SIGCONT"):
            self._signal("SIGCONT")  # as GNU: a stopped command can act on it

    def pass_on_and_arm_kill(self) -> None:
        """Pass the signal on, then the grace, then KILL (``timeout -k``); the reason stays open."""
        self.stop_started_at = self.now
        self.pass_signal_on()
        self.timer_at = self.now + self.grace_seconds

    def suspend_tree(self) -> None:
        self._signal("SIGSTOP")

    def resume_tree(self) -> None:
        self._signal("SIGCONT")

    def kill_now(self) -> None:
        self.reason = Reason.CANCELLED
        self.stop_started_at = self.now
        self.escalate()

    def escalate(self) -> None:
        if self.reason is None:  # the KILL after a signal passed on (-k): time ran out
            self.reason = Reason.DEADLINE_EXCEEDED
        self.escalated = True
        self._signal("SIGKILL")
        self.timer_at = self.now + self.settle_seconds

    def finish(self) -> None:
        self._record(unkillable=False)

    def finish_unkillable(self) -> None:
        self._record(unkillable=True)

    def finish_launch_failed(self) -> None:
        event = self.event
        assert isinstance(event, LaunchFailed)
        if event.stage == "setup":
            status = TETHER_FAILED
        else:
            status = NOT_FOUND if event.errno == _ENOENT else CANNOT_EXECUTE
        self.reason = Reason.LAUNCH_FAILED
        verdict = Verdict(
            reason=Reason.LAUNCH_FAILED,
            exit_status=status,
            finished_at=self.now,
            launch_errno=event.errno,
            launch_error=event.message,
        )
        self.timer_at = None
        self.effects += [WriteRecord(verdict), Exit(status)]

    def _terminate(self, reason: Reason) -> None:
        self.reason = reason
        self.stop_started_at = self.now
        for name in stop_signals(self.stop_signal):
            self._signal(name)
        self.timer_at = self.now + self.grace_seconds

    def _signal(self, name: SignalName) -> None:
        self.effects.append(SignalTree(name))

    def _record(self, *, unkillable: bool) -> None:
        reason = self.reason or Reason.COMPLETED
        verdict = Verdict(
            reason=reason,
            exit_status=self._exit_status(reason),
            returncode=self.returncode,
            escalated_to_sigkill=self.escalated,
            stop_started_at=self.stop_started_at,
            finished_at=self.now,
            unkillable=unkillable,
            idle_seconds=self.idle_for if reason is Reason.IDLE_EXCEEDED else None,
        )
        self.reason = reason
        self.timer_at = None
        self.effects += [WriteRecord(verdict), Exit(verdict.exit_status)]

    def _exit_status(self, reason: Reason) -> int:
        if reason in (Reason.DEADLINE_EXCEEDED, Reason.IDLE_EXCEEDED):
            return DEADLINE_EXCEEDED
        if reason is Reason.COMPLETED:
            return TETHER_FAILED if self.returncode is None else status_of(self.returncode)
        return STOPPED


def _build_table() -> Machine:
    """The table, interpreted once per process (a zygote's forks find it built); no model of
    its own: each run's is passed to the trigger, its callbacks looked up by name."""
    return Machine(
        model=[],
        states=Phase,
        transitions=_TABLE,
        initial=Phase.LAUNCHING,
        auto_transitions=False,
        queued=True,
    )


_BUILT: Final = _build_table()


def _interpreter() -> Machine:
    """One run's copy of the built table, with its own queue and events (two runs, two
    threads); the states and transitions they share never change after the build."""
    machine: Machine = Machine.__new__(Machine)
    machine.__dict__.update(_BUILT.__dict__)
    machine._transition_queue = deque()
    events = {}
    for name, built in _BUILT.events.items():
        event = type(built).__new__(type(built))
        event.__dict__.update(built.__dict__)
        event.machine = machine
        events[name] = event
    machine.events = events
    return machine


class RunMachine:
    """One run's policy: :meth:`feed` it events, carry out the effects it returns.
    ``deadline_at`` is monotonic (``None``: none); ``grace_seconds`` may be ``math.inf``."""

    def __init__(
        self,
        *,
        deadline_at: float | None,
        grace_seconds: float,
        settle_seconds: float = DEFAULT_SETTLE_SECONDS,
        stop_signal: SignalName = "SIGTERM",
        idle_seconds: float | None = None,
    ) -> None:
        # Written so that NaN fails too: a NaN timer never expires (every comparison is false).
        if not (grace_seconds >= 0 and settle_seconds > 0):
            raise ValueError("grace must be a number >= 0 and settle a number > 0")
        if deadline_at is not None and math.isnan(deadline_at):
            raise ValueError("deadline_at must be a time, not NaN")
        if math.isinf(settle_seconds):
            raise ValueError("settle must be finite: the record must be written")
        if idle_seconds is not None and not (0 < idle_seconds < math.inf):
            raise ValueError("idle must be a finite number of seconds > 0")
        self._run = _Run(
            deadline_at=deadline_at,
            grace_seconds=grace_seconds,
            settle_seconds=settle_seconds,
            stop_signal=stop_signal,
            idle_seconds=idle_seconds,
        )
        self._machine = _interpreter()

    @property
    def phase(self) -> Phase:
        """The run's current phase."""
        return self._run.state

    @property
    def next_deadline(self) -> float | None:
        """When a :class:`Tick` is due: the sooner of :attr:`next_timer` and the idle bound."""
        timer = self.next_timer
        idle_at = self._run.idle_at()
        if idle_at is None:
            return timer
        return idle_at if timer is None else min(timer, idle_at)

    @property
    def next_timer(self) -> float | None:
        """:attr:`next_deadline` without the idle bound: the deadline, grace or settle timer."""
        timer = self._run.timer_at
        return None if timer is None or math.isinf(timer) else timer

    @property
    def watches_idle(self) -> bool:
        """Whether the run has an idle bound that still counts (it is watching)."""
        return self._run.idle_at() is not None

    @property
    def reason(self) -> Reason | None:
        """Why the run is ending, once that is decided."""
        return self._run.reason

    def first_signals(self, event: Event) -> tuple[SignalName, ...]:
        """What :meth:`feed` would certainly send first for ``event``; changes nothing."""
        run = self._run
        if run.state is not Phase.WATCHING or event.now < run.now:
            return ()
        idle_at = None if isinstance(event, ActivitySeen) else run.idle_at()
        overdue = (run.timer_at is not None and event.now >= run.timer_at) or (
            idle_at is not None and event.now >= idle_at
        )
        trigger = _TRIGGER[type(event)]
        return first_signals(trigger, overdue=overdue, stop_signal=run.stop_signal)

    def feed(self, event: Event) -> list[Effect]:
        """Advance the run by one event and return the effects to carry out, in order."""
        self._check_legal(event)
        run = self._run
        run.now = event.now
        effects: list[Effect] = []
        # Overdue timers first: the event happened after them. Activity is the
        # exception for the idle bound: it is seen at a wake-up (a CPU sample, a
        # byte from the caller), and happened before it.
        run.idle_held = isinstance(event, ActivitySeen)
        try:
            effects += self._expire_timers()
            if not (isinstance(event, Tick) and effects):
                run.event = event
                self._machine.events[_TRIGGER[type(event)]].trigger(run)
                effects += self._take_effects()
        finally:
            run.idle_held = False
        # The event may itself have armed an overdue timer (a launch after the
        # deadline, a grace of zero).
        effects += self._expire_timers()
        run.event = None
        return effects

    def _expire_timers(self) -> list[Effect]:
        effects: list[Effect] = []
        run = self._run
        # Each expiry moves the phase strictly forward, so this ends within three rounds.
        while run.due():
            run.event = Tick(run.now)
            self._machine.events["tick"].trigger(run)
            effects += self._take_effects()
        return effects

    def _take_effects(self) -> list[Effect]:
        effects, self._run.effects = self._run.effects, []
        return effects

    def _check_legal(self, event: Event) -> None:
        run = self._run
        launching = run.state is Phase.LAUNCHING
        if event.now < run.now:
            raise IllegalEvent(f"time went backwards: {event.now} < {run.now}")
        if isinstance(event, Launched | LaunchFailed) != launching:
            raise IllegalEvent(f"{type(event).__name__} while {run.state}")
        if isinstance(event, CommandExited) and run.exited:
            raise IllegalEvent("the command exited twice")
        if isinstance(event, TreeEmptied) and not run.exited:
            raise IllegalEvent("the tree emptied before the command exited")

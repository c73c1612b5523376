"""The loop: readiness into events for the core, the core's effects into system calls.

One ``poll()`` blocks on the lifeline, a pidfd on the command and the signal wakeup fd,
with the core's next deadline as its timeout: no polling. What wakes it becomes events
stamped with one ``time.monotonic()`` reading, fed to
:class:`~tether.core.machine.RunMachine`, whose effects are carried out in order. It acts
first, then tells: a stop the core will certainly ask for reaches the group before it is
fed (:meth:`RunMachine.first_signals`), and what the loop says in a turn is written once
the turn has acted. Imported only once the command runs. Why: ``docs/architecture.md``
("The adapter is thin").
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time

from tether.supervisor.deferred import deferred

# inspect: for a check tether's model never runs (tether.core.machine._Run); traceback
# (about 5 ms): for exceptions no logger here formats. Deferred before the core loads.
with deferred("inspect", "traceback"):
    import transitions  # noqa: F401

import logging  # loaded by transitions, with its traceback deferred

from tether.core.effects import Effect, Exit, SignalTree, WriteRecord
from tether.core.events import (
    ActivitySeen,
    CancelRequested,
    CommandExited,
    Event,
    Launched,
    LaunchFailed,
    Tick,
    TreeEmptied,
)
from tether.core.machine import Phase, RunMachine
from tether.core.reasons import TETHER_FAILED, Reason
from tether.shared.lifeline import ALL
from tether.shared.protocol import Signalled, StatusWriter
from tether.shared.signals import signal_number
from tether.supervisor import last_resort
from tether.supervisor.evidence import Evidence
from tether.supervisor.finish import Remains, finish_off
from tether.supervisor.lifeline import LifelineReader
from tether.supervisor.process_tree import ProcessTree
from tether.supervisor.watch import Watch, wait_bound

# transitions logs every step through stdlib logging; the story goes to the event log. Set as
# the loop loads (a zygote's supervisors find it set: made per run, the logger cost each one
# about 0.1 ms), and each level's answer asked once here for the loggers a step logs through.
logging.getLogger("transitions").setLevel(logging.WARNING)
for _level in (logging.DEBUG, logging.INFO):
    logging.getLogger("transitions.core").isEnabledFor(_level)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.core.effects import Verdict
    from tether.core.spec import RunSpec
    from tether.shared.lifeline import Vocabulary
    from tether.supervisor.activity import ActivityProbe
    from tether.supervisor.launch import LaunchAttempt


__all__ = ["rehearse", "supervise"]


class Supervision:
    """One supervised command, from launch to record."""

    def __init__(
        self,
        spec: RunSpec,
        attempt: LaunchAttempt,
        *,
        lifeline: int | None,
        status: StatusWriter,
        on_message: Callable[[str], None],
        vocabulary: Vocabulary = ALL,
    ) -> None:
        self.spec = spec
        self.status = status
        self.on_message = on_message
        self.wakeup = attempt.wakeup
        self.sentry = attempt.sentry
        #: Signals the group got ahead of the core's decision (sentry, or :meth:`_send_ahead`).
        self.sent_ahead: dict[int, float] = {}
        self.watch = Watch()
        self.command = command = attempt.command
        self.evidence = Evidence(spec)
        self.tree: ProcessTree | None = None
        if command is not None:
            self.tree = ProcessTree(
                leader=command.pid,
                pgid=command.pgid,
                pidfd=command.pidfd,
                cgroup=command.cgroup,
                reserve=attempt.reserve,
                report=self.evidence.report,
                own_group=command.own_group,
            )
        self.lifeline = LifelineReader(lifeline, vocabulary)
        self.machine = RunMachine(
            deadline_at=spec.deadline_at,
            grace_seconds=spec.grace_seconds,
            stop_signal=spec.stop_signal,
            idle_seconds=spec.idle_seconds,
        )
        #: What tells the core whether the tree did anything (idle bound only; else ``None``).
        self.probe: ActivityProbe | None = None
        if spec.idle_seconds is not None and self.tree is not None:
            from tether.supervisor.activity import ActivityProbe

            self.probe = ActivityProbe(self.tree)
        self.next_look = 0.0
        #: The signals sent since the tree began to stop: what one found late gets.
        self.stopping_with: list[int] = []
        self.stragglers = 0
        self.exited = False
        self.emptied = False
        self.exit_status = TETHER_FAILED

    @staticmethod
    def first_event(attempt: LaunchAttempt) -> Event:
        """The event that says how the launch went, at the time it happened."""
        failure = attempt.failure
        if failure is not None:
            return LaunchFailed(attempt.at, failure.errno, failure.message, failure.stage)
        assert attempt.command is not None
        return Launched(attempt.at, attempt.command.pid)

    def run(self, first: Event) -> int:
        """Feed events until the run is recorded; return the exit status."""
        self.evidence.open_log(first, self.tree)
        if self.wakeup.read_fd >= 0:  # none when the launch failed for want of a descriptor
            self.watch.register(self.wakeup.read_fd, "signal")
        if self.lifeline.fd is not None:
            self.watch.register(self.lifeline.fd, "lifeline")
        if self.tree is not None:
            self.watch.register(self.tree.pidfd, "exit")
        self._take_over(first)
        self._told()
        if self.probe is not None:
            self._look(time.monotonic(), first=True)
        while not self._recorded():
            deadline = self._wake_at()
            timeout = None if deadline is None else wait_bound(deadline - time.monotonic())
            ready = self.watch.wait(timeout)
            now = time.monotonic()
            events = self._look(now) + self._translate(ready, now) or [Tick(now)]
            self._send_ahead(events[0])
            for event in events:
                self._feed(event)
                if self._recorded():
                    break
            self._told()
        self.watch.close()
        self.evidence.log.close()
        return self.exit_status

    def _wake_at(self) -> float | None:
        """When to wake: the core's next timer; with an idle bound, no sooner than
        :data:`~tether.supervisor.activity.SAMPLE_SECONDS` after the last look."""
        idle_at = self.machine.next_deadline
        if self.probe is None or not self.machine.watches_idle or idle_at is None:
            return idle_at
        look_at = max(self.next_look, idle_at)
        timer = self.machine.next_timer
        return look_at if timer is None else min(timer, look_at)

    def _look(self, now: float, *, first: bool = False) -> list[Event]:
        """Look at the tree if a look is due (the idle bound's end); ActivitySeen if it moved."""
        probe = self.probe
        if probe is None or not self.machine.watches_idle:
            return []
        due = self.machine.next_deadline
        if not first and now < self.next_look and (due is None or now < due):
            return []
        from tether.supervisor.activity import SAMPLE_SECONDS

        self.next_look = now + SAMPLE_SECONDS
        return [ActivitySeen(now)] if probe.changed() else []

    def _take_over(self, first: Event) -> None:
        """Take the watch over from the sentry and replay what it saw and did, at the times it
        happened: the core decides what the sentry did, and the grace counts from the signal the
        group really got."""
        handover = None if self.sentry is None else self.sentry.stand_down()
        if handover is None or handover.acted_at is None:
            self._feed(first.replace(now=time.monotonic()))
            now = time.monotonic()
        else:
            self._feed(first)
            now = handover.acted_at
            self.sent_ahead = {number: at for number, at in reversed(handover.sent)}
            if self.tree is not None:
                self.tree.stopped.update(handover.walked - {self.tree.leader})
        if handover is None:
            return
        self.wakeup.pending += handover.signals
        self.lifeline.take_over(bytes(handover.lifeline), handover.lifeline_closed)
        sources = set()
        if handover.signals:
            sources.add("signal")
        if handover.lifeline or handover.lifeline_closed:
            sources.add("lifeline")
        events = self._translate(sources, now)
        if handover.acted_at is not None:
            events.append(Tick(now))  # an overdue deadline, if that is what the sentry saw
        for event in events:
            if self._recorded():
                break
            self._feed(event)

    def _recorded(self) -> bool:
        return self.machine.phase is Phase.RECORDED

    def _translate(self, sources: set[str], now: float) -> list[Event]:
        events: list[Event] = []
        tree_changed = "exit" in sources
        if "signal" in sources:
            for number in self.wakeup.drain():
                if number == signal.SIGCHLD:
                    tree_changed = True
                else:
                    self._tell("signal_received", now, signal=signal.Signals(number).name)
                    events.append(CancelRequested(now))
        if "lifeline" in sources:
            events += self._read_lifeline(now)
        if tree_changed:
            events += self._observe_tree(now)
        return events

    def _read_lifeline(self, now: float) -> list[Event]:
        """The requests the caller wrote since the last turn, then ``CallerLost`` at end of file."""
        events, closed = self.lifeline.read(now, self._tell)
        if closed:
            assert self.lifeline.fd is not None
            self.watch.unregister(self.lifeline.fd)
        return events

    def _observe_tree(self, now: float) -> list[Event]:
        """Reap adopted orphans and report what changed about the tree."""
        tree = self.tree
        assert tree is not None
        tree.reap_adopted()
        if self.machine.phase is Phase.KILLING:
            # Anything born since the last sweep gets the same SIGKILL.
            tree.signal(signal.SIGKILL)
        elif self.machine.phase is Phase.TERMINATING and self.stopping_with:
            # Anything a walk missed gets what the rest of the tree got.
            tree.catch_up(self.stopping_with)
        if not self.exited:
            returncode = tree.leader_returncode()
            if returncode is None:
                return []
            self.exited = True
            self.watch.unregister(tree.pidfd)
            others = tree.others()
            self.emptied = not others
            if others and self.machine.phase is Phase.WATCHING:
                self.stragglers = len(others)
            self._tell(
                "command_exited",
                now,
                pid=tree.leader,
                returncode=returncode,
                others_alive=len(others),
            )
            return [CommandExited(now, returncode, bool(others))]
        if not self.emptied and not tree.others():
            self.emptied = True
            self._tell("tree_emptied", now)
            return [TreeEmptied(now)]
        return []

    def _send_ahead(self, event: Event) -> None:
        """Send the group what the core will certainly answer ``event`` with
        (:meth:`RunMachine.first_signals`), before it is fed; :meth:`_signal` then sends them to
        the rest of the tree only."""
        tree = self.tree
        if tree is None:
            return
        for name in self.machine.first_signals(event):
            number = signal_number(name)
            if not tree.signal_group(number):
                return
            self.sent_ahead[number] = event.now

    def _feed(self, event: Event) -> None:
        """Feed ``event`` to the core and carry out what it decides; act first, then tell (the lines
        follow at the end of the turn, stamped with the time of what they report)."""
        before = self.machine.phase
        effects = self.machine.feed(event)
        told = not self.lifeline.untold(event)
        # Activity is news only when it changes something: not a line per look.
        quiet = isinstance(event, ActivitySeen) and not effects
        if told and not quiet and self.evidence.keeps_story:
            self._tell(
                "step",
                event.now,
                input=type(event).__name__,
                state_before=before.value,
                state_after=self.machine.phase.value,
                effects=[_describe(effect) for effect in effects],
            )
        for effect in effects:
            self._carry_out(effect, event.now, told=told)

    def _tell(self, event: str, mono: float | None = None, /, **fields: object) -> None:
        """Hold one line for the event log until the turn has acted (:meth:`Evidence.tell`)."""
        self.evidence.tell(event, mono, **fields)

    def _told(self) -> None:
        """Write the held lines, in the order they were told (:meth:`Evidence.told`)."""
        self.evidence.told()

    def _carry_out(self, effect: Effect, now: float, *, told: bool = True) -> None:
        if isinstance(effect, SignalTree):
            self._signal(effect, now, told=told)
            return
        # The record and the exit come once the tree is signalled: the story first.
        self._told()
        if isinstance(effect, WriteRecord):
            self._record(effect.verdict)
        else:
            self._exit(effect)

    def _signal(self, effect: SignalTree, now: float, *, told: bool = True) -> None:
        """Signal the tree; tell it (record, log, caller) unless it answers an untold request."""
        tree = self.tree
        assert tree is not None
        number = signal_number(effect.signal)
        # The group has it already (:meth:`_send_ahead`): the rest of the tree still needs it.
        sent_at = self.sent_ahead.pop(number, None)
        reached = tree.signal(number, group=sent_at is None)
        if self.machine.phase is Phase.TERMINATING:
            self.stopping_with.append(number)
        if not told:
            return
        # Stamped ``now`` (when the core decided): the record's grace is the core's. The log's
        # line is stamped when the group had it, so the timeline stays in order.
        self.evidence.signal_sent(
            effect.signal, now, reached, at=now if sent_at is None else sent_at
        )
        self.status.send(Signalled(signal=effect.signal, processes=reached))

    def _record(self, verdict: Verdict) -> None:
        """Finish the tree off and reap it, then write the record (when one was asked for)."""
        evidence = self.evidence
        evidence.verdict = verdict
        tree = self.tree
        remains = finish_off(
            tree, verdict.returncode, exited=self.exited, emptied=self.emptied, report=self._tell
        )
        self._told()  # what the reaping said counts in the record's lines dropped
        evidence.record(
            verdict, evidence.facts_of(verdict, tree, remains, stragglers=self.stragglers)
        )

    def _exit(self, effect: Exit) -> None:
        """Tell the caller how the run ended (an unwritten record is tether's own failure)."""
        evidence = self.evidence
        self.exit_status = evidence.exit_status(effect.status)
        if evidence.message:
            self.on_message(evidence.message)
        outside_group = 0 if self.tree is None else len(self.tree.outside_group)
        self.status.send(evidence.finished(self.exit_status, outside_group=outside_group))

    def give_up(self, error: BaseException) -> last_resort.SoFar:
        """Tell what is held and the failure, let go of what the loop holds (free for the last
        resort's sweep); return what it knew."""
        with contextlib.suppress(Exception):
            self._told()
        log = self.evidence.log
        with contextlib.suppress(Exception):
            log.emit("internal_error", error=last_resort.describe(error))
        with contextlib.suppress(Exception):
            self.watch.close()
        with contextlib.suppress(Exception):
            log.close()
        return last_resort.SoFar(
            tree=self.tree,
            reason=self._reason_so_far(),
            record=self.evidence.record_so_far(),
            exit_status=self.exit_status,
        )

    def _reason_so_far(self) -> str:
        """Why the run was ending when the supervisor failed, as far as it knew."""
        if self.evidence.verdict is not None:
            return self.evidence.verdict.reason.value
        if self.machine.reason is not None:
            return self.machine.reason.value
        if self.exited:
            return Reason.COMPLETED.value
        return Reason.SUPERVISOR_LOST.value


def _describe(effect: Effect) -> str:
    if isinstance(effect, SignalTree):
        return f"signal {effect.signal}"
    if isinstance(effect, WriteRecord):
        return f"write record ({effect.verdict.reason.value})"
    assert isinstance(effect, Exit)
    return f"exit {effect.status}"


def _print_to_stderr(message: str) -> None:
    print(f"tether: {message}", file=sys.stderr, flush=True)


def supervise(
    spec: RunSpec,
    attempt: LaunchAttempt,
    *,
    lifeline: int | None,
    status: StatusWriter,
    on_message: Callable[[str], None] = _print_to_stderr,
    vocabulary: Vocabulary = ALL,
) -> int:
    """Watch the command :func:`tether.supervisor.launch.launch` started until it is recorded;
    return the run's exit status. ``vocabulary``: what the lifeline may ask. Any exception ends
    in :func:`~tether.supervisor.last_resort.after_failure`, the tree stopped."""
    tap = last_resort.StatusTap(status)
    supervision: Supervision | None = None
    try:
        supervision = Supervision(
            spec,
            attempt,
            lifeline=lifeline,
            status=tap,
            on_message=on_message,
            vocabulary=vocabulary,
        )
        return supervision.run(Supervision.first_event(attempt))
    except BaseException as error:
        so_far = None if supervision is None else supervision.give_up(error)
        return last_resort.after_failure(error, attempt, so_far, tap, on_message)


def rehearse() -> None:
    """Go once through the pure part of a run, on made-up values, touching no descriptor,
    process or signal: the spec read, the launch's plan and messages, the core's steps, the
    record's facts and the caller's ``finished``. A zygote does it before it freezes what it
    loaded: what the interpreter builds or caches on a first use (method caches, dict keys,
    the core's first trigger) is then shared by its forks, not made again in each (45 to 70
    page faults a run).
    """
    from tether.core.spec import ROLES, RunSpec
    from tether.shared.protocol import Spawned, Started, encode
    from tether.shared.record_document import ResourceUsage
    from tether.supervisor.launch import plan_from_spec

    now = time.monotonic()
    spec = RunSpec.from_fields(
        {
            "argv": ["python3", "-c", "pass"],
            "deadline_seconds": 3.0,
            "grace_seconds": 1.0,
            "asked_at": now,
            "stop_signal": "SIGTERM",
            "record_argv": False,
            "ignored_signals": [],
            "limits": {"memory_max": 1 << 29, "pids_max": 64},
            "env": {"PATH": "/usr/bin:/bin"},
            "umask": 0o22,
            "fds": dict.fromkeys(ROLES, 0),
        }
    )
    plan_from_spec(spec)
    for placement in (Spawned, Started):
        encode(placement(supervisor_pid=1, pid=2, pgid=2, cgroups=[]))
    evidence = Evidence(spec)
    # A tree of made-up pids, never read nor signalled: the record's facts ask for its fields.
    tree = ProcessTree(leader=2, pgid=2, pidfd=-1, report=evidence.report)
    lifeline = LifelineReader(None, ALL)
    machine = RunMachine(
        deadline_at=spec.deadline_at,
        grace_seconds=spec.grace_seconds,
        stop_signal=spec.stop_signal,
        idle_seconds=spec.idle_seconds,
    )
    remains = Remains(0)
    remains.usage = ResourceUsage(user_seconds=0.0, system_seconds=0.0, max_rss_kib=0)
    for event in (Launched(now, 2), CommandExited(now, 0, False)):
        machine.first_signals(event)
        lifeline.untold(event)
        for effect in machine.feed(event):
            _describe(effect)
            if isinstance(effect, WriteRecord):
                evidence.verdict = effect.verdict
                facts = evidence.facts_of(effect.verdict, tree, remains, stragglers=0)
                evidence.record(effect.verdict, facts)
            elif isinstance(effect, Exit):
                status = evidence.exit_status(effect.status)
                encode(evidence.finished(status, outside_group=len(tree.outside_group)))
        _ = machine.next_deadline

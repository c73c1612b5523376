"""The loop: readiness into events for the core, the core's effects into system calls.

One ``poll()`` (:class:`~tether.supervisor.watch.Watch`) blocks on three file
descriptors, with the core's next deadline as its timeout:

* the **lifeline** (end of file: the caller is gone; a byte: a request);
* a **pidfd** on the command's leader (readable once it exited; it is not
  reaped, so its pid and group id stay reserved);
* the **signal wakeup fd**: signal handlers do nothing but let Python write
  the signal number there, so SIGTERM/SIGINT/SIGHUP (cancel) and SIGCHLD (a
  descendant died, reap it and look at the tree again) are handled in the loop,
  never in a handler.

There is no polling: a supervisor watching a quiet command sleeps in the
kernel until something happens or the deadline comes. Whatever wakes it is
translated into events stamped with one ``time.monotonic()`` reading, fed to
:class:`~tether.core.machine.RunMachine`, and the effects it returns are
carried out in order.

**Act first, then tell.** The core decides; this loop orders the work so
that a signal the core asks for reaches the command's group before the event
log hears a word of why: what the loop has to say in a turn (the lifeline's
end, the step, the signal sent) is held, stamped with the time of what it
reports, and written once the turn has acted, and before the record and the
exit. Nor does the group wait on the core itself: when the core will
certainly answer a turn with a stop (the caller gone, a cancel, a kill, the
deadline), it says so before it is fed (:meth:`RunMachine.first_signals`),
the group gets those signals at once, as from the sentry, and the core's
step and the walk of the rest of the tree follow. A caller's death costs its
command the lifeline's read and one ``kill()`` after the wake-up.

The rest is done elsewhere, so that this module is the loop and no more: the
lifeline's bytes become events in :mod:`tether.supervisor.lifeline`; the event
log, the record and the caller's ``finished`` are the run's
:class:`~tether.supervisor.evidence.Evidence`; the tree is finished off and
reaped by :func:`~tether.supervisor.finish.finish_off`; a failure anywhere ends
in :func:`tether.supervisor.last_resort.after_failure`, which reads only the
loop's :class:`~tether.supervisor.last_resort.SoFar`.

This module is imported only once the command runs (:mod:`tether.supervisor.launch`
started it, before ``transitions`` and ``structlog`` were loaded): the command
starts as early as the interpreter allows, and anything that happens in the
meantime waits, level-triggered, in the file descriptors above.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time

from tether.supervisor.deferred import deferred

# transitions imports inspect (and ast, dis, tokenize...) for one check that
# tether's model never makes it run (see tether.core.machine._Run), and logging,
# which imports traceback (with linecache, tokenize, textwrap: about 5 ms) for
# formatting exceptions no logger of this process formats. A run with an event
# log loads traceback all the same, for structlog. Loaded here, before the
# core, which imports nothing of the supervisor's.
with deferred("inspect", "traceback"):
    import transitions  # noqa: F401

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
from tether.supervisor.finish import finish_off
from tether.supervisor.lifeline import LifelineReader
from tether.supervisor.process_tree import ProcessTree
from tether.supervisor.watch import Watch, wait_bound

# Loaded once the command runs, while its caller waits for it to end: no
# ``typing``, ``dataclasses``, ``selectors``, ``socket``, ``logging`` or, for a run
# without a record, ``pathlib`` of its own (tests/test_loop_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from tether.core.effects import Verdict
    from tether.core.spec import RunSpec
    from tether.shared.lifeline import Vocabulary
    from tether.supervisor.activity import ActivityProbe
    from tether.supervisor.launch import LaunchAttempt


__all__ = ["supervise"]


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
        #: Signals the command's group got ahead of the core's decision, and when: from
        #: the sentry before the loop ran, or from the loop before it fed the core.
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
        #: What tells the core whether the tree did anything, for a run with an idle
        #: bound (:mod:`tether.supervisor.activity`); ``None`` without one: no looks.
        self.probe: ActivityProbe | None = None
        if spec.idle_seconds is not None and self.tree is not None:
            from tether.supervisor.activity import ActivityProbe

            self.probe = ActivityProbe(self.tree)
        self.next_look = 0.0
        #: The signals sent to the tree since it began to stop, in order: what a
        #: process found late gets (:meth:`ProcessTree.catch_up`).
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

    # -- the loop -------------------------------------------------------------

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
        """When to wake: the core's next timer; with an idle bound, no sooner than the next look.

        The idle bound's end is when the tree must be looked at (a look then
        covers all it did since the last one), but never sooner than
        :data:`~tether.supervisor.activity.SAMPLE_SECONDS` after the last look:
        a tree that keeps busy costs at most one wake-up a second, a run
        without the bound none.
        """
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
        """Take the watch over from the sentry, and replay what it saw and did.

        Without a sentry's action, the launch happened before this module was
        imported and nothing has happened since; the core must see the time it
        is now, or a grace would be counted from a moment long past and
        SIGKILL would come early in real time. When the sentry already sent the
        stop signal (or SIGKILL), the core is told the launch and then what
        the sentry saw, both at the times they happened: it then decides what
        the sentry did, and its grace counts from the signal the group really
        got (:meth:`_signal` does not send it to the group a second time).
        """
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
        """Send the group what the core will certainly answer ``event`` with, before it is fed.

        The core still decides: it is asked what it will send first
        (:meth:`RunMachine.first_signals`, the sentry's rule too), and the
        group gets exactly that, at once, as the sentry does before the loop
        runs: the caller's death costs the command the lifeline's read and one
        ``kill()``, not the core's step (through ``transitions``) and a walk of
        ``/proc`` as well. Fed next, the core answers with those signals, and
        :meth:`_signal` sends them to the rest of the tree only, counting what
        the group's reached (:meth:`ProcessTree.signal`). Nothing between
        here and that walk reaps a process (the turn's reaping came before).
        """
        tree = self.tree
        if tree is None:
            return
        for name in self.machine.first_signals(event):
            number = signal_number(name)
            if not tree.signal_group(number):
                return
            self.sent_ahead[number] = event.now

    def _feed(self, event: Event) -> None:
        """Feed ``event`` to the core and carry out what it decides; act first, then tell.

        The group's signal goes out before the event's lines are written (a
        line through structlog and the redactor costs a tenth of a
        millisecond, and the command's tree must not wait on the story); the
        lines follow at the end of the turn, each stamped with the time of
        what it reports (:meth:`_tell`).
        """
        before = self.machine.phase
        effects = self.machine.feed(event)
        told = not self.lifeline.untold(event)
        # The tree's activity is news only when it changes something: a busy run's
        # looks (one a second at most) do not each write a line.
        quiet = isinstance(event, ActivitySeen) and not effects
        if told and not quiet:
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

    # -- the story ------------------------------------------------------------

    def _tell(self, event: str, mono: float | None = None, /, **fields: object) -> None:
        """Hold one line for the event log until the turn has acted (:meth:`Evidence.tell`)."""
        self.evidence.tell(event, mono, **fields)

    def _told(self) -> None:
        """Write the held lines, in the order they were told (:meth:`Evidence.told`)."""
        self.evidence.told()

    # -- effects --------------------------------------------------------------

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
        # Stamped ``now``, the time the core decided at (microseconds before the
        # group has it): the grace in the record is the grace the core kept. The
        # log's line is stamped when the group had it, the sentry's time if the
        # sentry sent it: the timeline stays in order with what followed.
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
        """Tell what is held and the failure, let go of what the loop holds; what it knew.

        What the loop held is free for the last resort's sweep: the failure
        may be the lack of it. Each step is taken whatever the others did.
        """
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
    """Watch the command :func:`tether.supervisor.launch.launch` started until it is recorded.

    ``vocabulary`` is what the lifeline may ask (:mod:`tether.shared.lifeline`):
    all of it for tether's own callers, only ``c`` and ``k`` at the seed door
    unless its worker asked for more.

    Returns the exit status for the run. Whatever goes wrong inside, the
    tree is stopped: any exception ends in
    :func:`~tether.supervisor.last_resort.after_failure`, never in a traceback
    and a tree left running.
    """
    tap = last_resort.StatusTap(status)
    supervision: Supervision | None = None
    try:
        # transitions logs every step through stdlib logging; this process is
        # tether's own, and its story goes to the event log instead. (Loaded
        # with transitions already: importing it here costs nothing.)
        import logging

        logging.getLogger("transitions").setLevel(logging.WARNING)
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

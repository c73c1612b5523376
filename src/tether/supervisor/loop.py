"""The adapter: turns readiness into events for the core and effects into system calls.

One ``select()`` blocks on three file descriptors, with the core's next
deadline as its timeout:

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

**Act first, then tell.** The core decides; this adapter orders the work so
that a signal the core asks for reaches the command's group before the event
log hears a word of why: what the loop has to say in a turn (the lifeline's
end, the step, the signal sent) is held, stamped with the time of what it
reports, and written once the turn has acted, and before the record and the
exit. A caller's death costs its command one ``kill()`` after the wake-up,
not two structlog lines first.

This module is imported only once the command runs (:mod:`tether.supervisor.launch`
started it, before ``transitions`` and ``structlog`` were loaded): the command
starts as early as the interpreter allows, and anything that happens in the
meantime waits, level-triggered, in the file descriptors above.

When the core asks for the record, the supervisor reaps the command and
gathers what happened (:class:`~tether.shared.record_document.RunFacts`);
the document is built once from the verdict and those facts.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import sys
import time

from tether.supervisor.deferred import deferred

# transitions imports inspect (and ast, dis, tokenize...) for one check that
# tether's model never makes it run (see tether.core.machine._Run). Loaded here,
# before the core, which imports nothing of the supervisor's.
with deferred("inspect"):
    import transitions  # noqa: F401

from tether.core.durations import seconds_for_json
from tether.core.effects import Effect, Exit, SignalTree, Verdict, WriteRecord
from tether.core.events import (
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
from tether.core.machine import Phase, RunMachine
from tether.core.reasons import TETHER_FAILED, Reason
from tether.core.spec import command_name
from tether.shared.clock import wall_clock_at
from tether.shared.lifeline import ALL, LifelineDecoder
from tether.shared.process_start import start_ticks
from tether.shared.protocol import (
    CANCEL,
    KILL_NOW,
    PASS_ON_BASE,
    RESUME,
    SUSPEND,
    TIME_OUT,
    Finished,
    Signalled,
    StatusWriter,
)
from tether.shared.record_document import (
    ResourceUsage,
    RunFacts,
    SignalSent,
    build_document,
)
from tether.shared.record_file import RecordError, write_record
from tether.shared.signals import signal_name, signal_number
from tether.supervisor import last_resort
from tether.supervisor.containment import ProcessTree

# Loaded once the command runs, while its caller waits for it to end: no
# ``typing``, ``dataclasses``, ``selectors``, ``socket``, ``logging`` or, for a run
# without a record, ``pathlib`` of its own (tests/test_loop_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final, Protocol

    from tether.core.redaction import Redactor
    from tether.core.spec import RunSpec
    from tether.shared.lifeline import Vocabulary
    from tether.supervisor.containment import Report
    from tether.supervisor.event_log import EventLog
    from tether.supervisor.launch import LaunchAttempt

    class EventSink(Protocol):
        """Where the loop tells its story: the event log, or nowhere (:class:`NullEventLog`)."""

        def emit(self, event: str, **fields: object) -> None:
            """Write one event with its fields."""

        def close(self) -> None:
            """Write nothing more; safe to call twice."""


__all__ = ["NullEventLog", "supervise"]

#: The longest single wait in ``select()``, in seconds (see :func:`_wait_bound`).
_LONGEST_WAIT: Final = 86400.0

#: One read of the lifeline, and the most read in one turn of the loop: a
#: caller that streams bytes gets one turn per MiB, and the loop its deadlines.
_LIFELINE_READ: Final = 1 << 16
_LIFELINE_TURN: Final = 1 << 20


class NullEventLog:
    """The story told to nobody, for runs that keep no files (and so load no ``structlog``)."""

    def emit(self, event: str, **fields: object) -> None:
        """Do nothing."""

    def close(self) -> None:
        """Do nothing."""


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
        self.lifeline = lifeline
        self.status = status
        self.log: EventSink = NullEventLog()
        self.on_message = on_message
        self.wakeup = attempt.wakeup
        self.sentry = attempt.sentry
        #: Signals the sentry sent to the command's group before the loop ran, and when.
        self.sent_by_sentry: dict[int, float] = {}
        #: The lifeline's bytes and end of file as the sentry read them, not yet translated.
        self.pending_lifeline: tuple[bytes, bool] | None = None
        self.selector = Watch()
        self.command = command = attempt.command
        self.tree: ProcessTree | None = None
        if command is not None:
            self.tree = ProcessTree(
                leader=command.pid,
                pgid=command.pgid,
                pidfd=command.pidfd,
                cgroup=command.cgroup,
                reserve=attempt.reserve,
                report=_tree_reporter(self),
                own_group=command.own_group,
            )
        self.lifeline_bytes = LifelineDecoder(vocabulary)
        #: Requests to act on without telling (past :data:`~tether.shared.lifeline.TOLD_REQUESTS`).
        self.untold: list[Event] = []
        self.machine = RunMachine(
            deadline_at=spec.deadline_at,
            grace_seconds=spec.grace_seconds,
            stop_signal=spec.stop_signal,
        )
        self.signals: list[SignalSent] = []
        #: The signals sent to the tree since it began to stop, in order: what a
        #: process found late gets (:meth:`ProcessTree.catch_up`).
        self.stopping_with: list[int] = []
        #: Lines for the event log, held until the turn has acted (see :meth:`_tell`).
        self.held: list[tuple[str, float, dict[str, object]]] = []
        self.stragglers = 0
        self.tree_usage: dict[str, int | float | None] | None = None
        #: Each limit and what enforced it (``cgroup2``, ``cgroup1``, ``systemd-scope``).
        self.limits_enforced_by: dict[str, str] | None = None
        self.exited = False
        self.emptied = False
        self.exit_status = TETHER_FAILED
        self.record_written = False
        self.message: str | None = None
        self.verdict: Verdict | None = None
        self.facts: RunFacts | None = None
        self.redactor: Redactor | None = None
        self.started_monotonic = min(spec.asked_at, time.monotonic())
        self.started_at = wall_clock_at(self.started_monotonic)

    @staticmethod
    def first_event(attempt: LaunchAttempt) -> Event:
        """The event that says how the launch went, at the time it happened."""
        failure = attempt.failure
        if failure is not None:
            return LaunchFailed(attempt.at, failure.errno, failure.message, failure.stage)
        assert attempt.command is not None
        return Launched(attempt.at, attempt.command.pid)

    # -- the loop -------------------------------------------------------------

    def open_log(self, launched: Event) -> None:
        """Open the event log beside the record (if any) and tell it about the launch.

        Done after the launch, because it imports ``structlog``; the launch line
        carries the monotonic time the launch really happened at. The log is
        made in the record's directory as held since before the run. Nothing
        here may cost the run: a log that cannot be opened (a FIFO at its name,
        no descriptor left, a full disk) means a run without a log, said once
        in the run's closing message, and the record is written all the same.
        """
        self.event_log: EventLog | None = None
        self.event_log_problem: str | None = None
        path = self.spec.record_path
        if path is None:
            return
        # Only for a run with a record, whose door has loaded pathlib already.
        from pathlib import Path

        from tether.shared.paths import events_path_for  # loaded with the record file

        events = events_path_for(Path(path))
        try:
            # Loaded now, while descriptors are to be had: writing the record
            # at the end must not depend on opening a module's file.
            from tether.shared.secrets import redactor_for

            self.redactor = redactor_for(self.spec, os.environ)
            from tether.supervisor.event_log import EventLog

            self.log = self.event_log = EventLog.open(
                events, self.redactor, directory_fd=self.spec.fds.get("record_dir")
            )
        except (OSError, ImportError) as error:
            # The record is the evidence that must exist; the log is the story.
            problem = getattr(error, "strerror", None) or str(error)
            self.event_log_problem = f"cannot write the event log {events}: {problem}"
            return
        # Both lines say what the run was for, so that a log whose record is
        # missing can still be matched to its run; ``started_mono`` is when the
        # caller asked (the record's start), the line's own ``mono`` the launch.
        policy: dict[str, object] = {
            "label": self.spec.label,
            "deadline_seconds": self.spec.deadline_seconds or 0,
            "grace_seconds": seconds_for_json(self.spec.grace_seconds),
            "started_mono": self.started_monotonic,
            "supervisor_pid": os.getpid(),
            # The pid with its start time names this supervisor for good (tether ls).
            "supervisor_start_ticks": start_ticks(),
            "command": command_name(self.spec.argv),
        }
        tree = self.tree
        if isinstance(launched, Launched) and tree is not None:
            self.log.emit(
                "launched",
                mono=launched.now,
                pid=tree.leader,
                pgid=tree.pgid,
                containment=tree.containment,
                **policy,
            )
        elif isinstance(launched, LaunchFailed):
            self.log.emit(
                "launch_failed",
                mono=launched.now,
                errno=launched.errno,
                error=launched.message,
                stage=launched.stage,
                **policy,
            )

    def run(self, first: Event) -> int:
        """Feed events until the run is recorded; return the exit status."""
        self.open_log(first)
        self.selector.register(self.wakeup.read_fd, "signal")
        if self.lifeline is not None:
            self.selector.register(self.lifeline, "lifeline")
        if self.tree is not None:
            self.selector.register(self.tree.pidfd, "exit")
        self._take_over(first)
        self._told()
        while not self._recorded():
            deadline = self.machine.next_deadline
            timeout = None if deadline is None else _wait_bound(deadline - time.monotonic())
            ready = self.selector.wait(timeout)
            now = time.monotonic()
            events = self._translate(ready, now) or [Tick(now)]
            for event in events:
                self._feed(event)
                if self._recorded():
                    break
            self._told()
        self.selector.close()
        self.log.close()
        return self.exit_status

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
            self.sent_by_sentry = {number: at for number, at in reversed(handover.sent)}
            if self.tree is not None:
                self.tree.stopped.update(handover.walked - {self.tree.leader})
        if handover is None:
            return
        self.wakeup.pending += handover.signals
        self.pending_lifeline = (bytes(handover.lifeline), handover.lifeline_closed)
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
        """The requests the caller wrote since the last turn, then ``CallerLost`` at end of file.

        A turn decodes what it read in bulk (:class:`LifelineDecoder`): each
        request once at most, junk and requests past the first few counted,
        not logged one by one, so a caller writing a mebibyte of anything
        costs the log a few lines and the loop one turn per MiB.
        """
        assert self.lifeline is not None
        if self.pending_lifeline is not None:
            (data, closed), self.pending_lifeline = self.pending_lifeline, None
        else:
            data, closed = _drain(self.lifeline, _LIFELINE_TURN)
        tally = self.lifeline_bytes
        events: list[Event] = []
        for request in tally.decode(data):
            event = _request_event(request, now)
            if tally.tell(request):
                self._tell("lifeline_request", now, request=_describe_request(request))
            else:
                self.untold.append(event)
            events.append(event)
        if tally.unknown_report_due():
            self._tell("lifeline_unknown_bytes", now, count=tally.unknown)
        if tally.untold_report_due():
            self._tell("lifeline_requests_untold", now, count=tally.untold)
        if closed:
            self.selector.unregister(self.lifeline)
            extra = {"unknown_bytes": tally.unknown} if tally.unknown else {}
            if tally.untold:
                extra["untold_requests"] = tally.untold
            self._tell("lifeline_closed", now, **extra)
            events.append(CallerLost(now))
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
            self.selector.unregister(tree.pidfd)
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
        told = not any(untold is event for untold in self.untold)
        if not told:
            self.untold = [untold for untold in self.untold if untold is not event]
        if told:
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
        """Hold one line for the event log, stamped ``mono`` (default: now), until :meth:`_told`.

        Held, not written, so that nothing the loop says stands between an
        event and the signal it calls for. A turn's lines are written when the
        turn has acted (or before the record and the exit, which must find
        the story told); a supervisor SIGKILLed mid-turn loses that turn's
        lines, no more.
        """
        self.held.append((event, time.monotonic() if mono is None else mono, fields))

    def _told(self) -> None:
        """Write the held lines, in the order they were told."""
        held, self.held = self.held, []
        for event, mono, fields in held:
            self.log.emit(event, mono=mono, **fields)

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
        # Stamped with the time the core decided at (microseconds before the
        # group has it): the grace in the record is the grace the core kept.
        at = now - self.started_monotonic
        # The sentry sent it to the group already: the rest of the tree still needs it.
        by_sentry = self.sent_by_sentry.pop(number, None) is not None
        reached = tree.signal(number, group=not by_sentry)
        if self.machine.phase is Phase.TERMINATING:
            self.stopping_with.append(number)
        if not told:
            return
        self.signals.append(
            SignalSent(signal=effect.signal, at_seconds=round(at, 6), processes=reached)
        )
        self._tell("signal_sent", signal=effect.signal, processes=reached)
        self.status.send(Signalled(signal=effect.signal, processes=reached))

    def _record(self, verdict: Verdict) -> None:
        """Reap and gather what happened, then write the record (when one was asked for).

        The record goes into the directory held since before the run, and
        nowhere else. Whatever stands in the way (a full disk, no descriptor
        left, the directory removed) is one line in the run's closing message
        and status 125; the tree was stopped and reaped before this, so the
        evidence failing costs nothing else. The message also says, in the
        same line, when the event log is missing or incomplete.
        """
        self.verdict = verdict
        self.facts = facts = self._gather_facts(verdict)
        path = self.spec.record_path
        if path is None:
            self.message = verdict.launch_error
            return
        failure: str | None = None
        try:
            from pathlib import Path

            if self.redactor is None:
                from tether.shared.secrets import redactor_for

                self.redactor = redactor_for(self.spec, os.environ)
            write_record(
                Path(path),
                build_document(verdict, facts),
                redactor=self.redactor,
                directory_fd=self.spec.fds.get("record_dir"),
            )
        except RecordError as error:
            failure = str(error)
        except (OSError, ImportError) as error:  # the redactor's module, with no descriptor left
            failure = f"cannot write the record: {path}: {_words(error)}"
        if failure is not None:
            self.log.emit("record_failed", error=failure)
        else:
            self.record_written = True
            self.log.emit("record_written", path=path)
        self._let_go_of_record_directory()
        said = (verdict.launch_error, failure, self._event_log_trouble())
        self.message = "; ".join(part for part in said if part) or None

    def _let_go_of_record_directory(self) -> None:
        """Close the held record directory: nothing more is written through it."""
        directory_fd = self.spec.fds.get("record_dir")
        if directory_fd is not None:
            with contextlib.suppress(OSError):
                os.close(directory_fd)

    def _event_log_trouble(self) -> str | None:
        """One clause for the closing message if the event log is missing or incomplete."""
        log = self.event_log
        if log is None:
            return self.event_log_problem
        if not log.lines_dropped:
            return None
        return (
            f"the event log {log.path} is incomplete: {log.lines_dropped} line(s) "
            f"could not be written ({log.problem})"
        )

    def _gather_facts(self, verdict: Verdict) -> RunFacts:
        """Finish the tree off, reap it, and say what happened: what only the supervisor knows."""
        tree = self.tree
        returncode, usage = verdict.returncode, None
        if tree is not None:
            returncode, usage = self._reap(tree, returncode)
        self._told()  # what the reaping said counts in the record's lines dropped
        return RunFacts(
            spec=self.spec,
            started_at=self.started_at,
            started_monotonic=self.started_monotonic,
            finished_at=wall_clock_at(verdict.finished_at),
            supervisor_pid=os.getpid(),
            command_pid=None if tree is None else tree.leader,
            command_pgid=None if tree is None else tree.pgid,
            returncode=returncode,
            hostname=os.uname().nodename,  # what socket.gethostname() says, without socket
            containment="sweep" if tree is None else tree.containment,
            signals=tuple(self.signals),
            descendants_stopped=0 if tree is None else len(tree.stopped),
            stragglers=self.stragglers,
            rusage=usage,
            event_log_lines_dropped=None
            if self.event_log is None
            else self.event_log.lines_dropped,
            signals_without_pidfd=0 if tree is None else tree.signals_without_pidfd,
            tree_usage=self.tree_usage,
            limits_enforced_by=self.limits_enforced_by,
        )

    def _reap(
        self, tree: ProcessTree, returncode: int | None
    ) -> tuple[int | None, ResourceUsage | None]:
        """Reap the leader (its return code wins over the one seen at exit) and the rest."""
        if not self.emptied:
            # The last group-wide signal goes out while the leader is unreaped.
            tree.signal(signal.SIGKILL)
        reaped, usage = tree.reap_leader(block=self.exited)
        if reaped is not None:
            returncode = reaped
        tree.reap_adopted()
        if tree.cgroup is not None:
            # The whole tree's account, read once it is all gone and before its cgroup is.
            self.tree_usage = tree.cgroup.usage()
            self.limits_enforced_by = dict(tree.cgroup.enforced_by) or None
        if not tree.release():
            assert tree.cgroup is not None
            cgroups = tree.cgroup
            self._tell("cgroup_left", path=cgroups.directory, paths=cgroups.directories)
        return returncode, usage

    def _exit(self, effect: Exit) -> None:
        """Tell the caller how the run ended (an unwritten record is tether's own failure)."""
        verdict, facts = self.verdict, self.facts
        assert verdict is not None
        assert facts is not None
        failed = self.spec.record_path is not None and not self.record_written
        self.exit_status = TETHER_FAILED if failed else effect.status
        if self.message:
            self.on_message(self.message)
        self.status.send(
            Finished(
                reason=verdict.reason.value,
                exit_status=self.exit_status,
                returncode=facts.returncode,
                record=self.spec.record_path if self.record_written else None,
                message=self.message,
                errno=verdict.launch_errno,
                escalated_to_sigkill=verdict.escalated_to_sigkill,
                started_at=facts.started_at.isoformat(),
                finished_at=facts.finished_at.isoformat(),
                elapsed_seconds=round(verdict.finished_at - self.started_monotonic, 3),
                processes_stopped=self._processes_stopped(verdict, facts),
                outside_group=0 if self.tree is None else len(self.tree.outside_group),
                shutdown_seconds=verdict.shutdown_seconds,
                tree_usage=facts.tree_usage,
            )
        )

    @staticmethod
    def _processes_stopped(verdict: Verdict, facts: RunFacts) -> int:
        """How many processes tether stopped: the others it signalled, and the command if it did."""
        command = 1 if facts.signals and verdict.reason is not Reason.COMPLETED else 0
        return command + facts.descendants_stopped


def _tree_reporter(supervision: Supervision) -> Report:
    """What the tree reports goes to the event log of the day (opened after the tree is built).

    Best effort: a log that cannot be written must not stop the tree from
    being stopped.
    """

    def report(event: str, /, **fields: object) -> None:
        with contextlib.suppress(Exception):
            supervision._tell(event, **fields)

    return report


class Watch:
    """The descriptors the loop waits on, each by the name of what its readiness means.

    ``poll()`` itself, not :mod:`selectors` (a module more to load while the
    caller waits) and not epoll: it needs no descriptor of its own, and under
    a low open-file limit every descriptor counts (three are watched). Any
    readiness counts, hang-up and error included: reading then says what it was.
    """

    def __init__(self) -> None:
        self._poll = select.poll()
        self._names: dict[int, str] = {}

    def register(self, fd: int, name: str) -> None:
        """Wake up when ``fd`` is readable, and say ``name``."""
        self._poll.register(fd, select.POLLIN)
        self._names[fd] = name

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``."""
        self._poll.unregister(fd)
        del self._names[fd]

    def wait(self, timeout: float | None) -> set[str]:
        """The names of the descriptors ready within ``timeout`` seconds (``None``: no limit).

        Rounded up to the millisecond, as :class:`selectors.PollSelector` does:
        a wait cut short by rounding down would wake up just before a deadline
        and then spin until it came.
        """
        if timeout is None:
            ready = self._poll.poll()
        else:
            ready = self._poll.poll(math.ceil(timeout * 1000) if timeout > 0 else 0)
        return {self._names[fd] for fd, _ in ready if fd in self._names}

    def close(self) -> None:
        """Stop watching everything; safe to call twice."""
        for fd in list(self._names):
            self.unregister(fd)


def _request_event(request: bytes, now: float) -> Event:
    """The core's event for one lifeline request (see :mod:`tether.shared.protocol`)."""
    if request == CANCEL:
        return CancelRequested(now)
    if request == KILL_NOW:
        return KillRequested(now)
    if request == TIME_OUT:
        return TimeOutRequested(now)
    if request == SUSPEND:
        return SuspendRequested(now)
    if request == RESUME:
        return ResumeRequested(now)
    return SignalRequested(now, _pass_on_name(request))


def _pass_on_name(request: bytes) -> str:
    name = signal_name(str(request[0] - PASS_ON_BASE))
    assert name is not None  # only bytes of named signals are requests (ALL)
    return name


def _describe_request(request: bytes) -> str:
    if request[0] >= PASS_ON_BASE:
        return f"pass on {_pass_on_name(request)}"
    return request.decode("ascii")


def _drain(fd: int, bound: int) -> tuple[bytes, bool]:
    """Read what is waiting on ``fd`` (up to about ``bound`` bytes); and whether it was closed.

    Never blocks, whether or not ``fd`` is in non-blocking mode (the seed
    door's caller chose): it was readable when the loop woke, and each further
    read waits for ``poll`` to say there is more. A read error counts as end of
    file, as the caller can no longer be heard.
    """
    chunks: list[bytes] = []
    size = 0
    more = select.poll()
    more.register(fd, select.POLLIN)
    while size < bound:
        try:
            chunk = os.read(fd, _LIFELINE_READ)
        except BlockingIOError:
            break
        except OSError:
            return b"".join(chunks), True
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
        if not more.poll(0):
            break
    return b"".join(chunks), False


def _wait_bound(seconds: float) -> float:
    """A ``select()`` timeout for a deadline ``seconds`` away.

    epoll refuses timeouts beyond about 24.8 days (2**31 ms), and ``--deadline
    30d`` is a fair thing to ask for. Waking up once a day on the way there is
    harmless: the core answers an early :class:`Tick` with nothing.
    """
    return min(max(0.0, seconds), _LONGEST_WAIT)


def _describe(effect: Effect) -> str:
    if isinstance(effect, SignalTree):
        return f"signal {effect.signal}"
    if isinstance(effect, WriteRecord):
        return f"write record ({effect.verdict.reason.value})"
    assert isinstance(effect, Exit)
    return f"exit {effect.status}"


def _words(error: BaseException) -> str:
    """The system's words for ``error``, without the file name ``str(OSError)`` adds."""
    if isinstance(error, OSError) and error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


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
    tree is stopped: any exception ends in :func:`_last_resort`, never in a
    traceback and a tree left running.
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
        return _last_resort(error, attempt, supervision, tap, on_message)


def _last_resort(
    error: BaseException,
    attempt: LaunchAttempt,
    supervision: Supervision | None,
    status: last_resort.StatusTap,
    on_message: Callable[[str], None],
) -> int:
    """Kill the tree, tell the caller (once) and the person; return the status to exit with.

    A failure after ``finished`` went out (the run was recorded, the tree
    stopped) changes nothing the caller was told: the status stands.
    """
    tree = None if supervision is None else supervision.tree
    if supervision is not None:
        with contextlib.suppress(Exception):
            supervision._told()
        with contextlib.suppress(Exception):
            supervision.log.emit("internal_error", error=last_resort.describe(error))
        # What the loop held is free for the sweep: the failure may be the lack of it.
        with contextlib.suppress(Exception):
            supervision.selector.close()
        with contextlib.suppress(Exception):
            supervision.log.close()
    if supervision is not None and status.finished_sent:
        last_resort.kill_tree(attempt, tree)
        return supervision.exit_status
    return last_resort.abandon(
        attempt,
        error,
        status=status,
        say=on_message,
        tree=tree,
        reason=_reason_so_far(supervision),
        record=_record_so_far(supervision),
    )


def _reason_so_far(supervision: Supervision | None) -> str:
    """Why the run was ending when the supervisor failed, as far as it knew."""
    if supervision is not None:
        if supervision.verdict is not None:
            return supervision.verdict.reason.value
        if supervision.machine.reason is not None:
            return supervision.machine.reason.value
        if supervision.exited:
            return Reason.COMPLETED.value
    return Reason.SUPERVISOR_LOST.value


def _record_so_far(supervision: Supervision | None) -> str | None:
    if supervision is not None and supervision.record_written:
        return supervision.spec.record_path
    return None

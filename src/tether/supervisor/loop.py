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
:class:`~tether.core.machine.RunMachine`, and the effects it returns are carried
out in order.

The command is launched *before* the core is built, because building it
imports ``transitions`` and ``structlog`` (tens of milliseconds): the command
starts as early as the interpreter allows, and anything that happens in the
meantime waits, level-triggered, in the file descriptors above.
"""

from __future__ import annotations

import dataclasses
import math
import os
import selectors
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, Protocol

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
from tether.core.reasons import TETHER_FAILED
from tether.shared.protocol import CANCEL, FINISHED, KILL_NOW, StatusWriter

if TYPE_CHECKING:
    from tether.supervisor.containment import ProcessTree
    from tether.supervisor.launch import Launch
    from tether.core.machine import RunMachine
    from tether.shared.record_document import SignalSent
    from tether.core.redaction import Redactor
    from tether.core.spec import RunSpec

__all__ = ["EventSink", "NullEventLog", "supervise"]

#: The longest single wait in ``select()``, in seconds (see :func:`_wait_bound`).
_LONGEST_WAIT: Final = 86400.0


class EventSink(Protocol):
    """Where the loop tells its story: :class:`tether.supervisor.event_log.EventLog`, or nowhere."""

    def emit(self, event: str, **fields: object) -> None:
        """Write one event with its fields."""

    def close(self) -> None:
        """Write nothing more; safe to call twice."""


class NullEventLog:
    """The story told to nobody, for runs that keep no files (and so load no ``structlog``)."""

    def emit(self, event: str, **fields: object) -> None:
        """Do nothing."""

    def close(self) -> None:
        """Do nothing."""


class _Run:
    """One supervised command, from launch to record."""

    def __init__(
        self,
        spec: RunSpec,
        launched: Launch,
        *,
        lifeline: int | None,
        status: StatusWriter,
        log: EventSink,
        on_message: Callable[[str], None],
    ) -> None:
        from tether.supervisor.containment import ProcessTree

        self.spec = spec
        self.lifeline = lifeline
        self.status = status
        self.log = log
        self.on_message = on_message
        self.wakeup = launched.wakeup
        self.selector = selectors.DefaultSelector()
        self.command = command = launched.command
        self.tree: ProcessTree | None = None
        if command is not None:
            self.tree = ProcessTree(
                leader=command.pid, pgid=command.pgid, pidfd=command.pidfd, cgroup=command.cgroup
            )
        self.machine: RunMachine | None = None
        self.signals: list[SignalSent] = []
        self.stragglers = 0
        self.exited = False
        self.emptied = False
        self.exit_status = TETHER_FAILED
        self.record_failed = False
        self.message: str | None = None
        self.returncode: int | None = None
        self.verdict: Verdict | None = None
        self.redactor: Redactor | None = None
        now = time.monotonic()
        self.started_monotonic = min(spec.asked_at, now)
        self.started_at = datetime.now(UTC) - timedelta(seconds=now - self.started_monotonic)
        self.finished_at = self.started_at

    def first_event(self, launched: Launch) -> Event:
        """The event that says how the launch went, at the time it happened."""
        failure = launched.failure
        if failure is not None:
            return LaunchFailed(launched.at, failure.errno, failure.message, failure.stage)
        assert self.tree is not None
        return Launched(launched.at, self.tree.leader)

    # -- the loop -------------------------------------------------------------

    def open_log(self, launched: Event) -> None:
        """Open the event log beside the record (if any) and tell it about the launch.

        Done after the launch, because it imports ``structlog``; the launch line
        carries the monotonic time the launch really happened at.
        """
        path = self.spec.record_path
        if path is None:
            return
        from pathlib import Path

        from tether.supervisor.event_log import EventLog
        from tether.shared.paths import events_path_for
        from tether.core.redaction import Redactor, secret_values_from

        environ = os.environ if self.spec.env is None else self.spec.env
        self.redactor = Redactor(secret_values_from(environ, self.spec.argv))
        try:
            self.log = EventLog.open(events_path_for(Path(path)), self.redactor)
        except OSError as error:
            # The record is the evidence that must exist; the log is the story.
            self.on_message(f"cannot write the event log: {error.strerror or error}")
            return
        tree = self.tree
        # Both lines say what the run was for, so that a log whose record is
        # missing can still be matched to its run; ``started_mono`` is when the
        # caller asked (the record's start), the line's own ``mono`` the launch.
        grace = self.spec.grace_seconds
        policy: dict[str, object] = {
            "label": self.spec.label,
            "deadline_seconds": self.spec.deadline_seconds,
            # JSON has no infinity: an endless grace ("never escalate") is null.
            "grace_seconds": None if math.isinf(grace) else grace,
            "started_mono": self.started_monotonic,
            "supervisor_pid": os.getpid(),
        }
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
        import logging

        from tether.core.machine import RunMachine

        # transitions logs every step through stdlib logging; this process is
        # tether's own, and its story goes to the event log instead.
        logging.getLogger("transitions").setLevel(logging.WARNING)
        self.open_log(first)
        self.machine = machine = RunMachine(
            deadline_at=self.spec.deadline_at,
            grace_seconds=self.spec.grace_seconds,
            stop_signal=self.spec.stop_signal,
        )
        self.selector.register(self.wakeup.read_fd, selectors.EVENT_READ, "signal")
        if self.lifeline is not None:
            self.selector.register(self.lifeline, selectors.EVENT_READ, "lifeline")
        if self.tree is not None:
            self.selector.register(self.tree.pidfd, selectors.EVENT_READ, "exit")
        # The launch happened before the imports above; the core must see the
        # time it is now, or a grace would be counted from a moment long past
        # and SIGKILL would come early in real time.
        self._feed(dataclasses.replace(first, now=time.monotonic()))
        while not self._recorded():
            deadline = machine.next_deadline
            timeout = None if deadline is None else _wait_bound(deadline - time.monotonic())
            ready = self.selector.select(timeout)
            now = time.monotonic()
            events = self._translate({key.data for key, _ in ready}, now) or [Tick(now)]
            for event in events:
                self._feed(event)
                if self._recorded():
                    break
        self.selector.close()
        self.log.close()
        return self.exit_status

    def _recorded(self) -> bool:
        return self.machine is not None and self.machine.phase.value == "recorded"

    def _translate(self, sources: set[str], now: float) -> list[Event]:
        events: list[Event] = []
        tree_changed = "exit" in sources
        if "signal" in sources:
            for number in self.wakeup.drain():
                if number == signal.SIGCHLD:
                    tree_changed = True
                else:
                    self.log.emit("signal_received", signal=signal.Signals(number).name)
                    events.append(CancelRequested(now))
        if "lifeline" in sources:
            events += self._read_lifeline(now)
        if tree_changed:
            events += self._observe_tree(now)
        return events

    def _read_lifeline(self, now: float) -> list[Event]:
        assert self.lifeline is not None
        try:
            data = os.read(self.lifeline, 64)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.selector.unregister(self.lifeline)
            self.log.emit("lifeline_closed")
            return [CallerLost(now)]
        events: list[Event] = []
        for byte in (data[i : i + 1] for i in range(len(data))):
            if byte == CANCEL:
                events.append(CancelRequested(now))
            elif byte == KILL_NOW:
                events.append(KillRequested(now))
            self.log.emit("lifeline_request", request=byte.decode("ascii", "replace"))
        return events

    def _observe_tree(self, now: float) -> list[Event]:
        """Reap adopted orphans and report what changed about the tree."""
        tree = self.tree
        assert tree is not None
        assert self.machine is not None
        tree.reap_adopted()
        if self.machine.phase.value == "killing":
            # Anything born since the last sweep gets the same SIGKILL.
            tree.signal(signal.SIGKILL)
        if not self.exited:
            returncode = tree.leader_returncode()
            if returncode is None:
                return []
            self.exited = True
            self.selector.unregister(tree.pidfd)
            others = tree.others()
            self.emptied = not others
            if others and self.machine.phase.value == "watching":
                self.stragglers = len(others)
            self.log.emit(
                "command_exited", pid=tree.leader, returncode=returncode, others_alive=len(others)
            )
            return [CommandExited(now, returncode, bool(others))]
        if not self.emptied and not tree.others():
            self.emptied = True
            self.log.emit("tree_emptied")
            return [TreeEmptied(now)]
        return []

    def _feed(self, event: Event) -> None:
        machine = self.machine
        assert machine is not None
        before = machine.phase
        effects = machine.feed(event)
        self.log.emit(
            "step",
            input=type(event).__name__,
            state_before=before.value,
            state_after=machine.phase.value,
            effects=[_describe(effect) for effect in effects],
        )
        for effect in effects:
            self._carry_out(effect, event.now)

    # -- effects --------------------------------------------------------------

    def _carry_out(self, effect: Effect, now: float) -> None:
        if isinstance(effect, SignalTree):
            self._signal(effect, now)
        elif isinstance(effect, WriteRecord):
            self._finish(effect.verdict)
        else:
            self._exit(effect)

    def _signal(self, effect: SignalTree, now: float) -> None:
        tree = self.tree
        assert tree is not None
        from tether.shared.record_document import SignalSent

        number = getattr(signal, effect.signal)
        # Stamped with the time the core decided at (microseconds before the
        # group has it): the grace in the record is the grace the core kept.
        at = now - self.started_monotonic
        reached = tree.signal(number)
        self.signals.append(
            SignalSent(signal=effect.signal, at_seconds=round(at, 6), processes=reached)
        )
        self.log.emit("signal_sent", signal=effect.signal, processes=reached)
        # For callers that report signals as they go (``tether timeout -v``).
        self.status.send("signal", signal=effect.signal, processes=reached)

    def _finish(self, verdict: Verdict) -> None:
        import socket
        from pathlib import Path

        from tether.shared.record_document import RecordError, RunFacts, build_document, write_record

        self.finished_at = datetime.now(UTC)
        tree = self.tree
        returncode, usage = verdict.returncode, None
        if tree is not None:
            if not self.emptied:
                # The last group-wide signal goes out while the leader is unreaped.
                tree.signal(signal.SIGKILL)
            reaped, usage = tree.reap_leader(block=self.exited)
            if reaped is not None:
                returncode = reaped
                # Popen must not try to reap it again, or warn that it never did.
                assert self.command is not None
                self.command.popen.returncode = reaped
            tree.reap_adopted()
            if not tree.release():
                assert tree.cgroup is not None
                self.log.emit("cgroup_left", path=tree.cgroup.directory)
        facts = RunFacts(
            label=self.spec.label,
            started_at=self.started_at,
            started_monotonic=self.started_monotonic,
            deadline_seconds=self.spec.deadline_seconds,
            grace_seconds=self.spec.grace_seconds,
            supervisor_pid=os.getpid(),
            command_pid=None if tree is None else tree.leader,
            command_pgid=None if tree is None else tree.pgid,
            hostname=socket.gethostname(),
            containment="sweep" if tree is None else tree.containment,
            signals=tuple(self.signals),
            descendants_stopped=0 if tree is None else len(tree.stopped),
            stragglers=self.stragglers,
            rusage=usage,
        )
        self.verdict = verdict
        self.returncode = returncode
        self.message = verdict.launch_error
        path = self.spec.record_path
        if path is None:
            return
        document = build_document(verdict, facts, finished_at=self.finished_at)
        document["eval_exit_code"] = returncode
        if self.redactor is not None:
            redacted = self.redactor.redact(document)
            assert isinstance(redacted, dict)
            document = redacted
        try:
            write_record(Path(path), document)
        except RecordError as error:
            self.record_failed = True
            self.message = str(error)
            self.log.emit("record_failed", error=self.message)
        else:
            self.log.emit("record_written", path=path)

    def _exit(self, effect: Exit) -> None:
        """Tell the caller how the run ended (an unwritten record is tether's own failure)."""
        verdict = self.verdict
        assert verdict is not None
        self.exit_status = TETHER_FAILED if self.record_failed else effect.status
        if self.message:
            self.on_message(self.message)
        self.status.send(
            FINISHED,
            reason=verdict.reason.value,
            exit_status=self.exit_status,
            returncode=self.returncode,
            record=self.spec.record_path,
            message=self.message,
            errno=verdict.launch_errno,
            escalated_to_sigkill=verdict.escalated_to_sigkill,
            started_at=self.started_at.isoformat(),
            finished_at=self.finished_at.isoformat(),
            elapsed_seconds=round(verdict.finished_at - self.started_monotonic, 3),
        )


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


def _print_to_stderr(message: str) -> None:
    print(f"tether: {message}", file=sys.stderr, flush=True)


def supervise(
    spec: RunSpec,
    launched: Launch,
    *,
    lifeline: int | None,
    status: StatusWriter,
    log: EventSink | None = None,
    on_message: Callable[[str], None] = _print_to_stderr,
) -> int:
    """Watch the command :func:`tether.supervisor.launch.launch` started until it is recorded.

    Returns the exit status for the run.
    """
    run = _Run(
        spec,
        launched,
        lifeline=lifeline,
        status=status,
        log=log or NullEventLog(),
        on_message=on_message,
    )
    return run.run(run.first_event(launched))

"""The evidence a run leaves: its event log, its record, and the ``finished`` its caller gets.

The loop decides nothing here and this module decides nothing of the run: it
keeps what the run will be judged by. Everything that ends up in a file or on
the status channel about how the run went passes through one object,
:class:`Evidence`, so that the three accounts (the event log's story, the
record's verdict and facts, the caller's ``finished``) are built from the same
values: the signals sent and when, the one redactor of the run, the run's
start.

**The record must exist; the story may be missing.** Nothing about the event
log may cost the run: a log that cannot be opened (a FIFO at its name, no
descriptor left, a full disk) means a run without a log, said once in the
closing message. A record that cannot be written is one line in that message
and status 125; the tree was stopped and reaped before, so the evidence
failing costs nothing else.

**Held, then told.** The loop acts first and tells after (see
:mod:`tether.supervisor.loop`): the lines of a turn are held here
(:meth:`Evidence.tell`) and written once the turn has acted
(:meth:`Evidence.told`), each stamped with the time of what it reports.

Loaded with the loop, once the command runs: ``structlog`` (the event log),
``pathlib`` and the redactor's module are imported only for a run with a
record, and when the log is opened, so that writing the record at the end does
not depend on opening a module's file.
"""

from __future__ import annotations

import contextlib
import os
import time

from tether.core.durations import seconds_for_json
from tether.core.events import Launched, LaunchFailed
from tether.core.reasons import TETHER_FAILED, Reason
from tether.core.spec import command_name, script_name
from tether.shared.clock import wall_clock_at
from tether.shared.process_start import start_ticks
from tether.shared.protocol import Finished
from tether.shared.record_document import RunFacts, SignalSent, build_document
from tether.shared.record_file import RecordError, write_record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from tether.core.effects import Verdict
    from tether.core.events import Event
    from tether.core.redaction import Redactor
    from tether.core.spec import RunSpec
    from tether.supervisor.event_log import EventLog
    from tether.supervisor.finish import Remains
    from tether.supervisor.process_tree import ProcessTree

    class EventSink(Protocol):
        """Where the run's story goes: the event log, or nowhere (:class:`NullEventLog`)."""

        def emit(self, event: str, **fields: object) -> None:
            """Write one event with its fields."""

        def close(self) -> None:
            """Write nothing more; safe to call twice."""


__all__ = ["Evidence", "NullEventLog"]


class NullEventLog:
    """The story told to nobody, for runs that keep no files (and so load no ``structlog``)."""

    def emit(self, event: str, **fields: object) -> None:
        """Do nothing."""

    def close(self) -> None:
        """Do nothing."""


class Evidence:
    """One run's event log, redactor, signals sent and record, from the launch to ``finished``."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.log: EventSink = NullEventLog()
        self.event_log: EventLog | None = None
        self.event_log_problem: str | None = None
        self.redactor: Redactor | None = None
        #: The signals the tree got, as the record lists them.
        self.signals: list[SignalSent] = []
        #: Lines for the event log, held until the turn has acted (see :meth:`tell`).
        self.held: list[tuple[str, float, dict[str, object]]] = []
        self.verdict: Verdict | None = None
        self.facts: RunFacts | None = None
        self.record_written = False
        #: The run's closing message: a launch error, a record or log that failed.
        self.message: str | None = None
        self.started_monotonic = min(spec.asked_at, time.monotonic())
        self.started_at = wall_clock_at(self.started_monotonic)

    # -- the story ------------------------------------------------------------

    def open_log(self, launched: Event, tree: ProcessTree | None) -> None:
        """Open the event log beside the record (if any) and tell it about the launch.

        Done after the launch, because it imports ``structlog``; the launch line
        carries the monotonic time the launch really happened at. The log is
        made in the record's directory as held since before the run.
        """
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
            "script": script_name(self.spec.argv),
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

    def tell(self, event: str, mono: float | None = None, /, **fields: object) -> None:
        """Hold one line for the event log, stamped ``mono`` (default: now), until :meth:`told`.

        Held, not written, so that nothing the loop says stands between an
        event and the signal it calls for. A turn's lines are written when the
        turn has acted (or before the record and the exit, which must find
        the story told); a supervisor SIGKILLed mid-turn loses that turn's
        lines, no more.
        """
        self.held.append((event, time.monotonic() if mono is None else mono, fields))

    def told(self) -> None:
        """Write the held lines, in the order they were told."""
        held, self.held = self.held, []
        for event, mono, fields in held:
            self.log.emit(event, mono=mono, **fields)

    def report(self, event: str, /, **fields: object) -> None:
        """What the tree reports, held as :meth:`tell` does; best effort.

        A log that cannot be written must not stop the tree from being stopped.
        """
        with contextlib.suppress(Exception):
            self.tell(event, **fields)

    def signal_sent(self, name: str, now: float, processes: int, *, at: float) -> None:
        """Note a signal the tree got, for the record and (held) the log.

        In the record, stamped with the time the core decided at, ``now``
        (microseconds before the group has it): the grace in the record is the
        grace the core kept. In the log, stamped ``at``, when the group got it.
        """
        since_start = now - self.started_monotonic
        self.signals.append(
            SignalSent(signal=name, at_seconds=round(since_start, 6), processes=processes)
        )
        self.tell("signal_sent", at, signal=name, processes=processes)

    # -- the record -----------------------------------------------------------

    def facts_of(
        self, verdict: Verdict, tree: ProcessTree | None, remains: Remains, *, stragglers: int
    ) -> RunFacts:
        """What happened, as only the supervisor knows it, once the tree is reaped."""
        return RunFacts(
            spec=self.spec,
            started_at=self.started_at,
            started_monotonic=self.started_monotonic,
            finished_at=wall_clock_at(verdict.finished_at),
            supervisor_pid=os.getpid(),
            command_pid=None if tree is None else tree.leader,
            command_pgid=None if tree is None else tree.pgid,
            returncode=remains.returncode,
            hostname=os.uname().nodename,  # what socket.gethostname() says, without socket
            containment="sweep" if tree is None else tree.containment,
            signals=tuple(self.signals),
            descendants_stopped=0 if tree is None else len(tree.stopped),
            stragglers=stragglers,
            rusage=remains.usage,
            event_log_lines_dropped=None
            if self.event_log is None
            else self.event_log.lines_dropped,
            signals_without_pidfd=0 if tree is None else tree.signals_without_pidfd,
            tree_usage=remains.tree_usage,
            limits_enforced_by=remains.limits_enforced_by,
        )

    def record(self, verdict: Verdict, facts: RunFacts) -> None:
        """Write the record (when one was asked for), and the closing message.

        The record goes into the directory held since before the run, and
        nowhere else. Whatever stands in the way (a full disk, no descriptor
        left, the directory removed) is one line in the run's closing message
        and status 125. The message also says, in the same line, when the
        event log is missing or incomplete.
        """
        self.facts = facts
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

    # -- the caller's account -------------------------------------------------

    def exit_status(self, asked: int) -> int:
        """The status the core asked for, unless a record asked for was not written (125)."""
        failed = self.spec.record_path is not None and not self.record_written
        return TETHER_FAILED if failed else asked

    def finished(self, exit_status: int, *, outside_group: int) -> Finished:
        """The caller's ``finished``, from the verdict and the facts of :meth:`record`."""
        verdict, facts = self.verdict, self.facts
        assert verdict is not None
        assert facts is not None
        return Finished(
            reason=verdict.reason.value,
            exit_status=exit_status,
            returncode=facts.returncode,
            record=self.spec.record_path if self.record_written else None,
            message=self.message,
            errno=verdict.launch_errno,
            escalated_to_sigkill=verdict.escalated_to_sigkill,
            started_at=facts.started_at.isoformat(),
            finished_at=facts.finished_at.isoformat(),
            elapsed_seconds=round(verdict.finished_at - self.started_monotonic, 3),
            processes_stopped=_processes_stopped(verdict, facts),
            outside_group=outside_group,
            shutdown_seconds=verdict.shutdown_seconds,
            tree_usage=facts.tree_usage,
        )

    def record_so_far(self) -> str | None:
        """The record's path if it was written, for a supervisor that fails after."""
        return self.spec.record_path if self.record_written else None


def _processes_stopped(verdict: Verdict, facts: RunFacts) -> int:
    """How many processes tether stopped: the others it signalled, and the command if it did."""
    command = 1 if facts.signals and verdict.reason is not Reason.COMPLETED else 0
    return command + facts.descendants_stopped


def _words(error: BaseException) -> str:
    """The system's words for ``error``, without the file name ``str(OSError)`` adds."""
    if isinstance(error, OSError) and error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__

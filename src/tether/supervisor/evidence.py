"""The evidence a run leaves: its event log, its record, and the ``finished`` its caller gets.

One object, :class:`Evidence`, builds the three accounts from the same values (signals sent,
the run's one redactor, its start). The record must exist, the story may be missing
(docs/operators.md); lines are held and written once the turn has acted (docs/architecture.md,
"The adapter is thin"). ``structlog``, ``pathlib`` and the redactor load only for a record.
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

    def open_log(self, launched: Event, tree: ProcessTree | None) -> None:
        """Open the event log beside the record (if any), after the launch, and tell it of it."""
        path = self.spec.record_path
        if path is None:
            return
        from pathlib import Path

        from tether.shared.paths import events_path_for  # loaded with the record file

        events = events_path_for(Path(path))
        try:
            # Loaded now, while descriptors are to be had, not when the record is due.
            from tether.shared.secrets import redactor_for

            self.redactor = redactor_for(self.spec, os.environ)
            from tether.supervisor.event_log import EventLog

            self.log = self.event_log = EventLog.open(
                events, self.redactor, directory_fd=self.spec.fds.get("record_dir")
            )
        except (OSError, ImportError) as error:
            problem = getattr(error, "strerror", None) or str(error)
            self.event_log_problem = f"cannot write the event log {events}: {problem}"
            return
        # What the run was for, so a log without its record still names its run.
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
            event = "launched"
            said = {"pid": tree.leader, "pgid": tree.pgid, "containment": tree.containment}
        elif isinstance(launched, LaunchFailed):
            event = "launch_failed"
            said = {"errno": launched.errno, "error": launched.message, "stage": launched.stage}
        else:
            return
        self.log.emit(event, mono=launched.now, **said, **policy)

    @property
    def keeps_story(self) -> bool:
        """Whether an event log is open: without one, a line told is dropped unwritten."""
        return self.event_log is not None

    def tell(self, event: str, mono: float | None = None, /, **fields: object) -> None:
        """Hold one line for the event log, stamped ``mono`` (default: now), until :meth:`told`
        (without an event log, nothing: :attr:`keeps_story`)."""
        if self.event_log is None:
            return
        self.held.append((event, time.monotonic() if mono is None else mono, fields))

    def told(self) -> None:
        """Write the held lines, in the order they were told."""
        held, self.held = self.held, []
        for event, mono, fields in held:
            self.log.emit(event, mono=mono, **fields)

    def report(self, event: str, /, **fields: object) -> None:
        """What the tree reports, held as :meth:`tell` does; a failure here stops nothing."""
        with contextlib.suppress(Exception):
            self.tell(event, **fields)

    def signal_sent(self, name: str, now: float, processes: int, *, at: float) -> None:
        """Note a signal: in the record at ``now``, when the core decided; in the log at ``at``."""
        since_start = now - self.started_monotonic
        self.signals.append(
            SignalSent(signal=name, at_seconds=round(since_start, 6), processes=processes)
        )
        self.tell("signal_sent", at, signal=name, processes=processes)

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
        """Write the record, if asked for, through the held directory, and the closing message."""
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
        directory_fd = self.spec.fds.get("record_dir")
        if directory_fd is not None:
            with contextlib.suppress(OSError):
                os.close(directory_fd)

    def _event_log_trouble(self) -> str | None:
        log = self.event_log
        if log is None:
            return self.event_log_problem
        if not log.lines_dropped:
            return None
        return (
            f"the event log {log.path} is incomplete: {log.lines_dropped} line(s) "
            f"could not be written ({log.problem})"
        )

    def exit_status(self, asked: int) -> int:
        """The status the core asked for, unless a record asked for was not written (125)."""
        failed = self.spec.record_path is not None and not self.record_written
        return TETHER_FAILED if failed else asked

    def finished(self, exit_status: int, *, outside_group: int) -> Finished:
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
    """The system's words for ``error``, without the file name."""
    if isinstance(error, OSError) and error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__

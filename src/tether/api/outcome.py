"""How a run ended, as the Python API reports it: :class:`Outcome`, and the exceptions of
:mod:`subprocess`'s kind (docs/api.md, "Read outcomes and records", "Coming from subprocess")."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tether.core.reasons import Reason

if TYPE_CHECKING:
    from tether.api.handle import Tether
    from tether.core.spec import RunSpec
    from tether.shared.protocol import Finished, Started

__all__ = ["CommandFailed", "Outcome", "OutputDecodeError", "TimeoutExpired"]


class TimeoutExpired(subprocess.TimeoutExpired, TimeoutError):
    """``wait(timeout=)`` gave up (``tether`` is the handle), or ``run(timeout=)`` stopped the tree
    (``outcome`` says how). A :class:`subprocess.TimeoutExpired` and a :class:`TimeoutError`;
    a ``deadline`` is an outcome, not this. See docs/api.md, "Coming from subprocess".
    """

    def __init__(
        self,
        cmd: list[str],
        timeout: float,
        output: bytes | None = None,
        stderr: bytes | None = None,
        *,
        tether: Tether | None = None,
        outcome: Outcome | None = None,
    ) -> None:
        subprocess.TimeoutExpired.__init__(self, cmd, timeout, output, stderr)
        self.args = (cmd, timeout)
        self.tether = tether
        self.outcome = outcome

    def __str__(self) -> str:
        return f"Command '{_shown(self.cmd)}' timed out after {self.timeout} seconds"

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle everything but the handle, whose descriptors mean nothing elsewhere."""
        rebuild = functools.partial(TimeoutExpired, outcome=self.outcome)
        return (rebuild, (self.cmd, self.timeout, self.output, self.stderr))


class CommandFailed(subprocess.CalledProcessError):
    """``run(check=True)`` or :meth:`Outcome.check` on a run that did not succeed: a
    :class:`subprocess.CalledProcessError` with ``outcome`` (docs/api.md, "Coming from subprocess").
    """

    def __init__(self, outcome: Outcome) -> None:
        # None for a command that never ran (the stubs say int).
        code = cast(int, outcome.returncode)
        super().__init__(code, list(outcome.argv), outcome.stdout, outcome.stderr)
        self.args = (_failure_message(outcome),)
        self.outcome = outcome

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        return (CommandFailed, (self.outcome,))


class OutputDecodeError(UnicodeDecodeError):
    """Captured output did not decode (``text=True``): a :class:`UnicodeDecodeError` with the
    run's ``outcome``, the raw ``stdout``/``stderr`` and the ``stream``; see docs/api.md."""

    outcome: Outcome
    stdout: bytes | None
    stderr: bytes | None
    stream: str

    def __str__(self) -> str:
        said = super().__str__()
        outcome = getattr(self, "outcome", None)
        if outcome is None:
            return said
        return f"{getattr(self, 'stream', 'output')} of the command: {said} ({outcome})"


def _shown(argv: Sequence[str]) -> list[str]:
    """The command line for a message, secrets redacted (it may be logged)."""
    from tether.core.redaction import redact_argv

    return redact_argv(argv)


def _failure_message(outcome: Outcome) -> str:
    """``CalledProcessError``'s sentence as this Python writes it for a run that completed (the
    label after the command, the details before the period); the reason for any other run."""
    shown = _shown(outcome.argv)
    label = f" ({outcome.label})" if outcome.label else ""
    code = outcome.returncode
    completed = outcome.reason is Reason.COMPLETED and code is not None and code != 0
    if completed and code is not None and (code == outcome.exit_status or code < 0):
        sentence = str(subprocess.CalledProcessError(code, shown))
        command, verb, said = sentence.rpartition(" died with " if code < 0 else " returned ")
        return command + label + verb + said.removesuffix(".") + _failure_details(outcome) + "."
    said = f"ended with reason {outcome.reason.value}, exit status {outcome.exit_status}"
    return f"Command '{shown}'{label} {said}{_failure_details(outcome)}."


def _failure_details(outcome: Outcome) -> str:
    return (" (the kernel's OOM killer ended it)" if outcome.oom_killed else "") + (
        f": {outcome.message}" if outcome.message else ""
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one run ended: what the supervisor reported, plus where its record is.

    ``exit_status`` is what ``tether run`` would exit with, ``returncode`` the command's own
    (negative for a signal). Every field: docs/api.md, "Read outcomes and records".
    """

    reason: Reason
    exit_status: int
    returncode: int | None
    escalated_to_sigkill: bool
    record_path: Path | None
    message: str | None = None
    label: str | None = None
    pid: int | None = None
    supervisor_pid: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    elapsed_seconds: float | None = None
    argv: tuple[str, ...] = field(default=(), repr=False)  # it may hold credentials
    no_record_reason: str | None = None
    deadline_seconds: float | None = None
    processes_stopped: int | None = None
    outside_group: int | None = None
    shutdown_seconds: float | None = None

    stdout: bytes | str | None = field(default=None, repr=False)
    stderr: bytes | str | None = field(default=None, repr=False)
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    oom_killed: bool | None = None
    cpu_seconds: float | None = None
    memory_peak_bytes: int | None = None
    memory_max: int | None = None

    @property
    def oom_summary(self) -> str | None:
        """``killed by the OOM killer at its memory limit of 512 MiB`` if it was, else ``None``."""
        if not self.oom_killed:
            return None
        from tether.core.limits import oom_summary

        return oom_summary(self.memory_max)

    def __str__(self) -> str:
        """The verdict line, as ``tether run -v`` prints it."""
        from tether.caller.verdict import verdict_line

        return verdict_line(
            self,
            deadline_seconds=self.deadline_seconds,
            record=None if self.record_path is None else str(self.record_path),
            no_record_reason=self.no_record_reason,
            oom=self.oom_summary,
        )

    def __repr__(self) -> str:
        import dataclasses

        shown = [
            f"{item.name}={getattr(self, item.name)!r}"
            for item in dataclasses.fields(self)
            if item.repr
        ]
        oom = self.oom_summary
        if oom is not None:
            shown.insert(0, f"oom_summary={oom!r}")
        return f"{type(self).__qualname__}({', '.join(shown)})"

    @classmethod
    def from_finished(cls, finished: Finished, spec: RunSpec, started: Started | None) -> Outcome:
        """The outcome the ``finished`` message (the supervisor's, or the caller's own) tells."""
        try:
            reason = Reason(finished.reason)
        except ValueError:
            reason = Reason.SUPERVISOR_LOST
        return cls(
            reason=reason,
            exit_status=finished.exit_status,
            returncode=finished.returncode,
            escalated_to_sigkill=finished.escalated_to_sigkill,
            record_path=None if finished.record is None else Path(finished.record),
            message=finished.message,
            label=spec.label,
            pid=None if started is None else started.pid,
            supervisor_pid=None if started is None else started.supervisor_pid,
            started_at=_moment(finished.started_at),
            finished_at=_moment(finished.finished_at),
            elapsed_seconds=finished.elapsed_seconds,
            argv=spec.argv,
            no_record_reason=spec.no_record_reason if finished.record is None else None,
            deadline_seconds=spec.deadline_seconds,
            processes_stopped=finished.processes_stopped,
            outside_group=finished.outside_group,
            shutdown_seconds=finished.shutdown_seconds,
            memory_max=_memory_max(spec.limits),
            **_tree_usage(finished.tree_usage),
        )

    @property
    def ok(self) -> bool:
        """Whether the command completed with status 0 and its record (if any) was written."""
        return self.exit_status == 0

    def check(self) -> Outcome:
        """Return this outcome if :attr:`ok`; raise :class:`CommandFailed` otherwise."""
        if not self.ok:
            raise CommandFailed(self)
        return self

    def check_returncode(self) -> None:
        """:meth:`check`, by :class:`subprocess.CompletedProcess`'s name."""
        self.check()

    @property
    def args(self) -> list[str]:
        """The command line, by :class:`subprocess.CompletedProcess`'s name (``argv``)."""
        return list(self.argv)

    def read_record(self) -> dict[str, object]:
        """The run's full JSON record; ``ValueError`` without one, ``RecordError`` if unreadable."""
        if self.record_path is None:
            why = self.no_record_reason or "it was launched with record=False"
            raise ValueError(f"this run kept no record ({why})")
        from tether.shared.record_file import read_record

        return read_record(self.record_path)


def _memory_max(limits: dict[str, int | float] | None) -> int | None:
    value = None if limits is None else limits.get("memory_max")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tree_usage(usage: dict[str, int | float | None] | None) -> dict[str, Any]:
    if usage is None:
        return {}
    kills, cpu, peak = (usage.get(key) for key in ("oom_kills", "cpu_seconds", "memory_peak_bytes"))
    return {
        "oom_killed": None if kills is None else kills > 0,
        "cpu_seconds": None if cpu is None else float(cpu),
        "memory_peak_bytes": None if peak is None else int(peak),
    }


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None

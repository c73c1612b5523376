"""How a run ended, as the Python API reports it: :class:`Outcome`, and two exceptions.

:class:`Outcome` is frozen and typed: the reason as an enum, the exit status
``tether run`` would exit with, the command's own return code the
:mod:`subprocess` way, and where the full record is. Waiting that gives up
or a ``timeout`` that ran out (:class:`TimeoutExpired`) and a run that did not
succeed under ``check=True`` (:class:`CommandFailed`) are exceptions, and
:mod:`subprocess`'s own, so code written for ``subprocess.run`` catches them;
a command stopped at its ``deadline`` is not, it is an outcome.
"""

from __future__ import annotations

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
    """A time limit of :mod:`subprocess`'s kind ran out: a :class:`subprocess.TimeoutExpired`.

    Raised by :meth:`Tether.wait` with ``timeout`` (the command is still
    running, as after :meth:`subprocess.Popen.wait`; ``tether`` is its
    handle), and by ``run(..., timeout=...)`` (the whole tree has been
    stopped and the record written; ``outcome`` says how, and ``output``/
    ``stdout`` and ``stderr`` hold what was captured so far, as bytes, as
    :mod:`subprocess` gives them). Also a :class:`TimeoutError`.

    A command stopped at its ``deadline`` is not an exception: it is an
    :class:`Outcome` with reason ``DEADLINE_EXCEEDED``.
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
        """Pickle everything but the handle.

        A :class:`Tether` holds descriptors of this process (the lifeline, the
        status channel) that mean nothing in another one, so a copy made by
        :mod:`pickle` (a Ray task returning the exception, a
        ``multiprocessing`` worker raising it) has ``tether = None``.
        """
        return (
            _rebuild_timeout_expired,
            (self.cmd, self.timeout, self.output, self.stderr, self.outcome),
        )


def _rebuild_timeout_expired(
    cmd: list[str],
    timeout: float,
    output: bytes | None,
    stderr: bytes | None,
    outcome: Outcome | None,
) -> TimeoutExpired:
    return TimeoutExpired(cmd, timeout, output, stderr, outcome=outcome)


class CommandFailed(subprocess.CalledProcessError):
    """Raised by ``run(..., check=True)`` and :meth:`Outcome.check` when the run did not succeed.

    A :class:`subprocess.CalledProcessError`, with its attributes
    (``returncode``, ``cmd``, ``stdout``/``output``, ``stderr``) and its
    message (``Command '['false']' returned non-zero exit status 1.``), so an
    ``except`` clause written for ``subprocess.run`` catches it and reads the
    same; ``outcome`` says the rest. A run that did not simply complete says
    its reason instead (``Command '['sleep', '60']' ended with reason
    deadline_exceeded, exit status 124.``). The command line in the message is
    redacted; ``cmd`` is the command line itself, as in :mod:`subprocess`.
    """

    def __init__(self, outcome: Outcome) -> None:
        # ``returncode`` is None for a command that never ran (the stubs say int).
        code = cast(int, outcome.returncode)
        super().__init__(code, list(outcome.argv), outcome.stdout, outcome.stderr)
        self.args = (_failure_message(outcome),)
        self.outcome = outcome

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the outcome it was made from (an :class:`Outcome` pickles whole)."""
        return (CommandFailed, (self.outcome,))


class OutputDecodeError(UnicodeDecodeError):
    """Raised by ``run(..., text=True)`` (or ``encoding=``) when captured output does not decode.

    A :class:`UnicodeDecodeError`, as :mod:`subprocess` raises, with its
    attributes (``encoding``, ``object``, ``start``, ``end``, ``reason``), and
    what ``subprocess`` loses: ``outcome``, the run's :class:`Outcome`, whole
    (reason, status, ``oom_killed``, record), with ``stdout`` and ``stderr`` as
    the raw bytes captured; ``stdout`` and ``stderr``, those bytes again
    (``None`` for a stream not captured); and ``stream``, the one that did not
    decode (``"stdout"`` or ``"stderr"``). The run is over and recorded when
    it is raised. ``errors="replace"`` (or another handler) avoids it.
    """

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
    """The command line for a message: secret values redacted (the message may be logged)."""
    from tether.core.redaction import redact_argv

    return redact_argv(argv)


def _failure_message(outcome: Outcome) -> str:
    """``CalledProcessError``'s sentence for a run that completed, the reason for any other.

    The sentence is the one this Python's :mod:`subprocess` writes (3.15 no longer
    quotes a list in ``returned non-zero exit status``), with the label after the
    command and the details before the final period.
    """
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

    ``exit_status`` is the status ``tether run`` would exit with (the
    command's own, 128+N for signal N, 124 deadline, 125 tether failed, 126/127
    cannot execute / not found, 130 cancelled or caller lost); ``returncode``
    is the command's own, the :mod:`subprocess` way (negative for a signal,
    ``None`` if it never ran or its end is unknown). The times are the
    supervisor's (the caller's own when the supervisor was lost); ``None`` only
    when a time could not be read. ``record_path`` is ``None`` when no record
    was kept: none was asked for (``record=False``); the default directory
    could not be used, which ``no_record_reason`` says (the run went ahead
    without one); or it could not be written, which ``message`` then says.
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
    #: The command line, kept out of the repr: it may hold credentials.
    argv: tuple[str, ...] = field(default=(), repr=False)
    #: Why no record was kept although one was meant to be (the default
    #: directory could not be made or written); ``None`` otherwise.
    no_record_reason: str | None = None
    #: The deadline the run had, in seconds; ``None`` for none.
    deadline_seconds: float | None = None
    #: How many processes tether stopped, how many of them had left the
    #: command's process group, and how long stopping took; ``None``: not said.
    processes_stopped: int | None = None
    outside_group: int | None = None
    shutdown_seconds: float | None = None

    #: What ``run()`` captured (``stdout=PIPE``, ``capture_output=True``): bytes,
    #: or text with ``text=True``; ``None`` for a stream not captured. Kept out
    #: of the repr (it may be long, and hold secrets).
    stdout: bytes | str | None = field(default=None, repr=False)
    stderr: bytes | str | None = field(default=None, repr=False)
    #: Bytes of ``stdout``/``stderr`` dropped between the head and the tail kept
    #: (``max_output_bytes``); 0 when everything was kept.
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    #: Whether the kernel's OOM killer ended processes of the tree (with
    #: ``memory_max``: the tree went over it, and was killed as a whole);
    #: ``None`` where the run had no cgroup with memory accounting.
    oom_killed: bool | None = None
    #: CPU seconds of the whole tree, and the most memory it held at once, from
    #: its cgroup; ``None`` without one (or where the kernel does not count it).
    cpu_seconds: float | None = None
    memory_peak_bytes: int | None = None
    #: The ``memory_max`` the run had, in bytes; ``None`` for none.
    memory_max: int | None = None

    @property
    def oom_summary(self) -> str | None:
        """``killed by the OOM killer at its memory limit of 512 MiB`` if it was, else ``None``.

        What ``str()`` and ``repr()`` lead with, as ``tether show`` and ``tether
        ls`` do: :attr:`reason` stays ``COMPLETED`` (the kernel, not tether,
        stopped the command), so test :attr:`oom_killed` first.
        """
        if not self.oom_killed:
            return None
        from tether.core.limits import oom_summary

        return oom_summary(self.memory_max)

    def __str__(self) -> str:
        """The verdict line, as ``tether run -v`` prints it: what ended the run, what tether did.

        ``deadline 2s passed (status 124); stopped 3 processes (1 outside the
        group) in 1.2 ms; record /.../runs/...json``; led by :attr:`oom_summary`
        when the OOM killer acted.
        """
        from tether.caller.verdict import verdict_line

        return verdict_line(
            self,
            deadline_seconds=self.deadline_seconds,
            record=None if self.record_path is None else str(self.record_path),
            no_record_reason=self.no_record_reason,
            oom=self.oom_summary,
        )

    def __repr__(self) -> str:
        """The dataclass's repr, led by :attr:`oom_summary` when the OOM killer acted."""
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
        """Return the full JSON record of the run.

        Raises :class:`ValueError` if the run kept no record (``record=False``)
        and :class:`tether.shared.record_file.RecordError` (an :class:`OSError`) if it
        cannot be read.
        """
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
    kills, cpu, peak = (
        usage.get("oom_kills"),
        usage.get("cpu_seconds"),
        usage.get("memory_peak_bytes"),
    )
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

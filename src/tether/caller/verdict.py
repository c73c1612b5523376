"""The verdict line: what ended a run and what tether did about it, in one line for a person.

``tether run -v`` and ``str(outcome)``, built from the ``finished`` message and the request
alone (docs/cli.md).
"""

from __future__ import annotations

from tether.core.reasons import Reason
from tether.shared.signals import described

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    class Told(Protocol):
        """What a run's end says, as ``Finished`` and ``Outcome`` both carry it."""

        @property
        def reason(self) -> str: ...
        @property
        def exit_status(self) -> int: ...
        @property
        def returncode(self) -> int | None: ...
        @property
        def escalated_to_sigkill(self) -> bool: ...
        @property
        def processes_stopped(self) -> int | None: ...
        @property
        def outside_group(self) -> int | None: ...
        @property
        def shutdown_seconds(self) -> float | None: ...
        @property
        def message(self) -> str | None: ...


__all__ = ["oom_of", "verdict_line"]


def verdict_line(
    told: Told,
    *,
    deadline_seconds: float | None,
    record: str | None,
    no_record_reason: str | None = None,
    oom: str | None = None,
) -> str:
    """The verdict: what ended the run (the OOM killer first), what stopping took, the record or
    why none."""
    parts = [_what_ended(told, deadline_seconds)]
    if oom is not None:
        parts[0] = f"{oom}: {parts[0]}"
    stopped = _what_tether_did(told)
    if stopped:
        parts.append(stopped)
    if record is not None:
        parts.append(f"record {record}")
    elif no_record_reason is not None:
        parts.append(f"no record ({no_record_reason})")
    else:
        parts.append("no record")
    return "; ".join(parts)


def _what_ended(told: Told, deadline_seconds: float | None) -> str:
    reason, exit_status, returncode = told.reason, told.exit_status, told.returncode
    if reason == Reason.COMPLETED:
        if returncode is not None and returncode < 0:
            return f"the command was killed by {described(-returncode)} (status {exit_status})"
        return f"the command exited with status {returncode if returncode is not None else '?'}"
    if reason == Reason.DEADLINE_EXCEEDED:
        from tether.core.durations import format_duration

        limit = "" if deadline_seconds is None else f" {format_duration(deadline_seconds)}"
        return f"deadline{limit} passed (status {exit_status})"
    if reason == Reason.LAUNCH_FAILED:
        return f"the command could not be started: {told.message or '?'} (status {exit_status})"
    words = _ENDINGS.get(reason, reason)
    return f"{words} (status {exit_status})"


_ENDINGS: dict[str, str] = {
    Reason.CANCELLED: "cancelled",
    Reason.IDLE_EXCEEDED: "idle too long: no output and no CPU time for the idle bound",
    Reason.PARENT_LOST: "the caller was lost",
    Reason.SUPERVISOR_LOST: "the supervisor was lost",
}


def _what_tether_did(told: Told) -> str | None:
    processes, outside, seconds = told.processes_stopped, told.outside_group, told.shutdown_seconds
    if not processes:
        return None
    noun = "process" if processes == 1 else "processes"
    text = f"stopped {processes} {noun}"
    if outside:
        text += f" ({outside} outside the group)"
    if seconds is not None:
        text += f" in {_short_time(seconds)}"
    if told.escalated_to_sigkill:
        text += ", SIGKILL needed"
    return text


def _short_time(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def oom_of(oom_kills: object, limits: dict[str, int | float] | None) -> str | None:
    """What the verdict leads with when the tree had OOM kills (``tree_usage``'s count)."""
    if not isinstance(oom_kills, int) or isinstance(oom_kills, bool) or oom_kills <= 0:
        return None
    from tether.core.limits import oom_summary

    return oom_summary(None if limits is None else limits.get("memory_max"))

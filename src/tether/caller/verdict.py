"""The verdict line: what ended a run and what tether did about it, in one line for a person.

``tether run -v`` prints it on stderr and ``str(outcome)`` in the API returns
it, so the person who ran the command learns at once what the record would
tell them: ``deadline 2s passed; stopped 3 processes (1 outside the group) in
1.2 ms; record /home/me/.local/state/tether/runs/...json``. It is built from
the ``finished`` message and the request alone: no file is read to say it.

Caller side: standard library only, and nothing imported until it is used.
"""

from __future__ import annotations

from tether.core.reasons import Reason
from tether.shared.signals import described

__all__ = ["verdict_line"]


def verdict_line(
    *,
    reason: str,
    exit_status: int,
    returncode: int | None,
    deadline_seconds: float | None,
    escalated_to_sigkill: bool,
    processes_stopped: int | None,
    outside_group: int | None,
    shutdown_seconds: float | None,
    record: str | None,
    no_record_reason: str | None = None,
    message: str | None = None,
) -> str:
    """The verdict: what ended the run; what stopping took; where the record is, or why none."""
    parts = [_what_ended(reason, exit_status, returncode, deadline_seconds, message)]
    stopped = _what_tether_did(
        processes_stopped, outside_group, shutdown_seconds, escalated_to_sigkill
    )
    if stopped:
        parts.append(stopped)
    if record is not None:
        parts.append(f"record {record}")
    elif no_record_reason is not None:
        parts.append(f"no record ({no_record_reason})")
    else:
        parts.append("no record")
    return "; ".join(parts)


def _what_ended(
    reason: str,
    exit_status: int,
    returncode: int | None,
    deadline_seconds: float | None,
    message: str | None,
) -> str:
    if reason == Reason.COMPLETED:
        if returncode is not None and returncode < 0:
            return f"the command was killed by {described(-returncode)} (status {exit_status})"
        return f"the command exited with status {returncode if returncode is not None else '?'}"
    if reason == Reason.DEADLINE_EXCEEDED:
        from tether.core.durations import format_duration

        limit = "" if deadline_seconds is None else f" {format_duration(deadline_seconds)}"
        return f"deadline{limit} passed (status {exit_status})"
    if reason == Reason.LAUNCH_FAILED:
        return f"the command could not be started: {message or '?'} (status {exit_status})"
    words = _ENDINGS.get(reason, reason)
    return f"{words} (status {exit_status})"


_ENDINGS: dict[str, str] = {
    Reason.CANCELLED: "cancelled",
    Reason.PARENT_LOST: "the caller was lost",
    Reason.SUPERVISOR_LOST: "the supervisor was lost",
}


def _what_tether_did(
    processes: int | None, outside: int | None, seconds: float | None, escalated: bool
) -> str | None:
    if not processes:
        return None
    noun = "process" if processes == 1 else "processes"
    text = f"stopped {processes} {noun}"
    if outside:
        text += f" ({outside} outside the group)"
    if seconds is not None:
        text += f" in {_short_time(seconds)}"
    if escalated:
        text += ", SIGKILL needed"
    return text


def _short_time(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"

"""The private JSON record a run leaves behind, built once from what happened (every field:
``tether/schema/record.v1.json`` and docs/record.md).
"""

from __future__ import annotations

import errno as errno_codes
import functools
import os
from datetime import UTC

from tether._version import __version__
from tether.core.durations import seconds_for_json
from tether.core.effects import Verdict
from tether.core.limits import LIMIT_NAMES
from tether.core.reasons import TETHER_FAILED, Reason
from tether.core.spec import command_name, script_name
from tether.core.values import DeclaredValue
from tether.shared.record_file import RECORD_SCHEMA_VERSION, record_schema

TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import datetime
    from typing import Final

    from tether.core.spec import RunSpec

__all__ = [
    "CONTAINMENTS",
    "ResourceUsage",
    "RunFacts",
    "SignalSent",
    "build_document",
    "build_lost_document",
    "record_keys",
]

#: How a supervisor can contain the command's tree (the record's ``containment``;
#: a caller's fallback record says ``unknown``).
CONTAINMENTS: Final = frozenset({"process_group", "sweep", "cgroup"})


class SignalSent(DeclaredValue):
    """One signal sent to the command's tree: which, when (from the run's start), to how many."""

    signal: str
    at_seconds: float
    processes: int


class ResourceUsage(DeclaredValue):
    """What the command's tree cost, from ``wait4``: CPU seconds and peak memory."""

    user_seconds: float
    system_seconds: float
    max_rss_kib: int


class RunFacts(DeclaredValue, kw_only=True):
    """What only the supervisor knows about a run; the core's :class:`Verdict` knows the rest.
    Never checked here: a record must not be lost to a check."""

    spec: RunSpec
    #: Wall-clock (timezone-aware), for people; ``started_monotonic``, for the verdict's times.
    started_at: datetime
    started_monotonic: float
    finished_at: datetime
    supervisor_pid: int | None
    command_pid: int | None
    command_pgid: int | None
    #: As the supervisor finally reaped it (``subprocess`` style; ``None``: never ran or reaped).
    returncode: int | None
    hostname: str
    #: One of :data:`CONTAINMENTS`.
    containment: str
    signals: tuple[SignalSent, ...] = ()
    descendants_stopped: int = 0
    #: Processes still running after the command exited on its own, which had to be stopped.
    stragglers: int = 0
    rusage: ResourceUsage | None = None
    #: Signals sent by pid because no pidfd could be had.
    signals_without_pidfd: int = 0
    #: The event log's lost lines (``None``: no event log).
    event_log_lines_dropped: int | None = None
    #: What the tree used, from its cgroup, by the record's names (``None``: no cgroup of its own).
    tree_usage: dict[str, int | float | None] | None = None
    #: Each limit and what enforced it (``cgroup2``, ``cgroup1``, ``systemd-scope``).
    limits_enforced_by: dict[str, str] | None = None


def _iso(moment: datetime) -> str:
    """``moment`` in ISO 8601, in UTC, as the seed wrote it (a naive one is taken as UTC)."""
    if moment.utcoffset() is None:
        return moment.replace(tzinfo=UTC).isoformat()
    return moment.astimezone(UTC).isoformat()


def _seconds(value: float) -> float:
    """Round a duration to the millisecond, as the seed did; never below zero."""
    return round(max(value, 0.0), 3)


def _launch_error(verdict: Verdict) -> dict[str, object] | None:
    """The launch error's errno, its name and a message (with an errno, the bare ``strerror``:
    the supervisor's own message quotes the argv), or ``None``."""
    number, message = verdict.launch_errno, verdict.launch_error
    if number is None and message is None:
        return None
    if number is not None:
        message = os.strerror(number)
    name = None if number is None else errno_codes.errorcode.get(number)
    return {"errno": number, "errno_name": name, "message": message}


def _signals(signals: tuple[SignalSent, ...]) -> list[dict[str, object]]:
    return [
        {
            "signal": sent.signal,
            "at_seconds": _seconds(sent.at_seconds),
            "processes": sent.processes,
        }
        for sent in signals
    ]


def _rusage(usage: ResourceUsage | None) -> dict[str, object] | None:
    if usage is None:
        return None
    return {
        "user_seconds": _seconds(usage.user_seconds),
        "system_seconds": _seconds(usage.system_seconds),
        "max_rss_kib": usage.max_rss_kib,
    }


#: The most characters of the command line a record keeps (``--record-argv``): even as
#: ``\\u`` escapes far below the 1 MiB a reader of records accepts (an argv can be 2 MiB).
MAX_ARGV_CHARACTERS: Final = 32_768


def _what_ran(spec: RunSpec) -> dict[str, object]:
    """The command's name, its working directory and, when asked for, its argv (redacted, cut at
    :data:`MAX_ARGV_CHARACTERS`); docs/record.md says why no more."""
    argv = None
    if spec.record_argv:
        # Only for a record, and only when asked: a run without one never loads the redactor.
        from tether.core.redaction import redact_argv

        argv = _bounded_argv(redact_argv(spec.argv))
    return {
        "command": command_name(spec.argv),
        "script": script_name(spec.argv),
        "cwd": spec.cwd,
        "argv": argv,
    }


def _bounded_argv(words: list[str]) -> list[str]:
    kept: list[str] = []
    budget = MAX_ARGV_CHARACTERS
    for index, word in enumerate(words):
        if len(word) > budget:
            kept.append(word[:budget])
            kept.append(f"[cut: {len(words) - index} words no longer kept in full]")
            return kept
        kept.append(word)
        budget -= len(word)
    return kept


def _idle(spec: RunSpec, verdict: Verdict | None) -> dict[str, object]:
    """The idle bound asked for, and how long the run had been idle when it was stopped for it."""
    measured = None if verdict is None else verdict.idle_seconds
    return {
        "idle_seconds": spec.idle_seconds,
        "idle_measured_seconds": None if measured is None else _seconds(measured),
    }


def _deadline(spec: RunSpec) -> float:
    """The deadline as the seed's record says it: ``0`` for none."""
    return 0 if spec.deadline_seconds is None else spec.deadline_seconds


def build_document(verdict: Verdict, facts: RunFacts) -> dict[str, object]:
    """The record of a run the supervisor saw to its end."""
    shutdown = verdict.shutdown_seconds
    return {
        # The seed's fields, in the seed's order.
        "schema_version": RECORD_SCHEMA_VERSION,
        "variant": facts.spec.label,
        "reason": verdict.reason.value,
        "started_at": _iso(facts.started_at),
        "finished_at": _iso(facts.finished_at),
        "elapsed_seconds": _seconds(verdict.finished_at - facts.started_monotonic),
        "deadline_seconds": _deadline(facts.spec),
        "grace_seconds": seconds_for_json(facts.spec.grace_seconds),
        "supervisor_pid": facts.supervisor_pid,
        "eval_pid": facts.command_pid,
        "eval_process_group": facts.command_pgid,
        # As subprocess reports it: negative means killed by that signal.
        "eval_exit_code": facts.returncode,
        "supervisor_exit_code": verdict.exit_status,
        "escalated_to_sigkill": verdict.escalated_to_sigkill,
        "shutdown_seconds": None if shutdown is None else _seconds(shutdown),
        # What an operator needs beyond the seed.
        "tether_version": __version__,
        "hostname": facts.hostname,
        **_what_ran(facts.spec),
        "containment": facts.containment,
        "signals": _signals(facts.signals),
        "descendants_stopped": facts.descendants_stopped,
        "stragglers": facts.stragglers,
        "unkillable": verdict.unkillable,
        "rusage": _rusage(facts.rusage),
        "launch_error": _launch_error(verdict),
        "tether_error": None,
        "signals_without_pidfd": facts.signals_without_pidfd,
        "event_log_lines_dropped": facts.event_log_lines_dropped,
        **_tree_fields(facts),
        **_idle(facts.spec, verdict),
    }


def _tree_fields(facts: RunFacts) -> dict[str, object]:
    """The limits asked for, what the tree used, whether the OOM killer acted (``null``: n/a)."""
    limits = facts.spec.limits
    usage = facts.tree_usage
    kills = None if usage is None else usage.get("oom_kills")
    return {
        "limits": {name: limits.get(name) for name in LIMIT_NAMES} if limits else None,
        "limits_enforced_by": None
        if not limits or not facts.limits_enforced_by
        else {name: facts.limits_enforced_by.get(name) for name in LIMIT_NAMES},
        "tree_usage": None if usage is None else dict(usage),
        "oom_killed": None if kills is None else kills > 0,
    }


def build_lost_document(
    spec: RunSpec,
    *,
    started_at: datetime,
    finished_at: datetime,
    elapsed_seconds: float,
    supervisor_pid: int | None,
    command_pid: int | None,
    command_pgid: int | None,
    message: str,
    hostname: str | None = None,
) -> dict[str, object]:
    """The record a caller writes when its supervisor vanished: what it knows, and ``null``
    (not a reassuring ``0``) for what only a supervisor counts; ``message`` is ``tether_error``."""
    verdict = Verdict(
        reason=Reason.SUPERVISOR_LOST, exit_status=TETHER_FAILED, finished_at=elapsed_seconds
    )
    facts = RunFacts(
        spec=spec,
        started_at=started_at,
        started_monotonic=0.0,
        finished_at=finished_at,
        supervisor_pid=supervisor_pid,
        command_pid=command_pid,
        command_pgid=command_pgid,
        returncode=None,
        hostname=os.uname().nodename if hostname is None else hostname,
        containment="unknown",
    )
    unknown = ("descendants_stopped", "stragglers", "signals_without_pidfd", "limits")
    document = build_document(verdict, facts) | dict.fromkeys(unknown)
    return document | {"tether_error": " ".join(message.split())}


@functools.cache
def record_keys() -> frozenset[str]:
    """Every field name the record can hold, at any depth, from the shipped schema: the
    redactor's own keys, never scrubbed, so a record keeps its shape."""
    keys: set[str] = set()
    todo: list[object] = [record_schema()]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                keys.update(properties)
            todo += node.values()
        elif isinstance(node, list):
            todo += node
    return frozenset(keys)

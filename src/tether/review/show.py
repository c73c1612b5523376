"""``tether show``: one run told for a person (a verdict, then a timeline), or as JSON."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from tether.core.limits import LIMITS
from tether.core.reasons import Reason
from tether.review._text import (
    _REASON_WORDS,
    _REQUEST_WORDS,
    _STATUS_WORDS,
    _int,
    _local,
    _number,
    _oom_lead,
    _Paint,
    _path_text,
    _plural,
    _policy_text,
    _returncode_text,
    _safe,
    _seconds_text,
)
from tether.review.files import RunFiles
from tether.review.progress import RUNNING
from tether.shared.signals import described

_LABEL_WIDTH: Final = 13


class _Lines:
    """A ``name  value`` block with aligned values."""

    def __init__(self, paint: _Paint) -> None:
        self.paint = paint
        self.lines: list[str] = []

    def add(self, name: str, value: str) -> None:
        self.lines.append(f"  {self.paint.dim(name.ljust(_LABEL_WIDTH))} {value}")

    def more(self, value: str) -> None:
        self.lines.append(f"  {' ' * _LABEL_WIDTH} {value}")


def _exit_status_text(record: Mapping[str, object]) -> str:
    status = _int(record.get("supervisor_exit_code"))
    if status is None:
        return "?"
    if record.get("reason") == Reason.COMPLETED:
        code = _int(record.get("eval_exit_code"))
        if code is not None and code < 0:
            return f"{status} (128+{-code}: the command was killed by {described(-code)})"
        return f"{status} (the command's own)"
    if record.get("reason") == Reason.IDLE_EXCEEDED:
        return f"{status} (idle bound passed)"
    words = _STATUS_WORDS.get(status)
    return f"{status} ({words})" if words else str(status)


def _command_text(record: Mapping[str, object]) -> str:
    """The command's name (records since 0.2), its pid and how it ended."""
    name, script = record.get("command"), record.get("script")
    named = f"{_safe(name)}, " if isinstance(name, str) and name else ""
    if isinstance(script, str) and script:
        ran = _safe(script)
        named = f"{ran}, " if ran.startswith(f"{_safe(name)} ") else f"{_safe(name)} ({ran}), "
    return named + _process_text(record)


def _argv_text(record: Mapping[str, object]) -> str | None:
    """The command line, when the record kept it (``--record-argv``), quoted as a shell would."""
    argv = record.get("argv")
    if not isinstance(argv, list):
        return None
    import shlex

    return _safe(shlex.join(word if isinstance(word, str) else _safe(word) for word in argv))


def _directory_text(record: Mapping[str, object]) -> str | None:
    cwd = record.get("cwd")
    return _safe(cwd) if isinstance(cwd, str) else None


def _process_text(record: Mapping[str, object]) -> str:
    pid, pgid = _int(record.get("eval_pid")), _int(record.get("eval_process_group"))
    code = _int(record.get("eval_exit_code"))
    if pid is None:
        return "never started" if record.get("reason") == Reason.LAUNCH_FAILED else "unknown"
    who = f"pid {pid}" + (f" (group {pgid})" if pgid is not None and pgid != pid else "")
    if code is not None:
        return f"{who}, {_returncode_text(code)}"
    if record.get("reason") == Reason.SUPERVISOR_LOST:
        return f"{who}, fate unknown (the supervisor was lost; check that it is gone)"
    return f"{who}, not reaped"


def _escalation_text(record: Mapping[str, object], paint: _Paint) -> str:
    shutdown = record.get("shutdown_seconds")
    after = f"; tree gone {_seconds_text(shutdown)} after the first SIGTERM" if shutdown else ""
    if record.get("escalated_to_sigkill") is True:
        return paint("yes", "33") + f": {_why_sigkill(record)}{after}"
    return "no (nothing had to be stopped)" if shutdown is None else f"no{after}"


def _first_at(record: Mapping[str, object], name: str) -> float | None:
    sent = record.get("signals")
    for item in sent if isinstance(sent, list) else []:
        if isinstance(item, Mapping) and item.get("signal") == name:
            return _number(item.get("at_seconds"))
    return None


def _why_sigkill(record: Mapping[str, object]) -> str:
    """Whether SIGKILL came because the grace ran out or because someone asked for it."""
    term, kill = _first_at(record, "SIGTERM"), _first_at(record, "SIGKILL")
    grace = _number(record.get("grace_seconds"))
    if term is None:
        return "SIGKILL at once (a kill was asked for)"
    if kill is not None and grace is not None and kill - term < grace - 0.001:
        return "SIGKILL before the grace was over (a kill was asked for)"
    return "SIGKILL after the grace"


def _signal_lines(record: Mapping[str, object]) -> list[str]:
    sent = record.get("signals")
    if not isinstance(sent, list) or not sent:
        return ["none"]
    lines: list[str] = []
    for item in sent:
        if not isinstance(item, Mapping):
            continue
        lines.append(
            f"{_safe(item.get('signal'))} at {_seconds_text(item.get('at_seconds'))} "
            f"to {_plural(item.get('processes'), 'process', 'processes')}"
        )
    return lines or ["none"]


def _descendants_text(record: Mapping[str, object]) -> str:
    stopped, stragglers = record.get("descendants_stopped"), record.get("stragglers")
    if stopped is None and stragglers is None:
        return "unknown"
    if record.get("eval_pid") is None and not stopped:
        return "none (the command never started)"
    if record.get("reason") != Reason.COMPLETED:  # a stopped command's others: the timeline
        return f"{_safe(stopped)} stopped"
    left = f"{_safe(stragglers)} left running when the command exited on its own"
    return f"{_safe(stopped)} stopped; {left}"


def _rusage_text(record: Mapping[str, object]) -> str | None:
    usage = record.get("rusage")
    if not isinstance(usage, Mapping):
        return None
    rss = _number(usage.get("max_rss_kib"))
    memory = "?" if rss is None else f"{rss / 1024:.1f} MiB"
    return (
        f"user {_seconds_text(usage.get('user_seconds'))}, "
        f"system {_seconds_text(usage.get('system_seconds'))}, peak RSS {memory}"
    )


def _size_text(value: object) -> str:
    size = _number(value)
    if size is None:
        return "?"
    for unit, power in (("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if size >= 1024**power:
            return f"{size / 1024**power:.1f} {unit}"
    return f"{size:.0f} B"


def _limits_text(record: Mapping[str, object]) -> str | None:
    limits = record.get("limits")
    if not isinstance(limits, Mapping) or not limits:
        return None
    return ", ".join(
        limit.words.format(_size_text(value) if limit.reads.startswith("size") else _safe(value))
        for limit in LIMITS
        if (value := limits.get(limit.name)) is not None
    )


def _tree_usage_text(record: Mapping[str, object]) -> str | None:
    usage = record.get("tree_usage")
    if not isinstance(usage, Mapping):
        return None
    parts = [
        f"CPU {_seconds_text(usage.get('cpu_seconds'))} "
        f"(user {_seconds_text(usage.get('cpu_user_seconds'))}, "
        f"system {_seconds_text(usage.get('cpu_system_seconds'))})"
    ]
    if usage.get("memory_peak_bytes") is not None:
        parts.append(f"peak memory {_size_text(usage.get('memory_peak_bytes'))}")
    refused = _int(usage.get("pids_max_refusals"))
    if refused:
        parts.append(f"{_plural(refused, 'fork')} refused at pids_max")
    return ", ".join(parts)


def _oom_kills_text(record: Mapping[str, object]) -> str:
    usage = record.get("tree_usage")
    kills = _int(usage.get("oom_kills")) if isinstance(usage, Mapping) else None
    return f" ({_plural(kills, 'OOM kill')})" if kills else ""


def _launch_error_text(record: Mapping[str, object]) -> str | None:
    error = record.get("launch_error")
    if not isinstance(error, Mapping):
        return None
    name, number = error.get("errno_name"), error.get("errno")
    code = " ".join(_safe(part) for part in (name, number) if part is not None)
    message = _safe(error.get("message") or "?")
    return f"{message} ({code})" if code else message


def _title(label: object, unknown: str = "(no label)") -> str:
    return "run " + (repr(_safe(label)) if isinstance(label, str) else unknown)


def _verdict_lines(run: RunFiles, paint: _Paint) -> list[str]:
    """The record, told: what happened, how it was stopped, what else, who and when."""
    record = run.record
    assert record is not None
    title = _title(record.get("variant"))
    out = _Lines(paint)
    status = _int(record.get("supervisor_exit_code"))
    said = paint.reason(record.get("reason"), status)
    oom = _oom_lead(record)
    if oom is not None:  # first: the recorded reason (``completed``) would hide it
        said = f"{paint(oom, '1;31')} (reason {said})"
    out.lines.append(paint.bold(title) + ": " + said)
    for part in (_outcome, _stopping, _extras, _provenance):
        part(out, record)
    return out.lines


def _outcome(out: _Lines, record: Mapping[str, object]) -> None:
    reason = record.get("reason")
    status = _int(record.get("supervisor_exit_code"))
    label = record.get("variant")
    out.add("label", _safe(label) if isinstance(label, str) else "-")
    oom = _oom_lead(record)
    if oom is not None:
        out.add(
            "reason",
            f"{out.paint(oom + _oom_kills_text(record), '1;31')}; "
            f"recorded as {out.paint.reason(reason, status)}",
        )
    else:
        out.add(
            "reason",
            f"{out.paint.reason(reason, status)} - {_REASON_WORDS.get(str(reason), 'unknown')}",
        )
    out.add("exit status", _exit_status_text(record))
    out.add("command", _command_text(record))
    _optional(out, "argv", _argv_text(record))
    _optional(out, "directory", _directory_text(record))
    out.add(
        "duration",
        f"{_seconds_text(record.get('elapsed_seconds'))} "
        f"(deadline {_policy_text(record.get('deadline_seconds'), none_for_zero=True)}, "
        f"grace {_policy_text(record.get('grace_seconds'), none_for_zero=False)})",
    )
    _optional(out, "idle", _idle_text(record))


def _idle_text(record: Mapping[str, object]) -> str | None:
    """The idle bound, and how long the run had been idle when it was stopped for it."""
    bound = record.get("idle_seconds")
    if not isinstance(bound, int | float) or isinstance(bound, bool):
        return None
    measured = record.get("idle_measured_seconds")
    if isinstance(measured, int | float) and not isinstance(measured, bool):
        return (
            f"{_seconds_text(measured)} without output or CPU time when stopped "
            f"(bound {_seconds_text(bound)})"
        )
    return f"bound {_seconds_text(bound)} (never reached)"


def _stopping(out: _Lines, record: Mapping[str, object]) -> None:
    out.add("escalated", _escalation_text(record, out.paint))
    out.add("containment", _safe(record.get("containment")))
    signals = _signal_lines(record)
    out.add("signals", signals[0])
    for line in signals[1:]:
        out.more(line)
    out.add("descendants", _descendants_text(record))


def _extras(out: _Lines, record: Mapping[str, object]) -> None:
    """Lines that apply to some runs only: resources, errors, an unkillable tree."""
    _optional(out, "limits", _limits_text(record))
    _optional(out, "resources", _rusage_text(record))
    _optional(out, "whole tree", _tree_usage_text(record))
    _optional(out, "launch error", _launch_error_text(record))
    error = record.get("tether_error")
    if isinstance(error, str):
        out.add("tether error", out.paint(_safe(error), "31"))
    if record.get("unkillable") is True:
        warning = "something survived SIGKILL: investigate this host"
        out.add("UNKILLABLE", out.paint(warning, "1;31"))
    dropped = _int(record.get("event_log_lines_dropped"))
    if dropped:
        lost = f"incomplete: {_plural(dropped, 'line')} could not be written (full disk?)"
        out.add("event log", out.paint(lost, "33"))
    by_pid = _int(record.get("signals_without_pidfd"))
    if by_pid:
        note = f"{_plural(by_pid, 'signal')} sent by pid, without a pidfd (descriptor limit)"
        out.add("pidfds", out.paint(note, "33"))


def _provenance(out: _Lines, record: Mapping[str, object]) -> None:
    out.add("started", _local(record.get("started_at"), precise=True))
    out.add("finished", _local(record.get("finished_at"), precise=True))
    out.add(
        "supervisor",
        f"pid {_safe(record.get('supervisor_pid'))} on {_safe(record.get('hostname'))}, "
        f"tether {_safe(record.get('tether_version'))}",
    )


def _optional(out: _Lines, name: str, value: str | None) -> None:
    if value is not None:
        out.add(name, value)


def _no_record_lines(run: RunFiles, paint: _Paint) -> list[str]:
    launched = next((e for e in run.events if e.get("event") == "launched"), None)
    title = _title(launched.get("label") if launched else None, "(label unknown)")
    out = _Lines(paint)
    out.lines.append(paint.bold(title) + ": " + paint("no record", "1;31"))
    out.add("record", paint(run.record_note or "missing", "31"))
    last = run.events[-1] if run.events else None
    states = [e.get("state_after") for e in run.events if e.get("event") == "step"]
    if last is not None:
        out.add(
            "last event", f"{_safe(last.get('event'))} at {_local(last.get('ts'), precise=True)}"
        )
    out.add("last state", _safe(states[-1]) if states else "?")
    progress = run.progress
    if progress is not None:
        out.add("supervisor", f"pid {_safe(progress.get('supervisor_pid'))}, gone (lost)")
    if launched is not None:
        exited = any(e.get("event") == "command_exited" for e in run.events)
        fate = "exited" if exited else "not seen to exit: check that it is gone"
        out.add("command", f"pid {_safe(launched.get('pid'))}, {fate}")
    return out.lines


def _running_lines(run: RunFiles, progress: Mapping[str, object], paint: _Paint) -> list[str]:
    """A run with no record yet whose supervisor is alive: what it is doing, so far."""
    title = _title(progress.get("variant"))
    out = _Lines(paint)
    out.lines.append(paint.bold(title) + ": " + paint("running", "32"))
    elapsed = progress.get("elapsed_seconds")
    since = _local(progress.get("started_at"), precise=True)
    out.add("since", since + ("" if elapsed is None else f" ({_seconds_text(elapsed)} ago)"))
    left, deadline = progress.get("deadline_left_seconds"), progress.get("deadline_seconds")
    left_text = f"{_seconds_text(deadline)}, {_seconds_text(left)} left"
    out.add("deadline", left_text if isinstance(left, int | float) else "none")
    out.add("state", _safe(progress.get("last_state") or "?"))
    command = progress.get("command")
    named = _safe(command) + ", " if isinstance(command, str) else ""
    alive = "running" if progress.get("command_alive") is True else "gone"
    out.add("command", f"{named}pid {_safe(progress.get('eval_pid'))} ({alive})")
    out.add("supervisor", f"pid {_safe(progress.get('supervisor_pid'))} (alive)")
    out.add("record", "not yet: it is written when the run ends")
    return out.lines


def _files_lines(run: RunFiles, paint: _Paint) -> list[str]:
    out = _Lines(paint)
    if run.record is not None and run.record_path is not None:
        out.add("record", _path_text(run.record_path))
    if run.log_path is not None:
        note = f"  ({run.log_note})" if run.log_note else ""
        out.add("event log", _path_text(run.log_path) + paint(note, "33"))
    return out.lines


class _Fields:
    """An event's fields, taken one by one; what is left is shown as ``key=value``."""

    def __init__(self, event: Mapping[str, object]) -> None:
        self.rest = {k: v for k, v in event.items() if k not in ("ts", "mono", "event")}

    def take(self, name: str) -> object:
        return self.rest.pop(name, None)

    def text(self, name: str) -> str:
        return _safe(self.take(name))

    __getitem__ = text  # for str.format_map

    def leftover(self) -> str:
        return " ".join(f"{_safe(k)}={_safe(json.dumps(v))}" for k, v in self.rest.items())


def _command_named(f: _Fields) -> str:
    """``command NAME`` from a launch line's ``command`` (``command`` alone without one)."""
    f.take("supervisor_start_ticks")  # for ``tether ls``, no news here
    name, script = f.take("command"), f.take("script")
    if isinstance(script, str) and script:
        return f"command {_safe(name)} ({_safe(script)})" if isinstance(name, str) else "command"
    return f"command {_safe(name)}" if isinstance(name, str) else "command"


def _launched(f: _Fields) -> str:
    f.take("started_mono")  # time zero of the timeline, not news
    deadline = _policy_text(f.take("deadline_seconds"), none_for_zero=True)
    grace = _policy_text(f.take("grace_seconds"), none_for_zero=False)
    label = f.take("label")
    text = (
        f"{_command_named(f)} pid {f.text('pid')} (group {f.text('pgid')}) under supervisor "
        f"pid {f.text('supervisor_pid')}; containment {f.text('containment')}; "
        f"deadline {deadline}, grace {grace}"
    )
    return text + (f"; label {_safe(label)!r}" if isinstance(label, str) else "")


def _launch_failed(f: _Fields) -> str:
    # The policy a run that never started would have had: in the record, no news here.
    for name in ("started_mono", "deadline_seconds", "grace_seconds"):
        f.take(name)
    label = f.take("label")
    named = _command_named(f)
    text = (
        f"{named}: {f.text('error')} (errno {f.text('errno')}, at {f.text('stage')}; "
        f"supervisor pid {f.text('supervisor_pid')})"
    )
    return text + (f"; label {_safe(label)!r}" if isinstance(label, str) else "")


def _step(f: _Fields) -> str:
    before, after, cause = f.text("state_before"), f.text("state_after"), f.text("input")
    effects = f.take("effects")
    moved = f"{before} -> {after}" if before != after else f"{before} (no change)"
    text = f"{moved} on {cause}"
    if isinstance(effects, list) and effects:
        text += ": " + ", ".join(_safe(effect) for effect in effects)
    return text


def _command_exited(f: _Fields) -> str:
    code = _int(f.take("returncode"))
    others = f.take("others_alive")
    how = "exited" if code is None else _returncode_text(code)
    return f"command pid {f.text('pid')} {how}; {_safe(others)} other process(es) still alive"


def _signals_caught_up(f: _Fields) -> str:
    names = f.take("signals")
    sent = ", ".join(map(_safe, names)) if isinstance(names, list) else _safe(names)
    found = _plural(f.take("processes"), "process", "processes")
    return f"{sent} to {found} a walk had missed (found late, while the tree stopped)"


_DESCRIBE: Final[Mapping[str, Callable[[_Fields], str]]] = {
    "launched": _launched,
    "launch_failed": _launch_failed,
    "step": _step,
    "command_exited": _command_exited,
    "signals_caught_up": _signals_caught_up,
    "signal_sent": lambda f: (
        f"{f['signal']} to {_plural(f.take('processes'), 'process', 'processes')}"
    ),
    "lifeline_request": lambda f: (
        f"the caller asked: {_REQUEST_WORDS.get(r := f['request'], repr(r))}"
    ),
    "lifeline_unknown_bytes": lambda f: (
        f"{_plural(f.take('count'), 'byte')} on the lifeline that are no request, so far"
    ),
    "event_log_incomplete": lambda f: (
        f"the event log is incomplete: {_plural(f.take('lines_dropped'), 'line')} could not be "
        f"written ({f['error']})"
    ),
}

#: Events told in one sentence, each ``{field}`` taken from the line.
_SENTENCES: Final = {
    "signal_received": "the supervisor received {signal}: a request to cancel",
    "lifeline_closed": "the lifeline reached end of file: the caller is gone",
    "tree_emptied": "nothing of the command's tree is left",
    "record_written": "record written: {path}",
    "record_failed": "record NOT written: {error}",
    "signal_by_pid": "{signal} to pid {pid} by its pid: no pidfd could be had",
    "walk_failed": "the tree could not be read from /proc ({error})",
    "internal_error": "tether failed ({error}): the whole tree was SIGKILLed",
}


def _describe(event: Mapping[str, object]) -> str:
    fields = _Fields(event)
    name = str(event.get("event"))
    describe = _DESCRIBE.get(name)
    text = describe(fields) if describe else _SENTENCES.get(name, "").format_map(fields)
    leftover = fields.leftover()
    return " ".join(part for part in (text, leftover) if part)


def _origin(events: Sequence[Mapping[str, object]]) -> tuple[float | None, str]:
    """Time zero of the timeline on the monotonic clock, and what it is, in words: the request
    (the record's own zero) if the launch line says it, else the launch, else the first line."""
    for event in events:
        if event.get("event") in ("launched", "launch_failed"):
            asked = _number(event.get("started_mono"))
            if asked is not None:
                return asked, "seconds since the run was asked for, as in the record"
            mono = _number(event.get("mono"))
            if mono is not None:
                return mono, (
                    "seconds since the launch; the record's times count from the request, "
                    "a little earlier"
                )
    first = next((m for m in (_number(e.get("mono")) for e in events) if m is not None), None)
    return first, "seconds since the first line: the launch line is missing"


def _is_uneventful(event: Mapping[str, object]) -> bool:
    return (
        event.get("event") == "step"
        and event.get("state_before") == event.get("state_after")
        and not event.get("effects")
    )


def _timeline_lines(run: RunFiles, paint: _Paint, *, all_steps: bool) -> list[str]:
    if not run.events:
        return [] if run.log_note else [paint.bold("timeline"), "  (the event log is empty)"]
    origin, zero = _origin(run.events)
    shown = [e for e in run.events if all_steps or not _is_uneventful(e)]
    width = max(len(_safe(e.get("event"))) for e in shown) if shown else 0
    lines = [paint.bold("timeline") + paint.dim(f"  ({zero})")]
    for event in shown:
        mono = _number(event.get("mono"))
        at = "?" if mono is None or origin is None else f"{mono - origin:+.3f}"
        name = _safe(event.get("event"))
        lines.append(
            f"  {paint.dim(at.rjust(9))}  {paint(name.ljust(width), '36')}  {_describe(event)}"
        )
    hidden = len(run.events) - len(shown)
    if hidden:
        note = f"({_plural(hidden, 'step')} that changed nothing hidden; --all shows them)"
        lines.append(paint.dim(f"  {note}"))
    return lines


def render_run(run: RunFiles, *, colour: bool = False, all_steps: bool = False) -> str:
    """One run for a person: the verdict, where its files are, and its timeline."""
    paint = _Paint(colour)
    progress = run.progress
    if run.record is not None:
        head = _verdict_lines(run, paint)
    elif progress is not None and progress.get("state") == RUNNING:
        head = _running_lines(run, progress, paint)
    else:
        head = _no_record_lines(run, paint)
    parts = [head + _files_lines(run, paint)]
    timeline = _timeline_lines(run, paint, all_steps=all_steps)
    if timeline:
        parts.append(timeline)
    return "\n\n".join("\n".join(part) for part in parts) + "\n"


def run_as_json(run: RunFiles) -> str:
    """One run for scripts: its record, events, their paths, and ``warnings`` (what was unread)."""
    document = {
        "record": run.record,
        "events": run.events,
        "record_path": None if run.record_path is None else os.fsdecode(run.record_path),
        "events_path": None if run.log_path is None else os.fsdecode(run.log_path),
        "warnings": [*([run.record_note] if run.record_note else []), *run.warnings],
        "progress": run.progress,
    }
    return json.dumps(document, indent=2) + "\n"

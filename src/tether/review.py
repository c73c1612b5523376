"""Reading what runs left behind, for ``tether show`` and ``tether ls``.

An operator reviews runs after the fact, often many of them and often when
something went wrong — which is exactly when the files are least likely to be
tidy. A supervisor that was SIGKILLed leaves an event log with no record (or
the caller's ``supervisor_lost`` fallback), and perhaps a last log line cut in
half; a records directory collects files that are not records at all. So
everything here *reads defensively*: whatever parses is shown, whatever does
not is named in one warning line, and nothing a file contains can make the
tools crash, hang (a FIFO named ``x.json``) or write control characters to the
operator's terminal.

Two shapes of output. For people: :func:`render_run` tells one run as a
verdict (what happened, in words) followed by a timeline of its event log in
seconds since the launch, and :func:`render_table` lists many runs as an
aligned table, newest first. For scripts: :func:`run_as_json` and
:func:`rows_as_json` give the same facts as JSON for ``jq``, with the
record's own field names, unchanged.

Colour is decided by :func:`use_colour` alone: only on a terminal, never when
``NO_COLOR`` is set (https://no-color.org) or ``TERM`` is ``dumb``.

This module is on the caller's side of tether: it loads neither ``structlog``
nor ``transitions`` (the ``.events.jsonl`` naming rule comes from
:mod:`tether.paths`, shared with the supervisor), and it does no printing; the
CLI decides what goes to stdout and stderr and with which exit status.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final, TextIO

from tether.durations import DurationError, format_duration, parse_duration
from tether.outcome import Reason
from tether.paths import EVENTS_SUFFIX, events_path_for
from tether.recordfile import RecordError, read_record

__all__ = [
    "EVENTS_SUFFIX",
    "Filters",
    "Listing",
    "ReviewError",
    "RunFiles",
    "events_path_for",
    "load_run",
    "parse_reasons",
    "parse_since",
    "read_events",
    "render_run",
    "render_table",
    "rows_as_json",
    "run_as_json",
    "scan",
    "select",
    "use_colour",
]

#: An event log is a few kilobytes; past this much, the rest is not read (and
#: the operator is told), so that pointing ``show`` at a huge file stays cheap.
_MAX_LOG_BYTES: Final = 64 << 20

_RECORD_PROBLEM_PREFIX: Final = "cannot read the record: "

_REASON_WORDS: Final[Mapping[str, str]] = {
    "completed": "the command exited on its own",
    "cancelled": "someone asked for the run to stop",
    "deadline_exceeded": "the deadline passed and the command was stopped",
    "parent_lost": "the caller died and the command was stopped",
    "launch_failed": "the command could not be started",
    "supervisor_lost": "the supervisor vanished before saying how the run ended",
}

_STATUS_WORDS: Final[Mapping[int, str]] = {
    124: "deadline passed",
    125: "tether itself failed",
    126: "the command could not be executed",
    127: "the command was not found",
    130: "stopped: cancelled or caller lost",
}

_REQUEST_WORDS: Final[Mapping[str, str]] = {"c": "cancel", "k": "kill now"}


class ReviewError(Exception):
    """Nothing can be shown or listed; the message is one line for a person."""


# -- safe text ------------------------------------------------------------------


def _safe(value: object) -> str:
    """``value`` as text a terminal shows literally: control characters are escaped."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _path_text(path: Path) -> str:
    return _safe(os.fsdecode(path))


class _Paint:
    """ANSI colours, or nothing at all."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    def bold(self, text: str) -> str:
        return self(text, "1")

    def dim(self, text: str) -> str:
        return self(text, "2")

    def reason(self, reason: object) -> str:
        text = _safe(reason) if reason is not None else "?"
        if reason == "completed":
            return self(text, "32")
        if reason in ("launch_failed", "supervisor_lost"):
            return self(text, "1;31")
        return self(text, "33")


def use_colour(stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to colour what goes to ``stream``: a terminal, no ``NO_COLOR``, not ``dumb``."""
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# -- numbers and times for people ------------------------------------------------


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds_text(value: object) -> str:
    """A duration the way a person reads it in a table: ``0.504s``, ``12.3s``, ``4m05s``."""
    seconds = _number(value)
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.3f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    for unit, size, sub_unit, sub_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "m", 60),
        ("m", 60, "s", 1),
    ):
        if whole >= size:
            return f"{whole // size}{unit}{(whole % size) // sub_size:02d}{sub_unit}"
    return f"{seconds:.1f}s"  # pragma: no cover - unreachable


def _policy_text(value: object, *, none_for_zero: bool) -> str:
    seconds = _number(value)
    if seconds is None:
        # A null grace means "never escalate" (``tether timeout`` without -k).
        return "?" if none_for_zero else "never"
    if seconds == 0 and none_for_zero:
        return "none"
    return format_duration(seconds)


def _parse_time(value: object) -> datetime | None:
    """An aware datetime from an ISO 8601 string, or ``None``."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def _local(value: object, *, precise: bool = False) -> str:
    moment = _parse_time(value)
    if moment is None:
        return "?" if value is None else _safe(value)
    local = moment.astimezone()
    if precise:
        return local.isoformat(sep=" ", timespec="milliseconds")
    return local.strftime("%Y-%m-%d %H:%M:%S")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _returncode_text(code: int) -> str:
    if code < 0:
        return f"killed by {_signal_name(-code)} ({code})"
    return f"exited with status {code}"


def _plural(count: object, noun: str, nouns: str | None = None) -> str:
    number = _int(count)
    many = nouns or noun + "s"
    if number is None:
        return f"? {many}"
    return f"{number} {noun if number == 1 else many}"


# -- reading event logs -----------------------------------------------------------


def _open_regular(path: Path, what: str) -> int:
    """Open ``path`` for reading, refusing anything but a regular file (never blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise ReviewError(f"{_path_text(path)}: {error.strerror or error}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ReviewError(f"{_path_text(path)}: {kind}, not {what}")
    return fd


def _read_limited(fd: int) -> tuple[bytes, bool]:
    """Read at most :data:`_MAX_LOG_BYTES` from ``fd``; say whether there was more."""
    chunks: list[bytes] = []
    size = 0
    while size <= _MAX_LOG_BYTES and (chunk := os.read(fd, 1 << 16)):
        chunks.append(chunk)
        size += len(chunk)
    data = b"".join(chunks)
    return data[:_MAX_LOG_BYTES], size > _MAX_LOG_BYTES


def _parse_event(line: bytes) -> dict[str, object] | None:
    """One log line as an event (a JSON object with a string ``event``), or ``None``."""
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(value, dict) and isinstance(value.get("event"), str):
        return value
    return None


def read_events(path: Path) -> tuple[list[dict[str, object]], list[str]]:
    """Return the events of the log at ``path`` and warnings about lines that did not parse.

    A last line cut short (a supervisor killed mid-write) and a garbled line
    are skipped with a warning; raise :class:`ReviewError` if the file cannot be
    read or if no line at all is a tether event (it is not an event log).
    """
    fd = _open_regular(path, "an event log")
    try:
        data, cut = _read_limited(fd)
    except OSError as error:
        raise ReviewError(f"{_path_text(path)}: {error.strerror or error}") from None
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    ends_cleanly = lines[-1] == b""
    if ends_cleanly:
        lines.pop()
    events: list[dict[str, object]] = []
    bad: list[int] = []
    for number, line in enumerate(lines, start=1):
        event = _parse_event(line) if line.strip() else None
        if event is not None:
            events.append(event)
        elif line.strip():
            bad.append(number)
    if bad and not events:
        raise ReviewError(f"{_path_text(path)}: not a tether event log (no line is an event)")
    warnings = [
        _line_warning(path, number, number == len(lines) and not ends_cleanly) for number in bad
    ]
    if cut:
        warnings.append(
            f"{_path_text(path)}: longer than {_MAX_LOG_BYTES >> 20} MiB; only the start is shown"
        )
    return events, warnings


def _line_warning(path: Path, number: int, truncated: bool) -> str:
    if truncated:
        return (
            f"{_path_text(path)}: line {number} is cut short (the supervisor was probably "
            "killed while writing it); showing the lines before it"
        )
    return f"{_path_text(path)}: line {number} is not a tether event; skipped"


# -- one run: record and log ---------------------------------------------------------


@dataclass
class RunFiles:
    """What is known about one run: its record and event log, each possibly missing.

    ``record_note`` and ``log_note`` say, for a person, why one of them is
    absent; ``warnings`` are problems found while reading (garbled log lines).
    """

    record_path: Path | None
    record: dict[str, object] | None
    log_path: Path | None
    events: list[dict[str, object]]
    record_note: str | None = None
    log_note: str | None = None
    warnings: list[str] = field(default_factory=list)


def _is_events_name(path: Path) -> bool:
    return path.name.endswith(EVENTS_SUFFIX) and len(path.name) > len(EVENTS_SUFFIX)


def _record_candidates(log_path: Path, events: Sequence[Mapping[str, object]]) -> list[Path]:
    """Where the record of the log at ``log_path`` may be, most likely first.

    ``x.events.jsonl`` belongs to ``x.json`` (or to ``x``, for a record named
    without a suffix); failing those, the path the supervisor said it wrote.
    """
    candidates: list[Path] = []
    if _is_events_name(log_path):
        stem = log_path.name[: -len(EVENTS_SUFFIX)]
        candidates += [log_path.with_name(stem + ".json"), log_path.with_name(stem)]
    for event in events:
        written = event.get("path")
        if event.get("event") == "record_written" and isinstance(written, str) and written:
            candidates.append(Path(written))
    return candidates


def _read_record_quietly(path: Path) -> tuple[dict[str, object] | None, str | None]:
    """The record at ``path``, or ``None`` and why not (``None``: there is no file)."""
    if not os.path.lexists(path):
        return None, None
    try:
        return read_record(path), None
    except RecordError as error:
        return None, str(error)


def _load_from_log(log_path: Path) -> RunFiles:
    events, warnings = read_events(log_path)
    candidates = _record_candidates(log_path, events)
    for candidate in candidates:
        if os.path.isfile(candidate) and candidate.resolve() != log_path.resolve():
            record, problem = _read_record_quietly(candidate)
            if record is not None:
                return RunFiles(candidate, record, log_path, events, warnings=warnings)
            if problem is not None:
                warnings.append(problem)
    expected = candidates[0] if candidates else None
    run = RunFiles(expected, None, log_path, events, warnings=warnings)
    run.record_note = _why_no_record(expected, events)
    return run


def _why_no_record(expected: Path | None, events: Sequence[Mapping[str, object]]) -> str:
    names = [event.get("event") for event in events]
    if "record_failed" in names:
        failed = next(e for e in events if e.get("event") == "record_failed")
        return f"the supervisor could not write the record: {_safe(failed.get('error'))}"
    where = "beside the log" if expected is None else f"at {_path_text(expected)}"
    if "record_written" in names:
        return f"no record {where}, although the log says it was written (moved or deleted?)"
    return (
        f"no record {where}: the supervisor stopped before writing one "
        "(killed, or out of memory?); what it logged is below"
    )


def _load_from_record(path: Path, record: dict[str, object]) -> RunFiles:
    log_path = events_path_for(path)
    if not os.path.lexists(log_path):
        return RunFiles(
            path, record, log_path, [], log_note=f"no event log at {_path_text(log_path)}"
        )
    try:
        events, warnings = read_events(log_path)
    except ReviewError as error:
        return RunFiles(path, record, log_path, [], log_note=str(error))
    return RunFiles(path, record, log_path, events, warnings=warnings)


def load_run(path: Path) -> RunFiles:
    """Load the run that ``path`` (a record or its ``.events.jsonl``) belongs to.

    Raise :class:`ReviewError` if ``path`` is neither a tether record nor a
    tether event log.
    """
    if not os.path.lexists(path):
        raise ReviewError(f"{_path_text(path)}: no such file")
    if os.path.isdir(path):
        raise ReviewError(f"{_path_text(path)}: a directory (tether ls DIR lists its runs)")
    if _is_events_name(path):
        return _load_from_log(path)
    try:
        record = read_record(path)
    except RecordError as error:
        # Perhaps an event log under another name: show it if it is one.
        with contextlib.suppress(ReviewError):
            run = _load_from_log(path)
            if run.events:
                return run
        raise ReviewError(_record_problem(error)) from None
    return _load_from_record(path, record)


def _record_problem(error: RecordError) -> str:
    """A :class:`RecordError` message without its ``cannot read the record:`` preamble."""
    message = str(error)
    return message.removeprefix(_RECORD_PROBLEM_PREFIX)


# -- one run, for people ---------------------------------------------------------------

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
    if record.get("reason") == "completed":
        code = _int(record.get("eval_exit_code"))
        if code is not None and code < 0:
            return f"{status} (128+{-code}: the command was killed by {_signal_name(-code)})"
        return f"{status} (the command's own)"
    words = _STATUS_WORDS.get(status)
    return f"{status} ({words})" if words else str(status)


def _command_text(record: Mapping[str, object]) -> str:
    pid, pgid = _int(record.get("eval_pid")), _int(record.get("eval_process_group"))
    code = _int(record.get("eval_exit_code"))
    if pid is None:
        return "never started" if record.get("reason") == "launch_failed" else "unknown"
    who = f"pid {pid}" + (f" (group {pgid})" if pgid is not None and pgid != pid else "")
    if code is not None:
        return f"{who}, {_returncode_text(code)}"
    if record.get("reason") == "supervisor_lost":
        return f"{who}, fate unknown (the supervisor was lost; check that it is gone)"
    return f"{who}, not reaped"


def _escalation_text(record: Mapping[str, object], paint: _Paint) -> str:
    shutdown = record.get("shutdown_seconds")
    after = f"; tree gone {_seconds_text(shutdown)} after the first SIGTERM" if shutdown else ""
    if record.get("escalated_to_sigkill") is True:
        return paint("yes", "33") + f": {_why_sigkill(record)}{after}"
    if shutdown is None:
        return "no (nothing had to be stopped)"
    return f"no{after}"


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
    return f"{_safe(stopped)} stopped; {_safe(stragglers)} still running when the command exited"


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


def _launch_error_text(record: Mapping[str, object]) -> str | None:
    error = record.get("launch_error")
    if not isinstance(error, Mapping):
        return None
    name, number = error.get("errno_name"), error.get("errno")
    code = " ".join(_safe(part) for part in (name, number) if part is not None)
    message = _safe(error.get("message") or "?")
    return f"{message} ({code})" if code else message


def _verdict_lines(run: RunFiles, paint: _Paint) -> list[str]:
    """The record, told: what happened, how it was stopped, what else, who and when."""
    record = run.record
    assert record is not None
    label = record.get("variant")
    title = "run " + (repr(_safe(label)) if isinstance(label, str) else "(no label)")
    out = _Lines(paint)
    out.lines.append(paint.bold(title) + ": " + paint.reason(record.get("reason")))
    for part in (_outcome, _stopping, _extras, _provenance):
        part(out, record)
    return out.lines


def _outcome(out: _Lines, record: Mapping[str, object]) -> None:
    reason = record.get("reason")
    out.add("reason", f"{out.paint.reason(reason)} - {_REASON_WORDS.get(str(reason), 'unknown')}")
    out.add("exit status", _exit_status_text(record))
    out.add("command", _command_text(record))
    out.add(
        "duration",
        f"{_seconds_text(record.get('elapsed_seconds'))} "
        f"(deadline {_policy_text(record.get('deadline_seconds'), none_for_zero=True)}, "
        f"grace {_policy_text(record.get('grace_seconds'), none_for_zero=False)})",
    )


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
    _optional(out, "resources", _rusage_text(record))
    _optional(out, "launch error", _launch_error_text(record))
    error = record.get("tether_error")
    if isinstance(error, str):
        out.add("tether error", out.paint(_safe(error), "31"))
    if record.get("unkillable") is True:
        warning = "something survived SIGKILL: investigate this host"
        out.add("UNKILLABLE", out.paint(warning, "1;31"))


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
    label = launched.get("label") if launched else None
    title = "run " + (repr(_safe(label)) if isinstance(label, str) else "(label unknown)")
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
    if launched is not None:
        exited = any(e.get("event") == "command_exited" for e in run.events)
        pid = _safe(launched.get("pid"))
        out.add(
            "command",
            f"pid {pid}, exited"
            if exited
            else f"pid {pid}, not seen to exit: check that it is gone",
        )
    return out.lines


def _files_lines(run: RunFiles, paint: _Paint) -> list[str]:
    out = _Lines(paint)
    if run.record is not None and run.record_path is not None:
        out.add("record", _path_text(run.record_path))
    if run.log_path is not None:
        note = f"  ({run.log_note})" if run.log_note else ""
        out.add("event log", _path_text(run.log_path) + paint(note, "33"))
    return out.lines


# -- the timeline ---------------------------------------------------------------------


class _Fields:
    """An event's fields, taken one by one; what is left is shown as ``key=value``."""

    def __init__(self, event: Mapping[str, object]) -> None:
        self.rest = {k: v for k, v in event.items() if k not in ("ts", "mono", "event")}

    def take(self, name: str) -> object:
        return self.rest.pop(name, None)

    def text(self, name: str) -> str:
        return _safe(self.take(name))

    def leftover(self) -> str:
        return " ".join(f"{_safe(k)}={_safe(json.dumps(v))}" for k, v in self.rest.items())


def _launched(f: _Fields) -> str:
    f.take("started_mono")  # time zero of the timeline, not news
    deadline = _policy_text(f.take("deadline_seconds"), none_for_zero=True)
    grace = _policy_text(f.take("grace_seconds"), none_for_zero=False)
    label = f.take("label")
    text = (
        f"command pid {f.text('pid')} (group {f.text('pgid')}) under supervisor "
        f"pid {f.text('supervisor_pid')}; containment {f.text('containment')}; "
        f"deadline {deadline}, grace {grace}"
    )
    return text + (f"; label {_safe(label)!r}" if isinstance(label, str) else "")


def _launch_failed(f: _Fields) -> str:
    f.take("started_mono")
    return (
        f"{f.text('error')} (errno {f.text('errno')}, at {f.text('stage')}; "
        f"supervisor pid {f.text('supervisor_pid')})"
    )


def _step(f: _Fields) -> str:
    before, after, cause = f.text("state_before"), f.text("state_after"), f.text("input")
    effects = f.take("effects")
    moved = f"{before} -> {after}" if before != after else f"{before} (no change)"
    text = f"{moved} on {cause}"
    if isinstance(effects, list) and effects:
        text += ": " + ", ".join(_safe(effect) for effect in effects)
    return text


def _signal_sent(f: _Fields) -> str:
    return f"{f.text('signal')} to {_plural(f.take('processes'), 'process', 'processes')}"


def _signal_received(f: _Fields) -> str:
    return f"the supervisor received {f.text('signal')}: a request to cancel"


def _lifeline_closed(_f: _Fields) -> str:
    return "the lifeline reached end of file: the caller is gone"


def _lifeline_request(f: _Fields) -> str:
    request = f.text("request")
    return f"the caller asked: {_REQUEST_WORDS.get(request, repr(request))}"


def _command_exited(f: _Fields) -> str:
    code = _int(f.take("returncode"))
    others = f.take("others_alive")
    how = "exited" if code is None else _returncode_text(code)
    return f"command pid {f.text('pid')} {how}; {_safe(others)} other process(es) still alive"


def _tree_emptied(_f: _Fields) -> str:
    return "nothing of the command's tree is left"


def _record_written(f: _Fields) -> str:
    return f"record written: {f.text('path')}"


def _record_failed(f: _Fields) -> str:
    return f"record NOT written: {f.text('error')}"


_DESCRIBE: Final[Mapping[str, Callable[[_Fields], str]]] = {
    "launched": _launched,
    "launch_failed": _launch_failed,
    "step": _step,
    "signal_sent": _signal_sent,
    "signal_received": _signal_received,
    "lifeline_closed": _lifeline_closed,
    "lifeline_request": _lifeline_request,
    "command_exited": _command_exited,
    "tree_emptied": _tree_emptied,
    "record_written": _record_written,
    "record_failed": _record_failed,
}


def _describe(event: Mapping[str, object]) -> str:
    fields = _Fields(event)
    describe = _DESCRIBE.get(str(event.get("event")))
    text = describe(fields) if describe is not None else ""
    leftover = fields.leftover()
    return " ".join(part for part in (text, leftover) if part)


def _origin(events: Sequence[Mapping[str, object]]) -> tuple[float | None, str]:
    """Time zero of the timeline on the monotonic clock, and what it is, in words.

    The launch line's ``started_mono`` (when the caller asked, which is what the
    record's times count from) if it has one; otherwise the launch itself;
    otherwise the first line with a time.
    """
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
        lines.append(
            paint.dim(
                f"  ({_plural(hidden, 'step')} that changed nothing hidden; --all shows them)"
            )
        )
    return lines


def render_run(run: RunFiles, *, colour: bool = False, all_steps: bool = False) -> str:
    """One run for a person: the verdict, where its files are, and its timeline."""
    paint = _Paint(colour)
    head = _verdict_lines(run, paint) if run.record is not None else _no_record_lines(run, paint)
    parts = [head + _files_lines(run, paint)]
    timeline = _timeline_lines(run, paint, all_steps=all_steps)
    if timeline:
        parts.append(timeline)
    return "\n\n".join("\n".join(part) for part in parts) + "\n"


def run_as_json(run: RunFiles) -> str:
    """One run for scripts: ``{"record": ..., "events": [...]}`` plus where they came from.

    ``record`` is ``null`` when there is none; ``warnings`` lists what could
    not be read (also printed on stderr by the CLI).
    """
    document = {
        "record": run.record,
        "events": run.events,
        "record_path": None if run.record_path is None else os.fsdecode(run.record_path),
        "events_path": None if run.log_path is None else os.fsdecode(run.log_path),
        "warnings": [*([run.record_note] if run.record_note else []), *run.warnings],
    }
    return json.dumps(document, indent=2) + "\n"


# -- many runs: ls ----------------------------------------------------------------------


@dataclass
class Listing:
    """What a records directory holds.

    ``records`` are (path, record) pairs in no particular order; ``skipped``
    names each file that is not a tether record, with why; ``orphan_logs``
    are event logs whose record is missing (a supervisor that died).
    """

    records: list[tuple[Path, dict[str, object]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    orphan_logs: list[Path] = field(default_factory=list)


def _ignored(name: str) -> bool:
    """Hidden files (tether's temporary files among them) are never records."""
    return name.startswith(".") or name.endswith(".tmp")


def scan(directory: Path) -> Listing:
    """Read every record in ``directory`` (not recursively).

    Raise :class:`ReviewError` if the directory itself cannot be read; a file
    that cannot is skipped and named in :attr:`Listing.skipped`.
    """
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        raise ReviewError(f"{_path_text(directory)}: {error.strerror or error}") from None
    listing = Listing()
    logs: list[Path] = []
    for entry in entries:
        if _ignored(entry.name) or entry.is_dir():
            continue
        path = Path(entry.path)
        if _is_events_name(path):
            logs.append(path)
            continue
        try:
            listing.records.append((path, read_record(path)))
        except RecordError as error:
            listing.skipped.append(_record_problem(error))
    stems = {path.stem for path, _ in listing.records} | {path.name for path, _ in listing.records}
    listing.orphan_logs = [log for log in logs if log.name[: -len(EVENTS_SUFFIX)] not in stems]
    return listing


@dataclass(frozen=True)
class Filters:
    """Which runs ``tether ls`` shows: any reason in ``reasons``, started at or after
    ``since``, whose label matches the shell pattern ``label``; ``None`` means any."""

    reasons: frozenset[str] | None = None
    since: datetime | None = None
    label: str | None = None

    def admit(self, record: Mapping[str, object]) -> bool:
        """Whether ``record`` passes every filter."""
        if self.reasons is not None and record.get("reason") not in self.reasons:
            return False
        if self.since is not None:
            started = _parse_time(record.get("started_at"))
            if started is None or started < self.since:
                return False
        if self.label is not None:
            label = record.get("variant")
            return isinstance(label, str) and fnmatchcase(label, self.label)
        return True


def parse_reasons(values: Iterable[str]) -> frozenset[str] | None:
    """``--reason`` values (repeated, or comma-separated) as a set; ``None`` if none given.

    Raise :class:`ReviewError` naming the valid reasons for anything else.
    """
    wanted = {part.strip() for value in values for part in value.split(",") if part.strip()}
    if not wanted:
        return None
    known = {reason.value for reason in Reason}
    unknown = sorted(wanted - known)
    if unknown:
        raise ReviewError(
            f"--reason: unknown reason {', '.join(map(repr, unknown))} "
            f"(one of: {', '.join(reason.value for reason in Reason)})"
        )
    return frozenset(wanted)


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """``--since``: a duration (``90m``, ``2d``: within the last that long) or an ISO date/time.

    A date or time without a UTC offset is local time. Raise :class:`ReviewError`
    for anything else.
    """
    now = datetime.now(UTC) if now is None else now
    try:
        return now - timedelta(seconds=parse_duration(text, flag="--since"))
    except (DurationError, OverflowError):
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReviewError(
            f"--since: invalid value {text!r} (use a duration such as 30m, 12h or 7d, "
            "or an ISO date or time such as 2024-05-01 or 2024-05-01T12:00)"
        ) from None
    return moment if moment.utcoffset() is not None else moment.astimezone()


def select(
    records: Iterable[tuple[Path, dict[str, object]]], filters: Filters
) -> list[tuple[Path, dict[str, object]]]:
    """The records ``filters`` admits, newest first (by ``started_at``; unknown times last)."""
    oldest = datetime.min.replace(tzinfo=UTC)

    def newest_first(item: tuple[Path, dict[str, object]]) -> tuple[datetime, str]:
        return (_parse_time(item[1].get("started_at")) or oldest, item[0].name)

    return sorted(
        (item for item in records if filters.admit(item[1])), key=newest_first, reverse=True
    )


_COLUMNS: Final = ("WHEN", "LABEL", "REASON", "EXIT", "DURATION", "ESCALATED", "RECORD")


def _row(path: Path, record: Mapping[str, object], directory: Path | None) -> list[str]:
    label = record.get("variant")
    status = _int(record.get("supervisor_exit_code"))
    escalated = record.get("escalated_to_sigkill")
    shown_path = path.name if directory is not None and path.parent == directory else str(path)
    return [
        _local(record.get("started_at")),
        _safe(label) if isinstance(label, str) else "-",
        _safe(record.get("reason")),
        "?" if status is None else str(status),
        _seconds_text(record.get("elapsed_seconds")),
        {True: "yes", False: "no"}.get(escalated, "?") if isinstance(escalated, bool) else "?",
        _safe(shown_path),
    ]


def render_table(
    rows: Sequence[tuple[Path, Mapping[str, object]]],
    *,
    directory: Path | None = None,
    colour: bool = False,
) -> str:
    """An aligned table of ``rows`` (already in order), with a header line.

    Records directly in ``directory`` are named by file name alone.
    """
    paint = _Paint(colour)
    cells = [list(_COLUMNS)] + [_row(path, record, directory) for path, record in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    lines = []
    for number, line in enumerate(cells):
        padded = [cell.ljust(width) for cell, width in zip(line, widths, strict=True)]
        padded[-1] = line[-1]
        if number == 0:
            padded = [paint.bold(cell) for cell in padded]
        else:
            padded[2] = paint.reason(line[2]) + " " * (widths[2] - len(line[2]))
            if line[5] == "yes":
                padded[5] = paint("yes", "33") + " " * (widths[5] - 3)
        lines.append("  ".join(padded))
    return "\n".join(lines) + "\n"


def rows_as_json(rows: Sequence[tuple[Path, Mapping[str, object]]]) -> str:
    """The records of ``rows`` as a JSON array, each with its ``record_path`` added."""
    return (
        json.dumps(
            [{**record, "record_path": os.fsdecode(path)} for path, record in rows], indent=2
        )
        + "\n"
    )

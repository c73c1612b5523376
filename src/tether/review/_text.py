"""Text for people, for :mod:`tether.review.show` and :mod:`tether.review.listing`: every helper
is total, and nothing from a file reaches the terminal without :func:`_safe`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, TextIO

from tether.core.durations import format_duration
from tether.core.reasons import Reason
from tether.shared.signals import described

_REASON_WORDS: Final[Mapping[str, str]] = {
    Reason.COMPLETED: "the command exited on its own",
    Reason.CANCELLED: "someone asked for the run to stop",
    Reason.DEADLINE_EXCEEDED: "the deadline passed and the command was stopped",
    Reason.IDLE_EXCEEDED: "no output and no CPU time for its idle bound: the command was stopped",
    Reason.PARENT_LOST: "the caller died and the command was stopped",
    Reason.LAUNCH_FAILED: "the command could not be started",
    Reason.SUPERVISOR_LOST: "the supervisor vanished before saying how the run ended",
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


def _what_ran(command: object, script: object) -> str:
    """``tether ls``'s COMMAND column: the script an interpreter ran, else the command's name."""
    if isinstance(script, str) and script:
        return _safe(script)
    return _safe(command) if isinstance(command, str) and command else "-"


def _safe(value: object) -> str:
    """``value`` as text a terminal shows literally (controls escaped); ``None`` is ``?``."""
    if value is None:
        return "?"
    text = value if isinstance(value, str) else _str(value)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def _str(value: object) -> str:
    try:
        return str(value)
    except ValueError:  # an integer longer than Python agrees to print
        return "?"


def _brief(text: str) -> str:
    quoted = repr(text)
    return quoted if len(quoted) <= 60 else quoted[:57] + "..."


def describe_unexpected(error: Exception) -> str:
    """A failure that is tether's bug, not the file's, in one line a person can report."""
    return f"unexpected error, please report it: {type(error).__name__}: {_brief(_str(error))}"


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def printable_path(path: Path) -> str:
    """``path`` for a message on a terminal: undecodable bytes and control characters escaped."""
    return _safe(os.fsdecode(path))


_path_text = printable_path


class _Paint:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    def bold(self, text: str) -> str:
        return self(text, "1")

    def dim(self, text: str) -> str:
        return self(text, "2")

    def reason(self, reason: object, status: object = 0) -> str:
        text = _safe(reason) if reason is not None else "?"
        return self(text, self.meaning(reason, status))

    @staticmethod
    def meaning(reason: object, status: object) -> str:
        """Green: status 0; red for a failure, bold red if tether lost sight; else yellow."""
        if reason == Reason.COMPLETED:
            return "32" if status == 0 else "31"
        return "1;31" if reason in (Reason.LAUNCH_FAILED, Reason.SUPERVISOR_LOST) else "33"


def use_colour(stream: TextIO, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether to colour what goes to ``stream``: a terminal, no ``NO_COLOR``, not ``dumb``."""
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


#: Larger than any pid, exit status, signal or count a record holds.
_INT_BOUND: Final = 1 << 63


def _number(value: object) -> float | None:
    """``value`` as a finite float, or ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _int(value: object) -> int | None:
    """``value`` if it is an integer of a sane size (not a boolean), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if -_INT_BOUND < value < _INT_BOUND else None


#: Durations beyond about 30 years, or negative, are shown as the number they are.
_LONGEST_DURATION: Final = 1e9


def _implausible(seconds: float) -> str | None:
    return f"{seconds:g}s" if not 0 <= seconds <= _LONGEST_DURATION else None


def _seconds_text(value: object) -> str:
    """A duration the way a person reads it in a table: ``0.504s``, ``12.3s``, ``4m05s``."""
    seconds = _number(value)
    if seconds is None:
        return "?"
    if (plain := _implausible(seconds)) is not None:
        return plain
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
        # A null grace: never escalate (``tether timeout`` without -k).
        return "?" if none_for_zero else "never"
    if seconds == 0 and none_for_zero:
        return "none"
    return _implausible(seconds) or format_duration(seconds)


#: Times are compared as timedeltas since this moment, which cannot overflow (a zone change can).
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

#: What converting to local time raises out of range (year 1 west of Greenwich).
_CONVERSION_ERRORS: Final = (OverflowError, ValueError, OSError)


def _parse_time(value: object) -> datetime | None:
    """An aware datetime from an ISO 8601 string (UTC without an offset), or ``None``."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)


def _instant(moment: datetime) -> timedelta:
    """``moment`` as the time since the epoch (UTC if naive), for comparing and sorting."""
    return (moment if moment.utcoffset() is not None else moment.replace(tzinfo=UTC)) - _EPOCH


def _time_instant(value: object) -> timedelta | None:
    moment = _parse_time(value)
    return None if moment is None else _instant(moment)


def _local(value: object, *, precise: bool = False) -> str:
    """The time ``value`` in local time: ``?`` if missing, as written if local time can't say it."""
    moment = _parse_time(value)
    if moment is None:
        return "?" if value is None else _safe(value)
    try:
        local = moment.astimezone()
    except _CONVERSION_ERRORS:
        return _safe(value)
    if precise:
        return local.isoformat(sep=" ", timespec="milliseconds")
    return local.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")


def _returncode_text(code: int) -> str:
    return f"killed by {described(-code)} ({code})" if code < 0 else f"exited with status {code}"


def _plural(count: object, noun: str, nouns: str | None = None) -> str:
    number = _int(count)
    many = nouns or noun + "s"
    return f"? {many}" if number is None else f"{number} {noun if number == 1 else many}"


def _oom_lead(record: Mapping[str, object]) -> str | None:
    """``killed by the OOM killer at its memory limit of 512 MiB`` if the record says so."""
    if record.get("oom_killed") is not True:
        return None
    from tether.core.limits import oom_summary

    limits = record.get("limits")
    return oom_summary(limits.get("memory_max") if isinstance(limits, Mapping) else None)

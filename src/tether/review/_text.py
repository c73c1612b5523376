"""Text for people: safe strings, colour, numbers, times and the words for reasons.

Shared by :mod:`tether.review.show` and :mod:`tether.review.listing`. Nothing a
file contains reaches the terminal without passing :func:`_safe`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TextIO

from tether.core.durations import format_duration

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

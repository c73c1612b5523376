"""Durations as people write them for ``timeout(1)``: ``30``, ``30s``, ``5m``, ``1.5h``, ``2d``.

A duration is a promise about when a command will be stopped, so anything that
is not plainly a finite, non-negative number of seconds is refused rather than
guessed at: NaN would make every comparison false (a deadline that never
fires), a negative value would fire before the command started, and infinity
is better said as ``0`` ("no deadline"), which is what GNU ``timeout`` means by
it too. The error names the flag, because "invalid duration" alone does not
tell a person which of three durations on a command line was wrong.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math

from tether.core.numbers import decimal_text

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "DurationError",
    "duration_seconds",
    "format_duration",
    "parse_duration",
    "seconds_for_json",
    "seconds_from_json",
]

_UNIT_SECONDS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    """A duration that cannot be a duration; the message is ready for a person."""


#: How much of a refused value a message repeats: enough to recognise it, and
#: a message stays one readable line whatever was typed (or passed).
_SHOWN_CHARACTERS: Final = 40


def _shown(value: object) -> str:
    """``value`` as a message quotes it: its ``repr``, cut short if long.

    A huge integer is described, not printed: Python refuses to turn one of
    more than 4300 digits into text at all.
    """
    if isinstance(value, int) and value.bit_length() > 64:
        return f"(an integer of {value.bit_length()} bits)"
    text = repr(value)
    if len(text) > _SHOWN_CHARACTERS:
        return text[: _SHOWN_CHARACTERS - 3] + "..."
    return text


def parse_duration(text: str, *, flag: str) -> float:
    """Return ``text`` as seconds, or raise :class:`DurationError` naming ``flag``."""
    raw = text.strip()
    number, unit = raw, "s"
    if raw and raw[-1] in _UNIT_SECONDS:
        number, unit = raw[:-1], raw[-1]
    try:
        if not decimal_text(number):
            raise ValueError(number)
        value = float(number)
    except ValueError:
        raise DurationError(
            f"{flag}: invalid duration {_shown(text)} (use a number of seconds, "
            "optionally with a suffix s, m, h or d, e.g. 30s, 5m, 1.5h)"
        ) from None
    if math.isnan(value) or math.isinf(value):
        raise DurationError(f"{flag}: invalid duration {_shown(text)} (must be a finite number)")
    if value < 0:
        raise DurationError(f"{flag}: invalid duration {_shown(text)} (must not be negative)")
    seconds = value * _UNIT_SECONDS[unit]
    if math.isinf(seconds):  # a finite number times a unit can still overflow: "1e308d"
        raise DurationError(f"{flag}: invalid duration {_shown(text)} (too large)")
    return seconds


def duration_seconds(value: object, *, flag: str) -> float:
    """Any duration a door accepts, as seconds: a string as the CLI takes it, a number, a
    :class:`~datetime.timedelta`; :class:`DurationError` naming ``flag`` if it is no duration.

    A value of the wrong type (``True``, a list) raises :class:`TypeError`: that is a
    mistake in a program, not in what a person typed.
    """
    if isinstance(value, str):
        return parse_duration(value, flag=flag)
    if not isinstance(value, int | float):
        # Only here: ``datetime`` costs the command line milliseconds it never needs.
        from datetime import timedelta

        if isinstance(value, timedelta):
            value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(
            f"{flag} must be a number of seconds, a timedelta or a string like '5m', "
            f"not {_shown(value)}"
        )
    try:
        seconds = float(value)
    except OverflowError:  # an integer beyond any float
        problem = "must not be negative" if value < 0 else "too large"
        raise DurationError(f"{flag}: invalid duration {_shown(value)} ({problem})") from None
    if math.isnan(seconds) or math.isinf(seconds):
        raise DurationError(f"{flag}: invalid duration {_shown(value)} (must be a finite number)")
    if seconds < 0:
        raise DurationError(f"{flag}: invalid duration {_shown(value)} (must not be negative)")
    return seconds


def seconds_for_json(seconds: float) -> float | None:
    """A duration as JSON can hold it: ``None`` (``null``) for an endless one.

    JSON has no infinity, and an endless grace ("never escalate") is a real
    setting (``tether timeout`` without ``-k``); :func:`seconds_from_json` reads it back.
    """
    return None if math.isinf(seconds) else seconds


def seconds_from_json(value: float | None) -> float:
    """The duration :func:`seconds_for_json` wrote: ``null`` is endless."""
    return math.inf if value is None else float(value)


def format_duration(seconds: float) -> str:
    """Return ``seconds`` the short way a person reads it in a help text or a table."""
    if seconds == 0:
        return "0"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    return f"{seconds:g}s"

"""Durations as people write them for ``timeout(1)``: ``30``, ``30s``, ``5m``, ``1.5h``, ``2d``
(docs/cli.md, "Durations"). Pure: no clock, no I/O.
"""

from __future__ import annotations

import math

from tether.core.numbers import decimal_text, shown_value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

_UNIT_SECONDS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class DurationError(ValueError):
    """A duration that cannot be a duration; the message is ready for a person."""


def _refused(flag: str, value: object, problem: str) -> DurationError:
    return DurationError(f"{flag}: invalid duration {shown_value(value)} ({problem})")


def _checked(seconds: float, value: object, flag: str) -> float:
    if math.isnan(seconds) or math.isinf(seconds):
        raise _refused(flag, value, "must be a finite number")
    if seconds < 0:
        raise _refused(flag, value, "must not be negative")
    return seconds


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
        raise _refused(
            flag,
            text,
            "use a number of seconds, optionally with a suffix s, m, h or d, e.g. 30s, 5m, 1.5h",
        ) from None
    seconds = _checked(value, text, flag) * _UNIT_SECONDS[unit]
    if math.isinf(seconds):  # a finite number times a unit can still overflow: "1e308d"
        raise _refused(flag, text, "too large")
    return seconds


def duration_seconds(value: object, *, flag: str) -> float:
    """A string as the CLI takes it, a number or a :class:`~datetime.timedelta`, as seconds;
    :class:`DurationError` naming ``flag`` if it is no duration, :class:`TypeError` for a
    value of the wrong type (``True``, a list: a program's mistake)."""
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
            f"not {shown_value(value)}"
        )
    try:
        seconds = float(value)
    except OverflowError:  # an integer beyond any float
        raise _refused(flag, value, "must not be negative" if value < 0 else "too large") from None
    return _checked(seconds, value, flag)


def seconds_for_json(seconds: float) -> float | None:
    """A duration as JSON can hold it: ``null`` for an endless one (a grace never escalating)."""
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

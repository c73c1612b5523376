"""Durations are parsed the way ``timeout(1)`` users write them, and refused when they are not.

A duration is a promise about when a command will be stopped, so a value that
is not plainly a finite, non-negative number of seconds must be refused, with
a message naming the flag (DESIGN.md §4), rather than guessed at: NaN would be
a deadline that never fires, a negative one would fire before the start.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.durations import DurationError, format_duration, parse_duration

FLAG = "--deadline"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1.5h", 5400.0),
        ("2d", 172800.0),
        ("0", 0.0),
        ("0s", 0.0),
        (" 5 ", 5.0),
        ("\t5m\n", 300.0),
        ("0.25", 0.25),
        (".5", 0.5),
        ("5.", 5.0),
        ("+5", 5.0),
        ("1e3", 1000.0),
        ("1E3s", 1000.0),
        ("1e-400", 0.0),  # underflows to zero: harmless, it means "no deadline"
    ],
)
def test_accepts_what_timeout_accepts(text: str, seconds: float) -> None:
    assert parse_duration(text, flag=FLAG) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "s",
        "abc",
        "-1",
        "-1s",
        "-0.5m",
        "nan",
        "NaN",
        "nans",
        "inf",
        "infinity",
        "-inf",
        "1e999",
        "1e308d",  # finite, but infinite once multiplied by the unit
        "1e307m",
        "5x",
        "5 x",
        "5S",
        "5ms",
        "1h30m",
        "0x10",
        "0X10",
        "+0x10",
        "0x10s",
        "1_0",
        "1_000s",
        "--5",
        "5,5",
    ],
)
def test_refuses_anything_else_naming_the_flag(text: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text, flag=FLAG)
    message = str(caught.value)
    assert message.startswith(f"{FLAG}: ")
    assert repr(text) in message
    assert "\n" not in message, "one line for a person"


def test_the_message_names_whichever_flag_was_given() -> None:
    with pytest.raises(DurationError, match=r"^--grace: "):
        parse_duration("soon", flag="--grace")


def test_duration_error_is_a_value_error() -> None:
    # Callers that only know the standard library can still catch it.
    assert issubclass(DurationError, ValueError)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0"),
        (1.0, "1s"),
        (30.0, "30s"),
        (0.5, "0.5s"),
        (59.0, "59s"),
        (60.0, "1m"),
        (90.0, "90s"),
        (300.0, "5m"),
        (3600.0, "1h"),
        (5400.0, "90m"),
        (7200.0, "2h"),
        (86400.0, "1d"),
        (172800.0, "2d"),
        (90000.0, "25h"),
    ],
)
def test_format_duration_is_short(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


# Sensible durations: whole seconds (up to a year and more), and hundredths of a
# second below three hours. ``format_duration`` prints six significant digits,
# so beyond that a round trip is not promised.
whole_seconds = st.integers(min_value=0, max_value=999_999).map(float)
whole_units = st.builds(
    lambda n, unit: float(n * unit),
    st.integers(min_value=0, max_value=100_000),
    st.sampled_from([60, 3600, 86400]),
)
hundredths = st.integers(min_value=0, max_value=999_999).map(lambda n: n / 100)


@settings(max_examples=300, deadline=None)
@given(st.one_of(whole_seconds, whole_units, hundredths))
def test_format_then_parse_round_trips(seconds: float) -> None:
    text = format_duration(seconds)
    assert parse_duration(text, flag=FLAG) == seconds


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_parse_returns_a_finite_non_negative_number_or_refuses(text: str) -> None:
    try:
        seconds = parse_duration(text, flag=FLAG)
    except DurationError as error:
        message = str(error)
    else:
        assert math.isfinite(seconds)
        assert seconds >= 0
        return
    assert message.startswith(f"{FLAG}: ")
    assert "\n" not in message


@settings(max_examples=300, deadline=None)
@given(
    st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "s", "m", "h", "d"]),
)
def test_any_finite_number_with_a_suffix_parses(number: float, unit: str) -> None:
    seconds = parse_duration(f"{number!r}{unit}", flag=FLAG)
    factor = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    assert seconds == number * factor

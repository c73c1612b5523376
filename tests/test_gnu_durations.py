"""DURATION as GNU ``timeout`` reads it (strtod, one unit letter), for ``tether timeout``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.core import gnu_durations
from tether.core.gnu_durations import FOREVER, SMALLEST, parse_gnu_duration

CASES = [
    ("10", 10.0),
    ("1.5m", 90.0),
    ("2h", 7200.0),
    ("1d", 86400.0),
    (".5", 0.5),
    ("5.", 5.0),
    ("+5", 5.0),
    (" 5", 5.0),
    ("\t5s", 5.0),
    ("0", 0.0),
    ("-0", 0.0),
    ("0x10", 16.0),
    ("0x1p-2", 0.25),
    ("1e3", 1000.0),
    ("inf", FOREVER),
    ("Infinity", FOREVER),
    ("1e5000", FOREVER),
    ("1.189731495357231765e+4932", FOREVER),
    ("1e308d", FOREVER),
    ("1e-10000", SMALLEST),
    ("0x1p-5000", SMALLEST),
]

REFUSED = [
    "",
    " ",
    "5 ",
    "invalid",
    "42D",
    "5ss",
    " -0.1",
    " -1e-10000",
    "-1.189731495357231765e+4932",
    "-inf",
    "nan",
    "1_0",
    "\u0663",
    "1,5",
    "0x",
    "1e",
    "s",
]


@pytest.mark.parametrize(("text", "seconds"), CASES)
def test_read_as_gnu_reads_it(text: str, seconds: float) -> None:
    assert parse_gnu_duration(text) == seconds


@pytest.mark.parametrize("text", REFUSED)
def test_refused_as_gnu_refuses_it(text: str) -> None:
    assert parse_gnu_duration(text) is None


@given(st.text(max_size=40))
def test_any_text_is_a_duration_or_refused(text: str) -> None:
    seconds = parse_gnu_duration(text)
    assert seconds is None or seconds == 0 or seconds >= SMALLEST
    assert seconds is None or not math.isnan(seconds)


@given(st.floats(min_value=0, allow_nan=False, allow_infinity=False))
def test_every_non_negative_float_reads_back(value: float) -> None:
    seconds = parse_gnu_duration(repr(value))
    assert seconds == (value or 0.0)


_PLAIN_LOOKING = st.builds(
    lambda number, unit: number + unit,
    st.text(alphabet="0123456789.", max_size=12)
    | st.sampled_from(["0" * 400 + "1", "0." + "0" * 400 + "1"]),
    st.sampled_from(["", "s", "m", "h", "d", "x", ".", " "]),
)


@given(_PLAIN_LOOKING | st.text(alphabet="0123456789.smhdexp+- \t", max_size=12) | st.text())
def test_plain_decimals_read_by_hand_read_as_the_pattern_reads_them(text: str) -> None:
    # The hand's reading (no ``re`` for ``5`` or ``1.5m``) is the pattern's, where it reads.
    plain = gnu_durations._plain(text)
    assert plain is None or plain == gnu_durations._read(text)

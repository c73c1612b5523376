"""One reading of numbers for every door: ASCII digits, bounded length, one line naming the option.

A hypothesis test feeds every option and variable that takes a number with
anything (other scripts' digits, underscores, thousands of digits): each is
read as a number only when it is spelt in ASCII, and otherwise refused by the
door's own error naming the option, one short line, never another
exception. Real processes then show the breaks once found: no traceback,
no "please report it", status 125 for an option, a warning for a variable.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tether
from conftest import BOUND, tether_argv
from tether.core.durations import DurationError, parse_duration
from tether.core.gnu_durations import parse_gnu_duration
from tether.core.limits import LIMITS, LimitError, parse_limits
from tether.core.numbers import MAX_CHARACTERS, decimal_text, shown, whole_number
from tether.shared.retention import retention_from

#: Texts people (and attackers) type where a number goes.
NUMBERISH = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="0123456789._eE+-x ٣١٥۳", max_size=60),
    st.integers().map(str),
    st.floats(allow_nan=True).map(str),
    st.integers(min_value=1, max_value=6000).map(lambda n: "1" * n),
    st.integers(min_value=1, max_value=6000).map(lambda n: "0." + "0" * n + "1"),
)

LIMIT_FLAGS = {limit.name: limit.flag for limit in LIMITS}
DURATION_FLAGS = ("--deadline", "--grace", "--older-than", "--deadline-seconds", "--grace-seconds")


def _limit(name: str, flags: dict[str, str] | None = None) -> Callable[[str], object]:
    return lambda text: parse_limits({name: text}, flags)


def _duration(flag: str) -> Callable[[str], object]:
    return lambda text: parse_duration(text, flag=flag)


#: Every reader of a typed number, by the name its messages must carry.
READERS: dict[str, tuple[Callable[[str], object], type[Exception]]] = {
    **{flag: (_limit(name, LIMIT_FLAGS), LimitError) for name, flag in LIMIT_FLAGS.items()},
    **{name: (_limit(name), LimitError) for name in LIMIT_FLAGS},  # the API's names
    **{flag: (_duration(flag), DurationError) for flag in DURATION_FLAGS},
}


def _one_line(message: str, name: str) -> None:
    assert name in message
    assert "\n" not in message
    assert len(message) < 300, message


@given(st.sampled_from(sorted(READERS)), NUMBERISH)
def test_every_option_reads_ascii_numbers_only_and_refuses_the_rest_naming_itself(
    name: str, text: str
) -> None:
    reader, error = READERS[name]
    api = not name.startswith("--")
    try:
        reader(text)
    except error as refused:
        _one_line(str(refused), name)
        return
    assert text.strip().isascii()
    assert "_" not in text
    assert len(text.strip()) <= MAX_CHARACTERS or api


@given(st.sampled_from(["TETHER_KEEP_RUNS", "TETHER_KEEP_DAYS"]), NUMBERISH)
def test_every_variable_reads_ascii_numbers_only_and_warns_of_the_rest(
    variable: str, text: str
) -> None:
    _retention, problems = retention_from({variable: text})
    for problem in problems:
        _one_line(problem, variable)
    if not problems and text.strip():
        assert text.strip().isascii()
        assert "_" not in text


@given(NUMBERISH)
def test_timeout_durations_read_as_gnu_does_never_raise(text: str) -> None:
    parse_gnu_duration(text)  # GNU's own reading (tests/test_gnu_durations.py); never an error


@given(NUMBERISH)
@example("0" * 16 + "\x1f" * 6 + "\U0001089f" * 8)  # escapes longer than the text (found)
def test_the_reader_itself(text: str) -> None:
    number = whole_number(text)
    if number is not None:
        assert text.isascii()
        assert text.isdigit()
        assert len(text) <= MAX_CHARACTERS
        assert str(number) == text.lstrip("0") or number == 0
    if decimal_text(text):
        assert text.isascii()
        assert "_" not in text
        assert len(text) <= MAX_CHARACTERS
    assert len(shown(text)) < 2 * MAX_CHARACTERS + 30


# -- real processes: the breaks once found ------------------------------------

MANY_DIGITS = "1" * 5001


def _tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tether_argv(*args), capture_output=True, text=True, timeout=BOUND, env=env, check=False
    )


def _refused_in_one_line(done: subprocess.CompletedProcess[str], name: str) -> str:
    assert "Traceback" not in done.stderr
    assert "report" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("Try ")]
    assert len(lines) == 1, done.stderr
    assert name in lines[0]
    assert len(lines[0]) < 300
    return lines[0]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--pids-max", MANY_DIGITS),
        ("--pids-max", "٣"),
        ("--cpus", "\u0661.\u0665"),  # one point five, in Arabic-Indic digits
        ("--cpus", "1_0"),
        ("--memory-max", "٣G"),
        ("--deadline", MANY_DIGITS),
    ],
)
def test_tether_run_refuses_numbers_that_are_not_plainly_numbers(
    option: str, value: str, tmp_path: Path
) -> None:
    done = _tether("run", option, value, "--", "touch", str(tmp_path / "ran"))
    assert done.returncode == 125
    _refused_in_one_line(done, option)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    "value", [MANY_DIGITS, 10**5000, "\u0663"], ids=["digits", "int", "arabic"]
)
def test_the_api_names_pids_max(value: object) -> None:
    with pytest.raises(ValueError, match="pids_max") as refused:
        tether.launch(["true"], pids_max=value)  # type: ignore[arg-type]  # read from a file
    assert "\n" not in str(refused.value)
    assert len(str(refused.value)) < 300


def test_prune_keep_with_thousands_of_digits_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _tether("prune", "--keep", "9" * 5000, str(tmp_path))
    assert done.returncode == 125
    _refused_in_one_line(done, "--keep")


@pytest.mark.parametrize(
    ("variable", "value"),
    [("TETHER_KEEP_RUNS", "9" * 5000), ("TETHER_KEEP_DAYS", "٣"), ("TETHER_KEEP_RUNS", "٣")],
)
def test_retention_variables_that_are_not_plainly_numbers_are_warned_of(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    env = {**os.environ, variable: value}
    done = _tether("prune", "--dry-run", str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "report" not in done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if variable in line]
    assert "using the default" in warning
    assert len(warning) < 300

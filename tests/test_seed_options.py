"""The seed door's options read by hand answer exactly as its ``argparse`` parser does.

The hand reader (:mod:`tether.cli.seed_options`) keeps ``argparse`` off the
path to the command's launch; the ``argparse`` parser stays the reference
(and ``--help``). On random command lines, whatever the hand reader answers
(the values, the words left over, or the refusal's words) is what the parser
answers, and what it does not read goes to the parser: the door's answer is
the parser's on every command line. And it reads every command line spelt as
documented, so the speed cannot quietly go either.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.cli import seed_options
from tether.cli.seed_options import SeedOptions, UsageError, parser, read_options

NAMES = ("--variant", "--parent-fd", "--record", "--deadline-seconds", "--grace-seconds")

#: Words that do not start with "-": always a value or a word left over.
PLAIN = st.one_of(
    st.sampled_from(["", "v", "3", "0", "10", "1.5", "x y", "a=b", " 3", "+3", "1_0", "\u0663"]),
    st.sampled_from(["99999999999", "2147483648", "9" * 40, "nan", "/tmp/r.json"]),
    st.text(max_size=6).filter(lambda word: not word.startswith("-")),
)
#: Words that start with "-": abbreviations, help, unknown options, negative numbers.
DASHED = st.one_of(
    st.sampled_from(
        ["-h", "--help", "--he", "-hx", "-h=1", "--help=1", "--var", "--pa=3", "--de", "--g"]
    ),
    st.sampled_from(["--bogus", "--bogus=1", "-x", "-x y", "-1", "-1.5", "-", "--=x", "---x"]),
    st.sampled_from(["--variant-x", "--recordx", "--parent-fd3", "-p", "--Variant"]),
    st.text(max_size=5).map(lambda tail: "-" + tail),
)
VALUE = st.one_of(PLAIN, DASHED)
WORD = st.one_of(
    st.sampled_from(NAMES),
    st.tuples(st.sampled_from(NAMES), VALUE).map(lambda pair: f"{pair[0]}={pair[1]}"),
    PLAIN,
    DASHED,
)
#: What comes before "--" on a seed door's command line ("--" itself never does).
COMMAND_LINES = st.lists(WORD, max_size=12).filter(lambda words: "--" not in words)

Outcome = tuple[object, ...]


def by_argparse(words: list[str]) -> tuple[SeedOptions, list[str]]:
    """The reference: the door's ``argparse`` parser, alone."""
    parsed, extras = parser().parse_known_args(words)
    return SeedOptions(
        variant=parsed.variant,
        parent_fd=parsed.parent_fd,
        record=parsed.record,
        deadline_seconds=parsed.deadline_seconds,
        grace_seconds=parsed.grace_seconds,
    ), extras


def outcome(read: Callable[[list[str]], object], words: list[str]) -> Outcome:
    """What ``read`` made of ``words``: what it read, its refusal, or how it exited (help)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            result = read(list(words))
        except UsageError as error:
            return ("refused", error.message)
        except SystemExit as exit_:
            return ("exited", exit_.code, out.getvalue(), err.getvalue())
    if result is None:
        return ("not read",)
    return ("read", result)


@settings(max_examples=500, deadline=None)
@given(COMMAND_LINES)
@example(["--variant", "v", "--parent-fd", "3", "--record", "r", "--deadline-seconds", "1"])
@example(["--parent-fd", "x", "--variant"])
@example(["--variant=", "--parent-fd=3", "--record=--", "--deadline-seconds=0"])
def test_what_the_hand_reader_reads_it_reads_as_argparse_does(words: list[str]) -> None:
    by_hand = outcome(seed_options._read_by_hand, words)
    if by_hand != ("not read",):
        assert by_hand == outcome(by_argparse, words)


@settings(max_examples=300, deadline=None)
@given(COMMAND_LINES)
def test_the_door_answers_as_argparse_does_on_any_command_line(words: list[str]) -> None:
    assert outcome(read_options, words) == outcome(by_argparse, words)


def documented(pieces: list[tuple[str, str, str]], last: str | None) -> list[str]:
    """A command line spelt as documented: ``--name VALUE``, ``--name=VALUE``, plain words."""
    words: list[str] = []
    for kind, name, value in pieces:
        if kind == "pair":
            words += [name, value]
        elif kind == "equals":
            words.append(f"{name}={value}")
        else:
            words.append(value)
    return words if last is None else [*words, last]


DOCUMENTED = st.builds(
    documented,
    st.lists(
        st.tuples(st.sampled_from(["pair", "equals", "word"]), st.sampled_from(NAMES), PLAIN).map(
            lambda piece: piece if piece[0] != "equals" else (*piece[:2], piece[2] or "-x")
        ),
        max_size=8,
    ),
    st.one_of(st.none(), st.sampled_from(NAMES)),
)


@settings(max_examples=300, deadline=None)
@given(DOCUMENTED)
def test_every_command_line_spelt_as_documented_is_read_by_hand(words: list[str]) -> None:
    assert outcome(seed_options._read_by_hand, words) != ("not read",)
    assert outcome(seed_options._read_by_hand, words) == outcome(by_argparse, words)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--variant", "v"], "the following arguments are required: "
         "--parent-fd, --record, --deadline-seconds, --grace-seconds"),
        (["--variant", "v", "--parent-fd"], "argument --parent-fd: expected one argument"),
        (["--parent-fd", " 3", "--record"], "argument --parent-fd: not a descriptor number: ' 3'"),
        (["--parent-fd=" + "9" * 12],
         "argument --parent-fd: not a descriptor number: '9999999999...'"),
    ],
)  # fmt: skip
def test_refusals_are_worded_as_argparse_words_them(words: list[str], message: str) -> None:
    assert outcome(seed_options._read_by_hand, words) == ("refused", message)
    assert outcome(by_argparse, words) == ("refused", message)


def test_help_is_argparses() -> None:
    code, out, err = outcome(read_options, ["--variant", "v", "--help"])[1:]
    assert (code, err) == (0, "")
    assert isinstance(out, str)
    assert out.startswith("usage: python -m tether.supervisor [-h] --variant VARIANT")
    assert "read end of a pipe the caller holds open" in out

"""``tether timeout``'s hand-read options against :mod:`getopt`, which read them before.

:mod:`tether.cli.timeout_options` reads the command line without
:mod:`getopt` (and so without ``gettext`` and ``re``). On any command line the
two readings must agree: the same options, duration and command, or the same
refusal word for word, with the same status. The reference is ``tether
timeout``'s reading before, :func:`getopt.getopt` with GNU's messages put on
its refusals, corrected where it was not GNU's (``getopt_long``), which the
new reading follows and the reference therefore models:

* GNU reads options one at a time, each acting as it is read: ``--help`` before
  a later unknown option prints the help; ``-k bad`` before one is refused for
  its duration. :mod:`getopt` refused the whole line first.
* ``-+`` is an invalid option (``getopt`` took the ``+`` of ``"+fk:ps:v"`` for
  an option letter).
* An unknown or ambiguous long option is named by the word as typed, value
  included (``'--ver=3' is ambiguous``, ``unrecognized option '--foo=3'``);
  ``---`` is an unknown long option (``getopt``'s message made it a short one).
"""

from __future__ import annotations

import getopt
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import BOUND, outcome_of
from tether._version import __version__
from tether.cli import timeout
from tether.cli.timeout_options import LONG_OPTIONS, SHORT_OPTIONS

_GETOPT_LONG = [f"{name}=" if value else name for name, value in LONG_OPTIONS.items()]
_GETOPT_SHORT = "".join(f"{letter}:" if LONG_OPTIONS[name] else letter
                        for letter, name in SHORT_OPTIONS.items())  # fmt: skip


def test_the_tables_agree() -> None:
    assert _GETOPT_SHORT == "fk:ps:v"  # GNU timeout's, without its "+" (getopt stops anyway)
    assert set(SHORT_OPTIONS.values()) <= set(LONG_OPTIONS)


def _message(error: getopt.GetoptError, word: str) -> str:
    """GNU getopt_long's words for what :mod:`getopt` refused in ``word``."""
    option = error.opt
    long = word.startswith("--")
    if "requires argument" in error.msg:
        return (
            f"option '--{option}' requires an argument"
            if long
            else f"option requires an argument -- '{option}'"
        )
    if "must not have an argument" in error.msg:
        return f"option '--{option}' doesn't allow an argument"
    if "not a unique prefix" in error.msg:
        choices = " ".join(f"'--{name}'" for name in LONG_OPTIONS if name.startswith(option))
        return f"option '{word}' is ambiguous; possibilities: {choices}"
    if long:
        return f"unrecognized option '{word}'"
    return f"invalid option -- '{option}'"


def _refusal(argv: list[str]) -> tuple[int, getopt.GetoptError] | None:
    """Where :mod:`getopt` refuses ``argv`` (the refused word's index), and why; or None.

    The first prefix of ``argv`` refused for something other than a missing
    value is refused at its last word; a missing value is only ever the last.
    """
    for end in range(1, len(argv) + 1):
        try:
            getopt.getopt(argv[:end], _GETOPT_SHORT, _GETOPT_LONG)
        except getopt.GetoptError as error:
            if "requires argument" not in error.msg or end == len(argv):
                return end - 1, error
    return None


def _by_reference(argv: list[str]) -> object:
    """``tether timeout``'s reading before, with GNU's order of acting."""
    refused = _refusal(argv)
    readable = argv if refused is None else argv[: refused[0]]
    pairs, rest = getopt.getopt(readable, _GETOPT_SHORT, _GETOPT_LONG)
    options = timeout._Options()
    for flag, value in pairs:
        name = flag.lstrip("-")
        name = SHORT_OPTIONS.get(name, name)
        if name == "help":
            timeout._print_and_exit(timeout._HELP.format(program=timeout._Program.name))
        if name == "version":
            timeout._print_and_exit(f"timeout (tether) {__version__}\n")
        timeout._take(options, name, value)
    if refused is not None:
        index, error = refused
        # getopt says the word as given, bytes that are not UTF-8 included.
        timeout._usage_error(_message(error, argv[index]), as_given=True)
    if len(rest) < 2:
        timeout._usage_error(None)
    return vars(options), timeout._duration(rest[0]), rest[1:]


def _by_hand(argv: list[str]) -> object:
    options, duration, command = timeout._parse(argv)
    return vars(options), duration, command


_NAMES = st.sampled_from(
    [
        *(f"--{name}" for name in LONG_OPTIONS),
        *(f"-{letter}" for letter in SHORT_OPTIONS),
        "--kill", "--pres", "--ver", "--v", "--re", "--no", "--l", "--", "---", "-", "-+",
        "-x", "-h", "-=", "--=x", "--foo", "-:",
    ]
)  # fmt: skip
_VALUES = st.sampled_from(
    [
        "5",
        "0",
        "1.5m",
        "inf",
        "-1",
        "bad",
        "TERM",
        "KILL",
        "9",
        "x y",
        "",
        "=",
        "--",
        "-v",
        "\udcff",
    ]
)
_WORDS = st.one_of(
    _NAMES,
    _VALUES,
    st.builds(lambda name, value: f"{name}={value}", _NAMES, _VALUES),
    st.builds(
        lambda letters: "-" + letters, st.text(alphabet="fkpsvx+5=-", min_size=1, max_size=4)
    ),
    st.sampled_from(["true", "make"]),
    st.text(max_size=4),
)


@settings(max_examples=800, deadline=None)
@given(st.lists(_WORDS, max_size=8))
def test_the_hand_reading_agrees_with_getopts(argv: list[str]) -> None:
    assert outcome_of(lambda: _by_hand(argv)) == outcome_of(lambda: _by_reference(argv))


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--help", "--foo"], None),
        (["-k", "bad", "--foo", "5", "true"], "invalid time interval 'bad'"),
        (["-+", "5", "true"], "invalid option -- '+'"),
        (["-s", "--foox", "--foo", "5", "true"], "'--foox': invalid signal"),
        (["--ver=3", "5", "true"], "option '--ver=3' is ambiguous; possibilities: "
                                   "'--verbose' '--version'"),
        (["--foo=3", "5", "true"], "unrecognized option '--foo=3'"),
        (["--verb=1", "5", "true"], "option '--verbose' doesn't allow an argument"),
        (["-vpk"], "option requires an argument -- 'k'"),
    ],
)  # fmt: skip
def test_where_getopt_was_not_gnus(argv: list[str], said: str | None) -> None:
    result, out, err = outcome_of(lambda: _by_hand(argv))
    if said is None:  # the help, printed as it was read
        assert (result, out.startswith("Usage: "), err) == (("exit", 0), True, "")
    else:
        assert result == ("exit", 125)
        assert err.splitlines()[0] == f"tether timeout: {said}"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help", "--foo"],
        ["-k", "bad", "--foo", "5", "true"],
        ["-+", "5", "true"],
        ["-s", "--foox", "--foo", "5", "true"],
        ["--ver=3", "5", "true"],
        ["--foo=3", "5", "true"],
        ["--verb=1", "5", "true"],
        ["--pres", "--kill=1", "--sig=KILL", "-vk", "2", "--", "0"],
        ["-vk"],
        ["-vk5"],
        ["--=x"],
        ["---"],
    ],
)
def test_refusals_read_as_gnus(argv: list[str]) -> None:
    """Against GNU ``timeout`` itself, both invoked as ``timeout``. GNU's 9.1 has neither
    ``-f`` nor ``-p`` (9.6 has), and lists fewer options when a prefix is ambiguous: tether's
    own are left out of the comparison."""
    gnu = "/usr/bin/timeout"
    if not os.access(gnu, os.X_OK):
        pytest.skip("no GNU timeout")
    env = {**os.environ, "LC_ALL": "C", "PATH": ""}  # a command that parses is not found
    gnus = subprocess.run(
        ["timeout", *argv], executable=gnu, capture_output=True, env=env, timeout=BOUND,
        check=False,
    )  # fmt: skip
    ours = subprocess.run(
        [sys.executable, "-c", "import sys; from tether.cli.timeout import main;"
         " raise SystemExit(main(sys.argv[1:], program='timeout'))", *argv],
        capture_output=True, env=env, timeout=BOUND,
        check=False,
    )  # fmt: skip
    if gnus.returncode == 0:  # --help: GNU names itself by argv[0], so does tether
        assert ours.returncode == 0
        return
    assert (ours.returncode, ours.stderr.split(b"; possibilities")[0]) == (
        gnus.returncode,
        gnus.stderr.split(b"; possibilities")[0],
    )

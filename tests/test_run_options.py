"""``tether run``'s hand-read options against its argparse parser: they must never drift.

:mod:`tether.cli.run_options` reads the command line by hand so that
``argparse`` stays off the path to the launch; :func:`tether.cli.run._run_parser`
still documents the options (``--help``, the man page, the completions). The
table must be the parser's, and on any command line the two readings must
agree: the same values, or the same refusal word for word, with the same
status. The reference reading is the one ``tether run`` had before: a GNU
pre-pass over the parser's own option strings, then ``parse_args``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import outcome_of
from tether.cli.messages import usage_error
from tether.cli.run import _run_parser
from tether.cli.run_options import OPTIONS, RunOptions, read_options, split_command_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import NoReturn


def test_the_table_is_the_parsers() -> None:
    parser = _run_parser()
    actions = parser._option_string_actions
    assert list(OPTIONS) == list(actions)
    assert {name: (action.dest, action.nargs is None) for name, action in actions.items()} == (
        OPTIONS
    )
    [group] = parser._mutually_exclusive_groups
    assert {action.dest for action in group._group_actions} == {"record", "no_record"}


def test_an_empty_command_line_gives_the_parsers_defaults() -> None:
    assert vars(read_options([])) == vars(_run_parser().parse_args([]))


def _reference_usage(message: str, *, suggestion: str | None = None) -> NoReturn:
    usage_error("tether run", message, suggestion=suggestion)


def _reference_split(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """The options as ``tether run`` split them before it read them by hand (verbatim)."""
    actions = parser._option_string_actions
    options: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return options
        if not word.startswith("-") or word == "-":
            return options
        name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
        option = _reference_resolve(name, actions)
        takes_value = actions[option].nargs is None
        attached = "=" in word if word.startswith("--") else len(word) > 2
        if takes_value and not attached:
            if index + 1 == len(argv):
                _reference_usage(f"option '{option}' requires an argument")
            index += 1
            word = f"{option}={argv[index]}"
        elif not takes_value and attached and word.startswith("--"):
            _reference_usage(f"option '{option}' doesn't allow an argument")
        options.append(word)
        index += 1
    return options


def _reference_resolve(name: str, actions: dict[str, argparse.Action]) -> str:
    if name in actions:
        return name
    if name.startswith("--"):
        import difflib

        close = difflib.get_close_matches(name, [o for o in actions if o.startswith("--")], n=1)
        _reference_usage(f"unrecognized option '{name}'", suggestion=close[0] if close else None)
    _reference_usage(f"invalid option -- '{name[1:]}'")


def _by_reference(argv: list[str]) -> object:
    parser = _run_parser()
    return vars(parser.parse_args(_reference_split(argv, parser)))


def _by_hand(argv: list[str]) -> object:
    options, _command = split_command_line(argv)
    values = read_options(options)
    if values is None:
        # The parser's to read: only --help and short options with something attached.
        assert any(
            word in ("-h", "--help") or (not word.startswith("--") and len(word) > 2)
            for word in options
        ), options
        values = _run_parser().parse_args(options, namespace=RunOptions())
    return vars(values)


_VALUES = st.sampled_from(["5", "5m", "-x", "--", "-", "", "=", "a=b", "-v", "--record", "x y"])
_NAMES = st.sampled_from(
    [*OPTIONS, "--deadlin", "--verb", "--nam", "--", "---", "-x", "-", "-=", "--=x"]
)
_WORDS = st.one_of(
    _NAMES,
    _VALUES,
    st.builds(lambda name, value: f"{name}={value}", _NAMES, _VALUES),
    st.builds(lambda letters: "-" + letters, st.text(alphabet="vhx=1", min_size=1, max_size=4)),
    st.sampled_from(["true", "make"]),
    st.text(max_size=4),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_WORDS, max_size=8))
def test_the_hand_reading_agrees_with_the_parser(argv: list[str]) -> None:
    assert outcome_of(lambda: _by_hand(argv)) == outcome_of(lambda: _by_reference(argv))


def _spelt(name: str, value: str, attached: bool) -> list[str]:
    """One option as a person may spell it: ``--opt VALUE``, ``--opt=VALUE``, ``-v``."""
    if not OPTIONS[name][1]:
        return [name]
    return [f"{name}={value}"] if attached else [name, value]


_SPELT = st.builds(
    _spelt,
    st.sampled_from([name for name in OPTIONS if name not in ("-h", "--help")]),
    _VALUES,
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_SPELT, max_size=6), st.sampled_from([[], ["--"]]))
def test_argparse_is_never_needed_without_help(spelt: list[list[str]], end: list[str]) -> None:
    """Options as people spell them never need the parser, and read as it reads them:
    the last of a repeated option counts, ``--record`` and ``--no-record`` are refused
    together."""
    argv = [word for words in spelt for word in words] + end + ["true"]
    options, command = split_command_line(argv)
    assert command == ["true"]
    hand = outcome_of(lambda: read_options(options))
    if isinstance(hand[0], RunOptions):
        hand = (vars(hand[0]), *hand[1:])
    else:
        assert hand[0] == ("exit", 125)
    assert hand == outcome_of(lambda: _by_reference(argv))

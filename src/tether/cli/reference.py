"""The whole ``tether`` command line as one argument parser, for its manual page and completions.

``tether`` dispatches ``run`` and ``timeout`` by hand (so that ``tether run
--help`` loads nothing it does not need, and ``timeout`` can parse as GNU
does), so no single parser describes every subcommand. This one does, built
from the parsers the subcommands really use, so the manual page
(``argparse-manpage``) and the shell completions (``shtab``) generated from it
(``scripts/generate_reference.py``) cannot drift from the program: a test
regenerates them and compares. ``tether timeout``'s options are written out
here, as its GNU-style parser has no argparse form; a test checks that each
appears in its ``--help``.

Only the generator and the tests import this module.
"""

from __future__ import annotations

import argparse

__all__ = ["TIMEOUT_OPTIONS", "reference_parser"]

#: ``tether timeout``'s options: (flags, metavar or ``None`` for a switch, help).
TIMEOUT_OPTIONS: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (
        ("-p", "--preserve-status"),
        None,
        "exit with the same status as COMMAND, even when the command times out",
    ),
    (("-f", "--foreground"), None, "let COMMAND read from the terminal and get its signals"),
    (
        ("-k", "--kill-after"),
        "DURATION",
        "also send a KILL signal if COMMAND is still running this long after the first signal",
    ),
    (("-s", "--signal"), "SIGNAL", "the signal to send on timeout (a name like HUP or a number)"),
    (("-v", "--verbose"), None, "diagnose to stderr any signal sent upon timeout"),
    (("--record",), "PATH", "write tether's record here"),
    (("--no-record",), None, "write no record"),
    (("--label",), "LABEL", "a label for the record, shown by tether ls and show"),
)


def reference_parser() -> argparse.ArgumentParser:
    """``tether`` with every subcommand and option, as the manual page and completions show it."""
    from tether.cli.main import _main_parser
    from tether.cli.run import _run_parser

    parser = _main_parser()
    subparsers = next(
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    run_help, timeout_help = (
        choice.help for choice in subparsers._choices_actions if choice.dest in ("run", "timeout")
    )
    # Replaced by parsers that know their options (the dispatcher's are empty).
    subparsers.choices.pop("run")
    subparsers.choices.pop("timeout")
    subparsers._choices_actions = [
        choice for choice in subparsers._choices_actions if choice.dest not in ("run", "timeout")
    ]
    run_parser = _run_parser()
    run = subparsers.add_parser(
        "run",
        parents=[run_parser],
        add_help=False,
        help=run_help,
        description=run_parser.description,
        epilog=run_parser.epilog,
        usage=run_parser.usage,
    )
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARG]...")
    timeout = subparsers.add_parser(
        "timeout",
        help=timeout_help,
        description="Start COMMAND, and kill it if still running after DURATION: GNU timeout, "
        "and COMMAND with its whole process tree is also stopped when tether timeout itself is "
        "killed. Also installed as timeout.",
    )
    for flags, metavar, text in TIMEOUT_OPTIONS:
        if metavar is None:
            timeout.add_argument(*flags, action="store_true", help=text)
        else:
            timeout.add_argument(*flags, metavar=metavar, help=text)
    timeout.add_argument("duration", metavar="DURATION")
    timeout.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARG]...")
    return parser

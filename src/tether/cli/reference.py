"""The whole ``tether`` command line as one argument parser, built from the parsers the
subcommands use, for its manual page and completions (``scripts/generate_reference.py``; tests
regenerate and compare). Only the generator and the tests import this module.
"""

from __future__ import annotations

import argparse

from tether.cli.parsers import add_options

#: ``tether run``'s exit statuses (every door's but ``timeout``'s): (status, meaning).
EXIT_STATUSES: tuple[tuple[str, str], ...] = (
    ("N", "the command completed: its own exit status (0 for success)"),
    ("128+N", "the command was killed by signal N (137: SIGKILL, 143: SIGTERM)"),
    ("124", "the deadline passed (--deadline), or the run was idle for its --idle bound: the "
     "whole tree was stopped"),
    ("125", "tether itself failed: bad usage or duration, a record that cannot be written, "
     "the supervisor lost; for show, ls and prune: nothing to show, a bad option, an "
     "unreadable directory"),
    ("126", "the command was found but cannot be executed"),
    ("127", "the command was not found"),
    ("130", "cancelled (SIGINT, SIGTERM or SIGHUP to tether, Ctrl-C) or the caller was lost"),
)  # fmt: skip

#: ``tether timeout``'s, which are GNU timeout's.
TIMEOUT_STATUSES: tuple[tuple[str, str], ...] = (
    ("124", "COMMAND timed out, and --preserve-status was not given"),
    ("125", "tether timeout itself failed"),
    ("126", "COMMAND was found but cannot be invoked"),
    ("127", "COMMAND was not found"),
    ("137", "COMMAND (or tether timeout itself) was sent the KILL signal (128+9)"),
    ("N", "COMMAND's own exit status otherwise (128+N if it died of signal N, as its caller "
     "sees it: tether timeout then dies of the same signal)"),
)  # fmt: skip


#: The manual page's EXAMPLES: (what it does, the command line); the tests run each one.
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Run a command that starts a background child in a session of its own; after two "
     "seconds stop both, exit 124, and say so in one line (what ended the run, how many "
     "processes were stopped, where the record is):",
     "tether run -v --deadline 2s -- sh -c 'setsid sleep 60 & sleep 60'"),
    ("Tell the whole story of the last run: the verdict, then its timeline:",
     "tether show --last"),
    ("The five newest runs of the last hour that a deadline stopped, for jq:",
     "tether ls -n 5 --reason deadline_exceeded --since 1h --json"),
    ("Evaluate with a label, under limits the kernel enforces on the whole tree (an OOM kill "
     "is said first everywhere: killed by the OOM killer at its memory limit of 512 MiB):",
     "tether run --label eval-42 --deadline 2h --memory-max 512M --cpus 1 -- "
     "python3 evaluate.py"),
    ("GNU timeout's drop-in: TERM after a minute, KILL five seconds later:",
     "tether timeout -k 5s 1m make test"),
    ("Say which runs older than a week would be removed, and remove nothing:",
     "tether prune --older-than 7d --dry-run"),
)  # fmt: skip


def examples_section() -> str:
    lines: list[str] = []
    for what, command in EXAMPLES:
        typed = command.replace("\\", "\\e").replace("-", "\\-")
        lines += [".PP", what, ".PP", ".RS", ".nf", typed, ".fi", ".RE"]
    return "\n".join(lines)


def exit_status_section() -> str:
    def table(rows: tuple[tuple[str, str], ...]) -> list[str]:
        return [line for status, meaning in rows for line in (".TP", f".B {status}", meaning)]

    return "\n".join(
        [
            "tether run, and the Python API's Outcome.exit_status:",
            *table(EXIT_STATUSES),
            ".PP",
            "tether timeout, as GNU timeout:",
            *table(TIMEOUT_STATUSES),
            ".PP",
            "tether show, ls and prune exit 0 when they did their work (even listing nothing), "
            "125 otherwise.",
        ]
    )


def _words(name: str, words: tuple[str, ...]) -> dict[str, object]:
    """A shtab completion offering ``words`` (bash through a function, zsh as a list)."""
    joined = " ".join(words)
    function = f"_shtab_tether_{name}"
    return {
        "bash": function,
        "zsh": f"({joined})",
        "preamble": {"bash": f'\n{function}() {{\n  compgen -W "{joined}" -- "$1"\n}}\n'},
    }


#: What ``ls --since`` is offered, as its help says.
SINCE_EXAMPLES: tuple[str, ...] = ("30m", "12h", "7d", "2024-05-01")

#: ``tether timeout``'s options: (flags, metavar or ``None`` for a switch, help).
TIMEOUT_OPTIONS: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("-p", "--preserve-status"), None,
     "exit with the same status as COMMAND, even when the command times out"),
    (("-f", "--foreground"), None, "let COMMAND read from the terminal and get its signals"),
    (("-k", "--kill-after"), "DURATION",
     "also send a KILL signal if COMMAND is still running this long after the first signal"),
    (("-s", "--signal"), "SIGNAL", "the signal to send on timeout (a name like HUP or a number)"),
    (("-v", "--verbose"), None, "diagnose to stderr any signal sent upon timeout"),
    (("--record",), "PATH", "write tether's record here"),
    (("--no-record",), None, "write no record"),
    (("--label",), "LABEL", "a label for the record, shown by tether ls and show"),
)  # fmt: skip


def reference_parser() -> argparse.ArgumentParser:
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
    add_options(timeout, *TIMEOUT_OPTIONS)
    timeout.add_argument("duration", metavar="DURATION")
    timeout.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARG]...")
    _complete_ls(subparsers.choices["ls"])
    return parser


def _complete_ls(ls: argparse.ArgumentParser) -> None:
    """Offer ``--reason``'s values and ``--since`` examples (both take more than choices)."""
    from tether.review.listing import REASON_CHOICES

    for action in ls._actions:
        if "--reason" in action.option_strings:
            action.complete = _words("reasons", REASON_CHOICES)  # type: ignore[attr-defined]
        elif "--since" in action.option_strings:
            action.complete = _words("since", SINCE_EXAMPLES)  # type: ignore[attr-defined]

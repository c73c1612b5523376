"""The ``tether`` command: dispatches to each subcommand's module, importing only what that one
needs (docs/architecture.md, "Processes").
"""

from __future__ import annotations

import os
import signal
import sys
import time

import tether
from tether._version import __version__
from tether.cli.messages import say_help
from tether.core.reasons import TETHER_FAILED
from tether.shared.process_start import process_started_at

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import NoReturn

    from tether.core.spec import RunSpec

__all__ = ["console_main", "main", "timeout_program"]


def _main_parser() -> argparse.ArgumentParser:
    # Here: ``tether timeout`` never needs argparse.
    from tether.cli.parsers import UsageParser
    from tether.cli.review import add_review_parsers

    parser = UsageParser(
        prog="tether",
        description="Run one command so that it cannot outlive the process that asked for it.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run a command bound to this process (tether run --help)")
    sub.add_parser(
        "timeout",
        help="a drop-in for GNU timeout, with tether's guarantees (tether timeout --help)",
    )
    add_review_parsers(sub)
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise LookupError(name)  # pragma: no cover - every subcommand is added above


def console_main() -> int:
    """The ``tether`` program (``tether timeout`` when invoked as ``timeout``); its deadline counts
    from when this process started (docs/cli.md, "The deadline")."""
    if os.path.basename(sys.argv[0]) == "timeout":
        return timeout_program()
    status = main(asked_at=_as_program())
    return _exit_at_once(status) if sys.argv[1:2] in (["run"], ["timeout"]) else status


def timeout_program() -> int:
    """The ``timeout`` program (the launcher's and the ``timeout`` symlink's): GNU's arguments."""
    asked_at = _as_program()
    from tether.cli.timeout import main as timeout_main

    status = timeout_main(sys.argv[1:], asked_at=asked_at, program="timeout")
    return _exit_at_once(status)


def _as_program() -> float:
    """Set up this process as a program of tether's own; when it was asked for (monotonic)."""
    quiet_interrupts()
    asked_at = process_started_at(tether._LOADED_AT)
    _fork_supervisors()
    return asked_at


def _exit_at_once(status: int) -> int:
    """End a run's caller without the interpreter's teardown; return only if a flush fails."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the ordinary exit says what went wrong
        return status
    os._exit(status)


def _fork_supervisors() -> None:
    """Fork supervisors from this single-threaded program (:func:`main` alone spawns them)."""
    from tether.caller.fork import fork_supervisors
    from tether.linux.descriptors import open_descriptors
    from tether.supervisor.detach import become

    # Read before this program opens anything: the command gets it all, as from a shell.
    inherited = tuple(open_descriptors())

    def become_handing_on(spec: RunSpec) -> NoReturn:
        become(spec, inherited)

    fork_supervisors(become_handing_on, hand_on=inherited)


def quiet_interrupts() -> None:
    """Let Ctrl-C end the program as a C program's, until a door installs its own handler."""
    # Only Python's own handler: an ignored SIGINT stays ignored.
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: list[str] | None = None, *, asked_at: float | None = None) -> int:
    """Run the command line ``argv``; a deadline counts from ``asked_at`` (default: now)."""
    if asked_at is None:
        asked_at = time.monotonic()
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        from tether.cli.run import run

        return run(args[1:], asked_at)
    if args[:1] == ["timeout"]:
        from tether.cli.timeout import main as timeout_main

        return timeout_main(args[1:], asked_at=asked_at)
    parser = _main_parser()
    parsed = parser.parse_args(args[:1]) if args[:1] in (["show"], ["ls"], ["prune"]) else None
    if parsed is not None:
        # The subcommand's own parser reads its options: a bad one is refused with its usage.
        parsed = _subparser(parser, args[0]).parse_args(args[1:], namespace=parsed)
    else:
        parsed = parser.parse_args(args)
    if parsed.command in ("show", "ls", "prune"):
        from tether.cli import review

        command: Callable[[argparse.Namespace], int] = getattr(review, parsed.command)
        return command(parsed)
    say_help(_main_parser())
    return TETHER_FAILED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

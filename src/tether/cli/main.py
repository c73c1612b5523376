"""The ``tether`` command: its subcommands, and where each one's code lives.

``tether run`` (:mod:`.run`) and ``tether timeout`` (:mod:`.timeout`) start a
command; ``tether show`` and ``tether ls`` (:mod:`.review`) read what runs left
behind, and ``tether prune`` clears it. This module only dispatches, and
imports what the chosen subcommand needs: ``tether run --help``, ``tether run
-- true``, ``show`` and ``ls`` never load ``transitions`` or ``structlog``.
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
    from typing import NoReturn

    from tether.core.spec import RunSpec

__all__ = ["console_main", "main", "timeout_program"]


def _main_parser() -> argparse.ArgumentParser:
    # Here, not at the top: ``tether timeout`` never needs argparse (see tether.cli.parsers).
    from tether.cli.parsers import UsageParser
    from tether.cli.review import add_ls_parser, add_prune_parser, add_show_parser

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
    add_show_parser(sub)
    add_ls_parser(sub)
    add_prune_parser(sub)
    return parser


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name`` of ``parser``."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise LookupError(name)  # pragma: no cover - every subcommand is added above


def console_main() -> int:
    """The ``tether`` program: its deadline counts from when this process started.

    The kernel's start of the process (:mod:`tether.shared.process_start`),
    or at the latest the package's import (``tether._LOADED_AT``): the
    person or script asked when they started ``tether``, and the deadline
    must not grow by the time Python takes to start and load its parser.

    Invoked as ``timeout`` (a ``timeout`` symlink to ``tether`` early on
    ``PATH``), it is ``tether timeout``, so that scripts use it unchanged.
    """
    if os.path.basename(sys.argv[0]) == "timeout":
        # Installed as ``timeout`` (a symlink to tether): GNU timeout's drop-in.
        return timeout_program()
    quiet_interrupts()
    asked_at = process_started_at(tether._LOADED_AT)
    _fork_supervisors()
    status = main(asked_at=asked_at)
    if sys.argv[1:2] in (["run"], ["timeout"]):
        return _exit_at_once(status)
    return status


def timeout_program() -> int:
    """The ``timeout`` program: ``sys.argv[1:]`` are GNU ``timeout``'s arguments.

    What ``tether-timeout`` (the launcher) runs, as ``python -P -c``, and what
    ``tether`` runs when invoked as ``timeout``; its deadline counts from when
    this process started (the launcher's shell, which became this interpreter).
    """
    quiet_interrupts()
    asked_at = process_started_at(tether._LOADED_AT)
    _fork_supervisors()
    from tether.cli.timeout import main as timeout_main

    status = timeout_main(sys.argv[1:], asked_at=asked_at, program="timeout")
    return _exit_at_once(status)


def _exit_at_once(status: int) -> int:
    """End a run's caller without the interpreter's teardown, once its output is flushed.

    The run is over and recorded when its caller gets here; what is left is
    CPython finalizing every module, about 12 ms that a script running
    ``tether run`` in a loop waits for each time. Returns (for the ordinary
    exit, which then reports it as before) only if a flush fails.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # the ordinary exit says what went wrong
        return status
    os._exit(status)


def _fork_supervisors() -> None:
    """``tether run`` and ``tether timeout`` fork their supervisor: this program is tether's own.

    Single-threaded, so forking it is safe, and a forked supervisor needs no
    second interpreter. Only the program does this: :func:`main`, called from
    a Python program (a test, say), spawns its supervisors like the API.
    """
    from tether.caller.fork import fork_supervisors
    from tether.linux.descriptors import open_descriptors
    from tether.supervisor.detach import become

    # What this program inherited, read before it opens anything of its own:
    # the command gets it all, as from a shell or GNU timeout.
    inherited = tuple(open_descriptors())

    def become_handing_on(spec: RunSpec) -> NoReturn:
        become(spec, inherited)

    fork_supervisors(become_handing_on, hand_on=inherited)


def quiet_interrupts() -> None:
    """Let Ctrl-C end the program as it ends a C program, until a door installs its own.

    By SIGINT's default action: at once, quietly, with the status a shell
    expects, never a ``KeyboardInterrupt`` traceback from whatever was being
    imported. ``tether run`` and ``tether timeout`` install their handler (a
    cancel on the lifeline), and the seed door its own (a cancel in the loop),
    before they start anything; until then there is nothing to stop.
    """
    # Only Python's own handler is replaced: an ignored SIGINT (a background
    # job, ``trap '' INT``) stays ignored, for ``timeout`` to hand on as GNU does.
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def main(argv: list[str] | None = None, *, asked_at: float | None = None) -> int:
    """Run the ``tether`` command line ``argv`` (default: ``sys.argv``); return its status.

    A deadline counts from ``asked_at`` (monotonic seconds; default: now).
    """
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
        # The subcommand's own parser reads its options, so that a bad one is refused with
        # its usage (``usage: tether ls ...``), not the top-level one.
        parsed = _subparser(parser, args[0]).parse_args(args[1:], namespace=parsed)
    else:
        parsed = parser.parse_args(args)
    if parsed.command == "show":
        from tether.cli.review import show

        return show(parsed)
    if parsed.command == "ls":
        from tether.cli.review import ls

        return ls(parsed)
    if parsed.command == "prune":
        from tether.cli.review import prune

        return prune(parsed)
    say_help(_main_parser())
    return TETHER_FAILED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

"""The ``tether`` command: ``run`` for people, shell scripts and CI jobs; ``show`` and ``ls``
for the operators who review what happened afterwards.

``tether run`` is the *caller*: it holds the lifeline, so when it dies, however
it dies, the command is stopped. It should feel like ``timeout(1)``: the
command keeps the terminal's stdin, stdout and stderr; the exit status is the
command's own or one of the documented tether statuses; errors are one line a
person can act on, on stderr, with status 125.

Ctrl-C, SIGTERM and SIGHUP to ``tether run`` ask for a graceful cancel (the
command gets SIGTERM, then SIGKILL after the grace); a second Ctrl-C asks for
SIGKILL now. The command runs in a process group of its own, so the terminal's
Ctrl-C reaches it only through tether, and always the same way.

``tether show`` and ``tether ls`` only read files; their loading and
rendering live in :mod:`tether.review`, imported when one of them is asked
for, and their output goes to stdout, their complaints (a file skipped, a log
line cut short) to stderr, one line each.

This module imports only the standard library and tether's caller-side
modules, so ``tether run --help``, ``tether run -- true``, ``tether show`` and
``tether ls`` never load ``transitions`` or ``structlog``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

import tether
from tether._version import __version__
from tether.core.reasons import TETHER_FAILED, Reason
from tether.shared.paths import default_records_dir, new_record_path

if TYPE_CHECKING:
    from tether.core.spec import RunSpec

__all__ = ["default_records_dir", "main"]

_DEFAULT_GRACE: Final = "10s"
_USAGE_RUN: Final = "tether run [OPTIONS] -- CMD [ARG]..."


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 125, tether's own-failure status."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(TETHER_FAILED, f"{self.prog}: error: {message}\n")


def _fail(message: str) -> NoReturn:
    print(f"tether: {message}", file=sys.stderr, flush=True)
    raise SystemExit(TETHER_FAILED)


def _run_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tether run",
        usage=_USAGE_RUN,
        description="Run CMD so that it cannot outlive this tether run: it is stopped, with "
        "its whole process tree, when tether run dies (even by SIGKILL), when the deadline "
        "passes, or on Ctrl-C/SIGTERM. A private JSON record says what happened.",
        epilog="Durations: a number of seconds with an optional suffix s, m, h or d "
        "(30, 30s, 5m, 1.5h, 2d); 0 means none. Exit status: CMD's own (128+N if killed by "
        "signal N), 124 deadline passed, 125 tether failed, 126 CMD cannot be executed, "
        "127 CMD not found, 130 cancelled.",
    )
    parser.add_argument(
        "--deadline",
        default="0",
        metavar="DUR",
        help="stop CMD after this long, counted from now (default: 0, no deadline)",
    )
    parser.add_argument(
        "--grace",
        default=_DEFAULT_GRACE,
        metavar="DUR",
        help=f"time between SIGTERM and SIGKILL when stopping (default: {_DEFAULT_GRACE})",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--record",
        metavar="PATH",
        help="write the record here (default: a new file in $XDG_STATE_HOME/tether/runs/)",
    )
    where.add_argument("--no-record", action="store_true", help="write no record")
    parser.add_argument(
        "--name", metavar="LABEL", help="a label for the run, kept in the record (default: none)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print the record's path on stderr"
    )
    return parser


def _run_spec(argv: list[str], asked_at: float) -> tuple[RunSpec, bool]:
    """Read ``tether run``'s command line into a spec (and ``--verbose``), or refuse it."""
    from tether.core.spec import RunSpec

    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = _run_parser().parse_known_args(argv[:split])
    command = argv[split + 1 :]

    record: Path | None = None
    if not args.no_record:
        from tether.shared.record_file import RecordError, check_record_path

        record = Path(args.record) if args.record else new_record_path()
        try:
            check_record_path(record)
        except RecordError as error:
            _fail(str(error))

    def refuse(message: str) -> NoReturn:
        """Bad input: one line, status 125, and a ``launch_failed`` record where one can go."""
        if record is not None:
            from tether.caller.fallback import write_refusal_record

            write_refusal_record(
                record,
                asked_at=asked_at,
                label=args.name,
                deadline=_duration_or_none(args.deadline),
                grace=_duration_or_none(args.grace),
                message=message,
            )
        _fail(message)

    if split == len(argv):
        refuse(f"the command must follow -- (usage: {_USAGE_RUN})")
    if extra:
        refuse(f"unrecognized arguments before --: {' '.join(extra)}")
    if not command:
        refuse(f"no command after -- (usage: {_USAGE_RUN})")

    from tether.core.durations import DurationError, parse_duration

    try:
        deadline = parse_duration(args.deadline, flag="--deadline")
        grace = parse_duration(args.grace, flag="--grace")
    except DurationError as error:
        refuse(str(error))
    spec = RunSpec(
        argv=tuple(command),
        deadline_seconds=deadline,
        grace_seconds=grace,
        asked_at=asked_at,
        record_path=None if record is None else str(record.absolute()),
        label=args.name,
    )
    return spec, args.verbose


def _run(argv: list[str], asked_at: float) -> int:
    spec, verbose = _run_spec(argv, asked_at)
    from tether.caller.interrupts import LifelineRequests
    from tether.caller.start import LaunchError, start_supervisor

    requests = LifelineRequests(second_interrupt_kills=True)
    try:
        handle = start_supervisor(spec)
    except LaunchError as error:
        _fail(str(error))
    requests.attach(handle)
    finished = handle.wait_finished()
    if finished is None:
        from tether.caller.fallback import LOST_MESSAGE, after_supervisor_lost

        written = after_supervisor_lost(spec, handle.started)
        where = f" (record: {written})" if written is not None else ""
        _fail(f"{LOST_MESSAGE}{where}")
    message = finished.get("message")
    if isinstance(message, str) and message:
        print(f"tether: {message}", file=sys.stderr, flush=True)
    if verbose and spec.record_path:
        print(f"tether: record: {spec.record_path}", file=sys.stderr, flush=True)
    status = finished.get("exit_status")
    return status if isinstance(status, int) else TETHER_FAILED


def _add_show_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    show = sub.add_parser(
        "show",
        help="tell the story of one run (tether show --help)",
        description="Show one run for a person: the verdict (why it ended, exit status, how it "
        "was stopped, resources) and the timeline of its event log in seconds since the launch. "
        "Give the record (.json) or its event log (.events.jsonl); either finds the other.",
        epilog="Colour only on a terminal, and never when NO_COLOR is set. Exit status: 0 shown "
        "(even if the record or the log is missing, or the log's last line is cut short: the "
        "gaps are named on stderr), 125 nothing to show (not a tether record or event log, "
        "unreadable, missing).",
    )
    show.add_argument("path", metavar="RECORD_OR_LOG", help="a record or an event log")
    show.add_argument(
        "--json",
        action="store_true",
        help='print {"record": ..., "events": [...]} as one JSON document, for scripts',
    )
    show.add_argument(
        "-a", "--all", action="store_true", help="also show the core's steps that changed nothing"
    )


def _add_ls_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    ls = sub.add_parser(
        "ls",
        help="list the runs in a records directory (tether ls --help)",
        description="List the runs recorded in DIR, newest first: when each started (local "
        "time), its label, why it ended, its exit status, how long it took, whether SIGKILL was "
        "needed, and the record's file name (for tether show).",
        epilog="Files that are not tether records are skipped, each named on stderr. Exit "
        "status: 0 listed (even nothing), 125 bad option or DIR unreadable.",
    )
    ls.add_argument(
        "directory",
        nargs="?",
        metavar="DIR",
        help="where the records are (default: $XDG_STATE_HOME/tether/runs, where tether run "
        "writes them)",
    )
    ls.add_argument(
        "--reason",
        action="append",
        default=[],
        metavar="R",
        help="only runs that ended for this reason (repeat it, or R1,R2): "
        + ", ".join(reason.value for reason in Reason),
    )
    ls.add_argument(
        "--since",
        metavar="WHEN",
        help="only runs started within the last WHEN (30m, 12h, 7d) or since an ISO date/time "
        "(2024-05-01, 2024-05-01T12:00; local time unless it has an offset)",
    )
    ls.add_argument(
        "--label", metavar="PATTERN", help="only runs whose label matches (shell pattern: eval-*)"
    )
    ls.add_argument("--json", action="store_true", help="print a JSON array of the records")


def _duration_or_none(text: str) -> float | None:
    from tether.core.durations import DurationError, parse_duration

    try:
        return parse_duration(text, flag="")
    except DurationError:
        return None


def _main_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
    _add_show_parser(sub)
    _add_ls_parser(sub)
    return parser


def _print_out(text: str) -> int:
    """Write ``text`` to stdout; a reader that went away (``| head``) is not an error to report."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Keep the interpreter's own flush at exit from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    return 0


def _warn(message: str) -> None:
    print(f"tether: {message}", file=sys.stderr, flush=True)


def _show(args: argparse.Namespace) -> int:
    from tether.review import ReviewError, load_run, render_run, run_as_json, use_colour

    try:
        run = load_run(Path(args.path))
    except ReviewError as error:
        _fail(str(error))
    for message in ([run.record_note] if run.record_note else []) + run.warnings:
        _warn(message)
    if args.json:
        return _print_out(run_as_json(run))
    return _print_out(render_run(run, colour=use_colour(sys.stdout), all_steps=args.all))


def _ls(args: argparse.Namespace) -> int:
    from tether.review import (
        Filters,
        ReviewError,
        parse_reasons,
        parse_since,
        render_table,
        rows_as_json,
        scan,
        select,
        use_colour,
    )

    try:
        filters = Filters(
            reasons=parse_reasons(args.reason),
            since=None if args.since is None else parse_since(args.since),
            label=args.label,
        )
    except ReviewError as error:
        _fail(str(error))
    directory = Path(args.directory) if args.directory else default_records_dir()
    if not args.directory and not os.path.lexists(directory):
        _warn(f"no runs recorded yet ({directory} does not exist)")
        return _print_out("[]\n") if args.json else 0
    if os.path.lexists(directory) and not os.path.isdir(directory):
        _fail(f"{directory}: not a directory (tether show FILE shows one run)")
    try:
        listing = scan(directory)
    except ReviewError as error:
        _fail(str(error))
    for problem in listing.skipped:
        _warn(f"skipped {problem}")
    for log in listing.orphan_logs:
        _warn(f"{log}: an event log without its record (tether show it to see what happened)")
    rows = select(listing.records, filters)
    if args.json:
        return _print_out(rows_as_json(rows))
    if not rows:
        _warn(f"no runs {'match' if listing.records else 'are recorded'} in {directory}")
        return 0
    return _print_out(render_table(rows, directory=directory, colour=use_colour(sys.stdout)))


def console_main() -> int:
    """The ``tether`` program: its deadline counts from when this process started.

    As early as the package could read a clock (``tether._LOADED_AT``): the
    person or script asked when they started ``tether``, and the deadline
    must not grow by the time Python takes to load the command-line parser.
    """
    return main(asked_at=tether._LOADED_AT)


def main(argv: list[str] | None = None, *, asked_at: float | None = None) -> int:
    """Run the ``tether`` command line ``argv`` (default: ``sys.argv``); return its status.

    A deadline counts from ``asked_at`` (monotonic seconds; default: now).
    """
    if asked_at is None:
        asked_at = time.monotonic()
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        return _run(args[1:], asked_at)
    if args[:1] == ["timeout"]:
        from tether.cli.timeout import main as timeout_main

        return timeout_main(args[1:], asked_at=asked_at)
    parsed = _main_parser().parse_args(args)
    if parsed.command == "show":
        return _show(parsed)
    if parsed.command == "ls":
        return _ls(parsed)
    _main_parser().print_help(sys.stderr)
    return TETHER_FAILED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

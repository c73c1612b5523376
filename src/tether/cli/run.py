"""``tether run``: run one command bound to this process, for people, shell scripts and CI jobs.

``tether run`` is the *caller*: it holds the lifeline, so when it dies, however
it dies, the command is stopped. It should feel like ``timeout(1)``: the
command keeps the terminal's stdin, stdout and stderr; the exit status is the
command's own or one of the documented tether statuses; errors are one line a
person can act on, on stderr, with status 125.

Ctrl-C, SIGTERM and SIGHUP to ``tether run`` ask for a graceful cancel (the
command gets SIGTERM, then SIGKILL after the grace); a second Ctrl-C asks for
SIGKILL now. The command runs in a process group of its own, so the terminal's
Ctrl-C reaches it only through tether, and always the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

from tether.cli.messages import UsageParser, fail
from tether.core.reasons import TETHER_FAILED
from tether.shared.paths import new_record_path

if TYPE_CHECKING:
    from tether.core.spec import RunSpec

__all__ = ["run"]

_DEFAULT_GRACE: Final = "10s"
_USAGE_RUN: Final = "tether run [OPTIONS] -- CMD [ARG]..."


def _run_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
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
            fail(str(error))

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
        fail(message)

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


def _duration_or_none(text: str) -> float | None:
    from tether.core.durations import DurationError, parse_duration

    try:
        return parse_duration(text, flag="")
    except DurationError:
        return None


def run(argv: list[str], asked_at: float) -> int:
    spec, verbose = _run_spec(argv, asked_at)
    from tether.caller.interrupts import LifelineRequests
    from tether.caller.start import LaunchError, start_supervisor

    requests = LifelineRequests(second_interrupt_kills=True)
    try:
        handle = start_supervisor(spec)
    except LaunchError as error:
        fail(str(error))
    requests.attach(handle)
    finished = handle.wait_finished()
    if finished is None:
        from tether.caller.fallback import LOST_MESSAGE, after_supervisor_lost

        written = after_supervisor_lost(spec, handle.started)
        where = f" (record: {written})" if written is not None else ""
        fail(f"{LOST_MESSAGE}{where}")
    message = finished.get("message")
    if isinstance(message, str) and message:
        print(f"tether: {message}", file=sys.stderr, flush=True)
    if verbose and spec.record_path:
        print(f"tether: record: {spec.record_path}", file=sys.stderr, flush=True)
    status = finished.get("exit_status")
    return status if isinstance(status, int) else TETHER_FAILED

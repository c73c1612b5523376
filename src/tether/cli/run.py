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
from typing import Final, NoReturn

from tether.cli.messages import UsageParser, fail, warn
from tether.core.durations import format_duration
from tether.core.reasons import Reason
from tether.core.spec import DEFAULT_GRACE_SECONDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.core.spec import RunSpec

__all__ = ["run"]

_USAGE_RUN: Final = "tether run [OPTIONS] -- CMD [ARG]..."
_FLAGS: Final = {
    "deadline": "--deadline",
    "grace": "--grace",
    "label": "--label",
    "memory_max": "--memory-max",
    "memory_swap_max": "--memory-swap-max",
    "cpu_max": "--cpus",
    "pids_max": "--pids-max",
}


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
        metavar="DUR",
        help="stop CMD after this long, counted from now (default: 0, no deadline)",
    )
    parser.add_argument(
        "--grace",
        metavar="DUR",
        help="time between SIGTERM and SIGKILL when stopping "
        f"(default: {format_duration(DEFAULT_GRACE_SECONDS)})",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--record",
        metavar="PATH",
        help="write the record here (default: a new file in $XDG_STATE_HOME/tether/runs/)",
    )
    where.add_argument("--no-record", action="store_true", help="write no record")
    parser.add_argument(
        "--record-argv",
        action="store_true",
        help="keep the whole command line in the record, redacted (default: only its name "
        "and working directory)",
    )
    parser.add_argument(
        "--label",
        "--name",
        dest="label",
        metavar="LABEL",
        help="a label for the run, kept in the record, shown by tether ls and found by tether "
        "show (default: none; --name is the same option under its older name)",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="at the end, say on stderr what ended the run, what tether did, and where the "
        "record is",
    )
    limits = parser.add_argument_group(
        "limits the kernel enforces on the whole tree (need a cgroup v2; refused without one)"
    )
    limits.add_argument("--memory-max", metavar="SIZE", help="memory, e.g. 512M or 8G")
    limits.add_argument("--memory-swap-max", metavar="SIZE", help="swap, e.g. 0 for none")
    limits.add_argument("--cpus", metavar="N", help="CPU time, in CPUs, e.g. 1.5")
    limits.add_argument("--pids-max", metavar="N", help="processes and threads, e.g. 512")
    return parser


def _usage(message: str) -> NoReturn:
    fail(f"{message} (usage: {_USAGE_RUN})")


def _request(argv: list[str], asked_at: float) -> tuple[RunSpec, bool]:
    """Read ``tether run``'s command line into a request (and ``--verbose``), or refuse it.

    A refusal is one line and status 125, and leaves nothing behind: no
    command, no record.
    """
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = _run_parser().parse_known_args(argv[:split])
    if split == len(argv):
        _usage("the command must follow --")
    if extra:
        fail(f"unrecognized arguments before --: {' '.join(extra)}")

    from tether.caller.request import RequestError, build_request
    from tether.shared.record_file import RecordError

    try:
        spec = build_request(
            argv[split + 1 :],
            asked_at=asked_at,
            deadline=args.deadline,
            grace=DEFAULT_GRACE_SECONDS if args.grace is None else args.grace,
            record=False if args.no_record else args.record,
            label=args.label,
            record_argv=args.record_argv,
            flags=_FLAGS,
            limits={
                "memory_max": args.memory_max,
                "memory_swap_max": args.memory_swap_max,
                "cpu_max": args.cpus,
                "pids_max": args.pids_max,
            },
        )
    except RequestError as error:
        if error.option == "argv":
            _usage("no command after --")
        fail(str(error))
    except RecordError as error:
        fail(str(error))
    return spec, args.verbose


def run(argv: list[str], asked_at: float) -> int:
    """``tether run ARGS``; return the exit status (the deadline counts from ``asked_at``)."""
    spec, verbose = _request(argv, asked_at)
    from tether.caller.interrupts import start_interruptible
    from tether.caller.start import LaunchError

    try:
        spawn = start_interruptible(spec, second_interrupt_kills=True)
    except LaunchError as error:
        fail(str(error))
    finished = spawn.status.wait_finished()
    spawn.lifeline.release()
    if finished.message:
        lost = finished.reason == Reason.SUPERVISOR_LOST
        where = f" (record: {finished.record})" if lost and finished.record else ""
        warn(f"{finished.message}{where}")
    if verbose:
        from tether.caller.verdict import verdict_line

        warn(
            verdict_line(
                reason=finished.reason,
                exit_status=finished.exit_status,
                returncode=finished.returncode,
                deadline_seconds=spec.deadline_seconds,
                escalated_to_sigkill=finished.escalated_to_sigkill,
                processes_stopped=finished.processes_stopped,
                outside_group=finished.outside_group,
                shutdown_seconds=finished.shutdown_seconds,
                record=finished.record,
                no_record_reason=spec.no_record_reason,
                message=finished.message,
            )
        )
    return finished.exit_status

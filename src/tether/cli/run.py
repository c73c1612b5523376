"""``tether run``: run one command bound to this process, for people, shell scripts and CI jobs.

It is the *caller*: when it dies, however it dies, the command is stopped (docs/cli.md).
"""

from __future__ import annotations

import os

from tether.cli.messages import fail, usage_error, warn
from tether.cli.run_options import PROGRAM, RunOptions, read_options, split_command_line
from tether.core.limits import LIMITS
from tether.core.reasons import Reason
from tether.core.spec import DEFAULT_GRACE_SECONDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping
    from typing import Final, NoReturn

    from tether.core.spec import RunSpec
    from tether.linux.run_cgroups import OwnLeaf

_USAGE_RUN: Final = "tether run [OPTIONS] [--] CMD [ARG]..."
_FLAGS: Final = {
    "deadline": "--deadline",
    "grace": "--grace",
    "idle": "--idle",
    "label": "--label",
    **{limit.name: limit.flag for limit in LIMITS},
}


def _run_parser() -> argparse.ArgumentParser:
    """The parser that documents ``tether run`` (``--help``, the man page, the completions);
    :mod:`tether.cli.run_options` reads a command line, and hands it only what it cannot."""
    from tether.cli.parsers import GnuStyleParser, add_options
    from tether.core.durations import format_duration

    parser = GnuStyleParser(
        prog=PROGRAM,
        allow_abbrev=False,
        usage=_USAGE_RUN,
        description="Run CMD so that it cannot outlive this tether run: it is stopped, with "
        "its whole process tree, when tether run dies (even by SIGKILL), when the deadline "
        "passes, or on Ctrl-C/SIGTERM. A private JSON record says what happened.",
        epilog="Options end at the first word that is not one (or at --), as with timeout, "
        "env and nice: tether run --deadline 5m make test. "
        "Durations: a number of seconds with an optional suffix s, m, h or d "
        "(30, 30s, 5m, 1.5h, 2d); 0 means none. Exit status: CMD's own (128+N if killed by "
        "signal N), 124 deadline passed or idle too long, 125 tether failed, 126 CMD cannot "
        "be executed, 127 CMD not found, 130 cancelled.",
    )
    add_options(
        parser,
        (("--deadline",), "DUR", "stop CMD after this long, counted from now (default: 0, no "
         "deadline)"),
        (("--grace",), "DUR", "time between SIGTERM and SIGKILL when stopping "
         f"(default: {format_duration(DEFAULT_GRACE_SECONDS)})"),
        (("--idle",), "DUR", "stop CMD, as at the deadline, once it has written no output and "
         "its whole tree has used no CPU time for this long (reason idle_exceeded, status 124; "
         "checked at most once a second; default: 0, no idle bound)"),
    )  # fmt: skip
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--record",
        metavar="PATH",
        help="write the record here (default: a new file in $XDG_STATE_HOME/tether/runs/)",
    )
    where.add_argument("--no-record", action="store_true", help="write no record")
    add_options(
        parser,
        (("--record-argv",), None, "keep the whole command line in the record, redacted "
         "(default: only its name and working directory)"),
        (("--label", "--name"), "LABEL", "a label for the run, kept in the record, shown by "
         "tether ls and found by tether show (default: none; --name is the same option under "
         "its older name)", {"dest": "label"}),
        (("-v", "--verbose"), None, "at the end, say on stderr what ended the run, what tether "
         "did, and where the record is"),
    )  # fmt: skip
    limits = parser.add_argument_group(
        "limits the kernel enforces on the whole tree (through cgroups v2 or, as root, v1; refused "
        "where nothing can enforce them)"
    )
    for limit in LIMITS:
        limits.add_argument(limit.flag, dest=limit.name, metavar=limit.metavar, help=limit.help)
    return parser


def _usage(message: str) -> NoReturn:
    usage_error(PROGRAM, message)


def _request(argv: list[str], asked_at: float) -> tuple[RunSpec, bool]:
    """The command line as a request (and ``--verbose``), or a refusal (125) leaving nothing."""
    options, command = split_command_line(argv)
    args = read_options(options)
    if args is None:
        args = _run_parser().parse_args(options, namespace=RunOptions())
    if not command:
        _usage("no command to run")

    from tether.caller.request import LimitsUnavailable, RequestError, build_request
    from tether.caller.terminal import terminal_group
    from tether.shared.record_file import RecordError

    try:
        spec = build_request(
            command,
            asked_at=asked_at,
            deadline=args.deadline,
            grace=DEFAULT_GRACE_SECONDS if args.grace is None else args.grace,
            idle=args.idle,
            record=False if args.no_record else args.record,
            label=args.label,
            record_argv=args.record_argv,
            flags=_FLAGS,
            join_group=terminal_group(),
            limits=args.limits(),
            own_caller=True,
        )
    except RequestError as error:
        # Where the record goes, or a machine that cannot enforce limits: not how the
        # line was typed, so no pointer to the help.
        if error.option == "record" or isinstance(error, LimitsUnavailable):
            fail(str(error))
        _usage(str(error))
    except RecordError as error:
        fail(str(error))
    return spec, args.verbose


def run(argv: list[str], asked_at: float) -> int:
    """``tether run ARGS``; return the exit status (the deadline counts from ``asked_at``)."""
    spec, verbose = _request(argv, asked_at)
    leaf = _own_leaf(spec.limits)
    try:
        return _run(spec, verbose=verbose)
    finally:
        if leaf is not None:
            leaf.leave()


def _own_leaf(limits: Mapping[str, int | float] | None) -> OwnLeaf | None:
    """Where this caller alone holds its cgroup and no manager can help (a container whose
    entry point is ``tether run``): move into a leaf of it, for the run's cgroup to go beside."""
    if not limits:
        return None
    from tether.core.limits import limit_controllers
    from tether.linux.cgroup import CgroupUnavailable
    from tether.linux.run_cgroups import OwnLeaf, plan_backends

    controllers = limit_controllers(limits)
    try:
        backends, _ = plan_backends(controllers, check=False, mover=os.getpid())
        return None if "cgroup2-own-leaf" not in backends.values() else OwnLeaf.enter(controllers)
    except CgroupUnavailable as why:
        fail(f"cannot enforce the limits here: {why}")


def _run(spec: RunSpec, *, verbose: bool) -> int:
    from tether.caller.interrupts import start_interruptible
    from tether.caller.launch_errors import LaunchError

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
        from tether.caller.verdict import oom_of, verdict_line

        usage = finished.tree_usage
        warn(
            verdict_line(
                finished,
                deadline_seconds=spec.deadline_seconds,
                record=finished.record,
                no_record_reason=spec.no_record_reason,
                oom=oom_of(None if usage is None else usage.get("oom_kills"), spec.limits),
            )
        )
    return finished.exit_status

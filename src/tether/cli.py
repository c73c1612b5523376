"""``tether run``: the command line, for people, shell scripts and CI jobs.

``tether run`` is the *caller*: it holds the lifeline, so when it dies, however
it dies, the command is stopped. It should feel like ``timeout(1)``: the
command keeps the terminal's stdin, stdout and stderr; the exit status is the
command's own or one of the documented tether statuses; errors are one line a
person can act on, on stderr, with status 125.

Ctrl-C, SIGTERM and SIGHUP to ``tether run`` ask for a graceful cancel (the
command gets SIGTERM, then SIGKILL after the grace); a second Ctrl-C asks for
SIGKILL now. The command runs in a process group of its own, so the terminal's
Ctrl-C reaches it only through tether, and always the same way.

This module imports only the standard library and tether's caller-side
modules, so ``tether run --help`` and ``tether run -- true`` never load
``transitions`` or ``structlog``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Final, NoReturn

from tether._version import __version__
from tether.outcome import TETHER_FAILED

__all__ = ["default_records_dir", "main"]

_DEFAULT_GRACE: Final = "10s"
_USAGE_RUN: Final = "tether run [OPTIONS] -- CMD [ARG]..."


def default_records_dir() -> Path:
    """Where ``tether run`` keeps its records: ``$XDG_STATE_HOME/tether/runs``."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "tether" / "runs"


def _new_record_name() -> str:
    """A name that sorts by time and cannot collide: UTC timestamp, then random hex."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"{stamp}-{os.urandom(4).hex()}.json"


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


class _Requests:
    """Turns signals to ``tether run`` into requests on the lifeline."""

    def __init__(self) -> None:
        self.handle: object = None
        self.pending: list[bytes] = []
        self.interrupts = 0
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        from tether.protocol import CANCEL, KILL_NOW

        if number == signal.SIGINT:
            self.interrupts += 1
        self._send(KILL_NOW if self.interrupts >= 2 else CANCEL)

    def _send(self, byte: bytes) -> None:
        from tether.launcher import SupervisorHandle

        if isinstance(self.handle, SupervisorHandle):
            self.handle.request(byte)
        else:
            self.pending.append(byte)

    def attach(self, handle: object) -> None:
        """Start sending to ``handle``, including what arrived during the launch."""
        from tether.launcher import SupervisorHandle

        assert isinstance(handle, SupervisorHandle)
        self.handle = handle
        for byte in self.pending:
            handle.request(byte)
        self.pending.clear()


def _run(argv: list[str]) -> int:
    asked_at = time.monotonic()
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = _run_parser().parse_known_args(argv[:split])
    command = argv[split + 1 :]
    if split == len(argv):
        _fail(f"the command must follow -- (usage: {_USAGE_RUN})")
    if extra:
        _fail(f"unrecognized arguments before --: {' '.join(extra)}")
    if not command:
        _fail(f"no command after -- (usage: {_USAGE_RUN})")

    from tether.durations import DurationError, parse_duration

    try:
        deadline = parse_duration(args.deadline, flag="--deadline")
        grace = parse_duration(args.grace, flag="--grace")
    except DurationError as error:
        _fail(str(error))

    record: Path | None = None
    if not args.no_record:
        from tether.record import RecordError, check_record_path

        record = Path(args.record) if args.record else default_records_dir() / _new_record_name()
        try:
            check_record_path(record)
        except RecordError as error:
            _fail(str(error))

    from tether.launcher import LaunchError, start_supervisor
    from tether.spec import RunSpec

    spec = RunSpec(
        argv=tuple(command),
        deadline_seconds=deadline,
        grace_seconds=grace,
        asked_at=asked_at,
        record_path=None if record is None else str(record.absolute()),
        label=args.name,
    )
    requests = _Requests()
    try:
        handle = start_supervisor(spec)
    except LaunchError as error:
        _fail(str(error))
    requests.attach(handle)
    finished = handle.wait_finished()
    if finished is None:
        from tether.fallback import LOST_MESSAGE, write_supervisor_lost_record

        written = write_supervisor_lost_record(
            spec, supervisor_pid=handle.supervisor_pid, pid=handle.pid, pgid=handle.pgid
        )
        where = f" (record: {written})" if written is not None else ""
        _fail(f"{LOST_MESSAGE}{where}")
    message = finished.get("message")
    if isinstance(message, str) and message:
        print(f"tether: {message}", file=sys.stderr, flush=True)
    if args.verbose and spec.record_path:
        print(f"tether: record: {spec.record_path}", file=sys.stderr, flush=True)
    status = finished.get("exit_status")
    return status if isinstance(status, int) else TETHER_FAILED


def _main_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tether",
        description="Run one command so that it cannot outlive the process that asked for it.",
    )
    parser.add_argument("--version", action="version", version=f"tether {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("run", help="run a command bound to this process (tether run --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``tether`` command; return its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["run"]:
        return _run(args[1:])
    _main_parser().parse_args(args)
    _main_parser().print_help(sys.stderr)
    return TETHER_FAILED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

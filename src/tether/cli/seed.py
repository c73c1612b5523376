"""The seed door: ``python -m tether.supervisor --parent-fd N ... -- CMD [ARG]...``.

Workers in any language that make their own pipe start the supervisor this
way, exactly as they started the seed supervisor tether grew from: same flags,
same reasons, same exit statuses (124 deadline, 125 tether's own failure, 130
cancelled or caller lost, the command's own status when it completed, 126 and
127 when it could not be executed or found). The worker keeps the write end of
a pipe and passes the read end as ``--parent-fd``; its end of file means the
worker is gone, and ``c``/``k`` bytes ask for a cancel or an immediate kill.

Unlike ``tether run``, this door runs the supervisor in the foreground, with
no double fork, because its caller wants to wait for it and to signal it
(SIGTERM, SIGINT and SIGHUP mean cancel). The command gets ``/dev/null`` as
stdin, as under the seed, and shares the supervisor's stdout and stderr.

Where the seed guessed, this door refuses, before any command is started: a
missing ``--``, a duration that is negative, NaN or not a number, a
``--parent-fd`` that is not an open pipe opened for reading, a record path
that cannot be written. Each gets one line on stderr and status 125, and,
unless the record path itself was the problem, a ``launch_failed`` record
there: the worker looks for its record and finds out why nothing ran. A
duration of ``0`` means no deadline, as everywhere in tether.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from tether.core.reasons import TETHER_FAILED
from tether.linux import UnsupportedPlatform, require_linux

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

__all__ = ["main"]

_PROG = "python -m tether.supervisor"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(TETHER_FAILED, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=_PROG,
        description="Supervise one command in the foreground, bound to a pipe its caller holds.",
        epilog="The command follows --. Exit status: the command's own, or 124 (deadline), "
        "125 (tether failed), 126/127 (cannot execute / not found), 130 (cancelled, caller lost).",
    )
    parser.add_argument("--variant", required=True, help="the run's label, kept in the record")
    parser.add_argument(
        "--parent-fd", required=True, type=int, help="read end of a pipe the caller holds open"
    )
    parser.add_argument("--record", required=True, help="where to write the JSON record")
    parser.add_argument(
        "--deadline-seconds", required=True, help="stop the command after this long (0: never)"
    )
    parser.add_argument("--grace-seconds", required=True, help="time between SIGTERM and SIGKILL")
    return parser


def _fail(message: str) -> NoReturn:
    print(f"{_PROG}: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(TETHER_FAILED)


def _seconds(value: str, flag: str) -> float:
    """``value`` as seconds, or :class:`~tether.core.durations.DurationError` naming ``flag``."""
    from tether.core.durations import parse_duration

    return parse_duration(value, flag=flag)


def _parent_fd_problem(fd: int) -> str | None:
    """Why ``fd`` cannot be the lifeline's read end, or ``None`` if it can."""
    try:
        mode = os.fstat(fd).st_mode
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return f"--parent-fd {fd}: not an open file descriptor"
    if not stat.S_ISFIFO(mode):
        return f"--parent-fd {fd}: not a pipe"
    if flags & os.O_ACCMODE != os.O_RDONLY:
        return f"--parent-fd {fd}: not the read end of a pipe"
    return None


def _refuse(message: str, parsed: argparse.Namespace, record: str, asked_at: float) -> NoReturn:
    """Bad input: a ``launch_failed`` record at ``record`` (the worker looks there), then fail."""
    from tether.caller.fallback import write_refusal_record
    from tether.core.durations import DurationError

    def readable(value: str, flag: str) -> float | None:
        try:
            return _seconds(value, flag)
        except DurationError:
            return None

    write_refusal_record(
        Path(record),
        asked_at=asked_at,
        label=parsed.variant,
        deadline=readable(parsed.deadline_seconds, "--deadline-seconds"),
        grace=readable(parsed.grace_seconds, "--grace-seconds"),
        message=message,
        supervisor_pid=os.getpid(),
    )
    _fail(message)


def main(argv: list[str] | None = None, *, asked_at: float | None = None) -> int:
    """Supervise one command in the foreground; return the status to exit with.

    The deadline counts from ``asked_at`` (monotonic seconds; default: now).
    Run as a program, that is when the process started, as early as the
    package could read a clock (``tether._LOADED_AT``).
    """
    if asked_at is None:
        asked_at = time.monotonic()
    try:
        require_linux()
    except UnsupportedPlatform as error:
        _fail(str(error))
    args = list(sys.argv[1:] if argv is None else argv)
    split = args.index("--") if "--" in args else len(args)
    options, command = args[:split], args[split + 1 :]
    parsed, extra = _parser().parse_known_args(options)

    from tether.core.durations import DurationError
    from tether.shared.record_file import RecordError, check_record_path

    record = os.path.abspath(parsed.record)
    try:
        check_record_path(Path(record))
    except RecordError as error:
        _fail(str(error))
    if split == len(args):
        _refuse("the command to supervise must follow --", parsed, record, asked_at)
    if extra:
        _refuse(f"unrecognized arguments before --: {' '.join(extra)}", parsed, record, asked_at)
    if not command:
        _refuse("no command after --", parsed, record, asked_at)
    try:
        deadline = _seconds(parsed.deadline_seconds, "--deadline-seconds")
        grace = _seconds(parsed.grace_seconds, "--grace-seconds")
    except DurationError as error:
        _refuse(str(error), parsed, record, asked_at)
    problem = _parent_fd_problem(parsed.parent_fd)
    if problem is not None:
        _refuse(problem, parsed, record, asked_at)

    from tether.shared.protocol import StatusWriter
    from tether.supervisor.launch import launch

    status = StatusWriter(None)
    launched = launch(
        command,
        cwd=None,
        env=None,
        umask=None,
        stdin=subprocess.DEVNULL,
        stdout=None,
        stderr=None,
        status=status,
    )

    from tether.core.spec import RunSpec
    from tether.supervisor.loop import supervise

    spec = RunSpec(
        argv=tuple(command),
        deadline_seconds=deadline,
        grace_seconds=grace,
        asked_at=asked_at,
        record_path=record,
        label=parsed.variant,
    )
    return supervise(spec, launched, lifeline=parsed.parent_fd, status=status)

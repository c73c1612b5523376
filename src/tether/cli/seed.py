"""The seed door: ``python -m tether.supervisor --parent-fd N ... -- CMD [ARG]...``, the seed
supervisor's interface run in the foreground (docs/seed-door.md).
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import time

from tether.cli.messages import fail, warn
from tether.cli.seed_options import PROG, UsageError, read_options
from tether.linux import UnsupportedPlatform, require_linux

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    from tether.core.spec import RunSpec
    from tether.shared.protocol import StatusWriter
    from tether.supervisor.launch import LaunchAttempt

_FLAGS = {"deadline": "--deadline-seconds", "grace": "--grace-seconds", "label": "--variant"}


def _fail(message: str) -> NoReturn:
    fail(f"error: {message}", program=PROG)


def _parent_fd_problem(fd: int) -> str | None:
    """Why ``fd`` cannot be the lifeline's read end, or ``None`` if it can."""
    try:
        mode = os.fstat(fd).st_mode
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except (OSError, OverflowError):
        return f"--parent-fd {fd}: not an open file descriptor"
    if not stat.S_ISFIFO(mode):
        return f"--parent-fd {fd}: not a pipe"
    if flags & os.O_ACCMODE != os.O_RDONLY:
        return f"--parent-fd {fd}: not the read end of a pipe"
    return None


def _close_own_write_ends(lifeline: int) -> list[int]:
    """Close and return each write end of the lifeline's pipe held here (docs/seed-door.md)."""
    pipe = os.fstat(lifeline)
    closed: list[int] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd == lifeline:
            continue
        try:
            other = os.fstat(fd)
            writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
        except OSError:
            continue  # the listing's own descriptor, gone by now
        if writable and (other.st_dev, other.st_ino) == (pipe.st_dev, pipe.st_ino):
            os.close(fd)
            closed.append(fd)
    return closed


def main(argv: list[str] | None = None, *, asked_at: float | None = None) -> int:
    """Supervise one command in the foreground; the deadline counts from ``asked_at``."""
    if asked_at is None:
        asked_at = time.monotonic()
    try:
        require_linux()
    except UnsupportedPlatform as error:
        _fail(str(error))
    args = list(sys.argv[1:] if argv is None else argv)
    split = args.index("--") if "--" in args else len(args)
    options, command = args[:split], args[split + 1 :]
    try:
        parsed, extra = read_options(options)
    except UsageError as error:
        _fail(error.message)
    if split == len(args):
        _fail("the command to supervise must follow --")
    if extra:
        _fail(f"unrecognized arguments before --: {' '.join(extra)}")
    problem = _parent_fd_problem(parsed.parent_fd)
    if problem is not None:
        _fail(problem)

    from tether.caller.request import RequestError, build_request
    from tether.shared.record_file import RecordError, hold_record_directory

    try:
        spec = build_request(
            command,
            asked_at=asked_at,
            deadline=parsed.deadline_seconds,
            grace=parsed.grace_seconds,
            record=parsed.record,
            label=parsed.variant,
            flags=_FLAGS,
            ignored_signals=(),  # the seed door launches its command itself, without them
        )
        if spec.record_path is not None:
            held = hold_record_directory(spec.record_path)
            spec = spec.replace(fds={**spec.fds, "record_dir": held}, cwd=_working_directory())
    except RequestError as error:
        _fail("no command after --" if error.option == "argv" else str(error))
    except RecordError as error:
        _fail(str(error))
    _close_own_write_ends(parsed.parent_fd)

    status, attempt = _launch(command, spec, parsed.parent_fd)
    # For a failure to load the loop, after the launch (the sentry is watching).
    from tether.supervisor import last_resort

    try:
        from tether.shared.lifeline import ALL, BASIC
        from tether.supervisor.detach import loaded
        from tether.supervisor.loop import supervise

        loaded()
        vocabulary = ALL if parsed.all_lifeline_requests else BASIC
        return supervise(
            spec, attempt, lifeline=parsed.parent_fd, status=status, vocabulary=vocabulary
        )
    except BaseException as error:
        return last_resort.abandon(attempt, error, status=status, say=warn)


def _launch(command: list[str], spec: RunSpec, lifeline: int) -> tuple[StatusWriter, LaunchAttempt]:
    """Start ``command`` with this process's directory, environment and stdout/stderr, stdin
    ``/dev/null``, as under the seed; no status channel (the exit status says it)."""
    from tether.shared.protocol import StatusWriter
    from tether.supervisor.launch import LaunchPlan, launch

    status = StatusWriter(None)
    try:
        nothing = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        _fail(f"cannot open {os.devnull}: {error.strerror}")
    plan = LaunchPlan(
        argv=tuple(command),
        stdin=nothing,
        close_after_launch=(nothing,),
        lifeline=lifeline,
        deadline_at=spec.deadline_at,
        stop_signal=spec.stop_signal,
    )
    return status, launch(plan, status)


def _working_directory() -> str | None:
    """This process's directory, for the record; ``None`` if gone."""
    try:
        return os.getcwd()
    except OSError:
        return None

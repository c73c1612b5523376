"""The run's descriptors, opened on the caller's side before its supervisor starts.

A detached supervisor cannot open anything as the caller, so the caller hands it, by role
(``spec.fds``): the command's stdio, the working directory (``O_PATH``), the record's
directory (held) and the run's channels, each above the standard streams. :func:`open_run`
is all or nothing (:class:`~tether.caller.launch_errors.LaunchError`, nothing left open);
:func:`completed` writes the spec the supervisor gets. Why: ``docs/architecture.md``.
"""

from __future__ import annotations

import errno
import os

from tether.caller.launch_errors import LaunchError, cannot_start
from tether.caller.lifeline import close_all, run_channels
from tether.core.reasons import TETHER_FAILED
from tether.linux import UnsupportedPlatform, require_linux
from tether.linux.descriptors import above_stdio
from tether.shared.record_file import RecordError, hold_record_directory

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

    from tether.core.spec import RunSpec

    Stream = int | IO[bytes] | IO[str] | None

__all__ = ["caller_umask", "completed", "open_run"]


def caller_umask() -> int | None:
    """The calling process's umask, read without changing it (``umask()`` would race threads)."""
    from tether.caller.request import umask_in
    from tether.linux.proctree import read_file

    try:
        return umask_in(read_file("/proc/self/status"))
    except OSError:
        return None


def _command_stream(stream: Stream, default: int) -> int:
    """A copy of the stream the command gets; ``/dev/null`` for one of the caller's own it has
    closed (a detached supervisor cannot hand on a closed one); an explicit one must be open."""
    if stream is not None:
        fd = stream if isinstance(stream, int) else stream.fileno()
        return above_stdio(os.dup(fd))
    try:
        return above_stdio(os.dup(default))
    except OSError as error:
        if error.errno != errno.EBADF:
            raise
    return above_stdio(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))


def _working_directory() -> int:
    """The caller's working directory, held open (``O_PATH``) in case it is renamed."""
    return above_stdio(os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))


def open_run(
    spec: RunSpec, stdin: Stream, stdout: Stream, stderr: Stream, *, spec_pipe: bool
) -> tuple[str | None, int | None, list[int]]:
    """Open what a run's supervisor will hold, or raise :class:`LaunchError` leaving none.

    Returns the absolute working directory (``None``: held), the record directory's descriptor,
    and every descriptor: stdio, cwd, record dir, lifeline, status (and the spec pipe's)."""
    try:
        require_linux()
    except UnsupportedPlatform as error:
        raise LaunchError(str(error), exit_status=TETHER_FAILED) from None
    opened: list[int] = []
    try:
        cwd = _absolute(spec.cwd)
        # The command's stdio first: with a standard stream closed, a new pipe
        # would take its number, and be taken for it.
        for stream, default in ((stdin, 0), (stdout, 1), (stderr, 2)):
            opened.append(_command_stream(stream, default))
        if spec.cwd is None:
            opened.append(_working_directory())
        record_dir = _record_directory(spec)
        if record_dir is not None:
            opened.append(record_dir)
        opened += run_channels(spec_pipe=spec_pipe)
    except RecordError as error:
        close_all(opened)
        raise LaunchError(str(error), errno=error.errno, exit_status=TETHER_FAILED) from None
    except OSError as error:
        close_all(opened)
        raise cannot_start(error) from None
    return cwd, record_dir, opened


def completed(
    spec: RunSpec,
    cwd: str | None,
    *,
    ours: list[int],
    record_dir: int | None,
    lifeline_r: int,
    status_w: int,
) -> tuple[RunSpec, tuple[int, ...]]:
    """The spec as the supervisor gets it (descriptors by role), and the descriptors it gets."""
    roles = {"stdin": ours[0], "stdout": ours[1], "stderr": ours[2]}
    if spec.cwd is None:
        roles["cwd"] = ours[3]
    if record_dir is not None:
        roles["record_dir"] = record_dir
    complete = spec.replace(
        cwd=cwd,
        umask=caller_umask() if spec.umask is None else spec.umask,
        fds={**roles, "lifeline": lifeline_r, "status": status_w},
    )
    return complete, (*roles.values(), lifeline_r, status_w)


def _record_directory(spec: RunSpec) -> int | None:
    """The record's directory, checked and held by both sides for the run (nothing done to
    the path redirects the record); ``None`` without one."""
    if spec.record_path is None:
        return None
    return above_stdio(hold_record_directory(spec.record_path))


def _absolute(cwd: str | None) -> str | None:
    """The command's working directory as an absolute path; ``None`` for the caller's own if it
    was removed (the command starts there through its descriptor)."""
    if cwd is not None:
        return os.path.abspath(cwd)
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None

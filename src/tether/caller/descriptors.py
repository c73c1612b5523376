"""The run's descriptors, opened on the caller's side before its supervisor starts.

A supervisor is detached: it cannot open anything *as the caller*, with the
caller's working directory, standard streams or view of the record's
directory. So the caller opens what the run needs and hands it over as
descriptors, by role (``spec.fds``): the command's stdin, stdout and stderr
(copies; ``/dev/null`` for a stream the caller has closed), the working
directory (``O_PATH``, for a directory that may since have been removed or
renamed), the record's directory (held, so nothing done to its path during
the run redirects the record), and the run's channels
(:func:`tether.caller.lifeline.run_channels`). Each lands above the standard
streams' numbers, which are the supervisor's own ``/dev/null``.

Opening is all or nothing: :func:`open_run` either returns every descriptor
or raises :class:`~tether.caller.launch_errors.LaunchError` and leaves none
open. :func:`completed` then writes the spec as the supervisor gets it, with
the descriptors by role and the caller's umask.

On the path to ``tether run``'s launch: the standard library only, and no
``typing`` at run time.
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
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return None


def _command_stream(stream: Stream, default: int) -> int:
    """A copy of the stream the command gets; ``/dev/null`` for one the caller has closed.

    ``timeout(1)`` hands a closed stream on closed; a detached supervisor
    cannot, because its own 0, 1 and 2 are ``/dev/null``. ``/dev/null`` is
    the nearest: reads see end of file, writes vanish. Only the caller's own
    streams (``None``) get this: a descriptor the API was given explicitly
    must be open, or the launch is refused.
    """
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
    """The caller's working directory, held open (``O_PATH``) for the command to start in.

    By descriptor, not by name: the directory may have been removed (``timeout``
    still runs a command there) or renamed since, and a name could by then lead
    somewhere else.
    """
    return above_stdio(os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))


def open_run(
    spec: RunSpec, stdin: Stream, stdout: Stream, stderr: Stream, *, spec_pipe: bool
) -> tuple[str | None, int | None, list[int]]:
    """Open what a run's supervisor will hold; raise :class:`LaunchError` (leaving none) if not.

    Returns the absolute working directory (``None``: the caller's, held as a
    descriptor), the held record directory's descriptor (``None``: no record),
    and every descriptor opened, in this order: the command's stdin, stdout
    and stderr; the working directory where held; the record directory where
    held; the lifeline's reading then writing end, the status channel's; and,
    with ``spec_pipe``, the spec pipe's (a fresh interpreter reads the spec
    from it before the launch).
    """
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
    """The record's directory, checked and held open for the run; ``None`` without a record.

    Held from here on by both sides: the supervisor writes the record and the
    event log through its copy (so nothing done to the path during the run can
    redirect them), and the caller through its own, for a lost supervisor's
    record. Raises :class:`~tether.shared.record_file.RecordError`.
    """
    if spec.record_path is None:
        return None
    return above_stdio(hold_record_directory(spec.record_path))


def _absolute(cwd: str | None) -> str | None:
    """The command's working directory as an absolute path; the caller's own if ``None``.

    The caller's own may have been removed: it is then ``None`` here, and the
    command starts in it all the same, through its descriptor.
    """
    if cwd is not None:
        return os.path.abspath(cwd)
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None

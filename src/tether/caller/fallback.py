"""What a caller does itself when its supervisor is lost (status end of file, no ``finished``).

Stop what is left: each of the run's cgroups that is tether's own (``cgroup.kill``, or
SIGKILL to what a v1 ``cgroup.procs`` lists), then the command's group, only once a live
member shows the id is still its; write a ``supervisor_lost`` record, redacted, through the
record directory held since the spawn; report the run as a
:class:`~tether.shared.protocol.Finished` (status 125). ``os.killpg`` is called directly:
a group has no descriptor, and the guard is this module's policy. Why:
``docs/architecture.md`` (Channels) and ``docs/containment.md``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from datetime import datetime
from pathlib import Path

from tether.core.reasons import TETHER_FAILED, Reason
from tether.core.spec import RunSpec
from tether.shared.clock import wall_clock_at
from tether.shared.protocol import Finished, Placement

__all__ = ["LOST_MESSAGE", "after_supervisor_lost"]

LOST_MESSAGE = "the supervisor was lost before it reported how the run ended"


def after_supervisor_lost(spec: RunSpec, started: Placement | None) -> Finished:
    """Stop what is left of the command's tree, write the fallback record, say how it ended.

    ``started``: where the command is (``started``, or ``spawned``); ``None``: there was none."""
    if started is not None:
        _stop_what_is_left(started)
    elapsed = time.monotonic() - spec.asked_at
    started_at, finished_at = wall_clock_at(spec.asked_at), wall_clock_at(spec.asked_at + elapsed)
    written = _write_lost_record(
        spec, started, started_at=started_at, finished_at=finished_at, elapsed=elapsed
    )
    return Finished(
        reason=Reason.SUPERVISOR_LOST.value,
        exit_status=TETHER_FAILED,
        record=written,
        message=LOST_MESSAGE,
        started_at=started_at.isoformat(),
        finished_at=finished_at.isoformat(),
        elapsed_seconds=round(elapsed, 3),
    )


def _stop_what_is_left(started: Placement) -> None:
    from tether.linux.cgroup import is_run_cgroup, kill_run_cgroup
    from tether.linux.proctree import group_has_members

    # Whoever made them (the supervisor, or the zygote that forked it): each
    # only if it is one of tether's own, where tether makes them.
    for directory in started.cgroups:
        if is_run_cgroup(directory):
            kill_run_cgroup(directory)
    pgid = started.pgid
    # A command that used the caller's terminal is in the caller's own group (and
    # so, maybe, are the other commands of its pipeline): never that group.
    if pgid is not None and pgid > 1 and pgid != os.getpgrp() and group_has_members(pgid):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


def _write_lost_record(
    spec: RunSpec,
    started: Placement | None,
    *,
    started_at: datetime,
    finished_at: datetime,
    elapsed: float,
) -> str | None:
    """Write the fallback record unless the supervisor's own exists; its path, or ``None``
    (no record path, the supervisor's is there, or it cannot be written)."""
    if spec.record_path is None:
        return None
    path = Path(spec.record_path)
    directory_fd = spec.fds.get("record_dir")
    if _already_there(path, directory_fd):
        return None
    from tether.shared.record_document import build_lost_document
    from tether.shared.record_file import RecordError, write_record
    from tether.shared.secrets import redactor_for

    document = build_lost_document(
        spec,
        started_at=started_at,
        finished_at=finished_at,
        elapsed_seconds=elapsed,
        supervisor_pid=None if started is None else started.supervisor_pid,
        command_pid=None if started is None else started.pid,
        command_pgid=None if started is None else started.pgid,
        message=LOST_MESSAGE,
        hostname=socket.gethostname(),
    )
    try:
        write_record(
            path, document, redactor=redactor_for(spec, os.environ), directory_fd=directory_fd
        )
    except RecordError:
        return None
    return spec.record_path


def _already_there(path: Path, directory_fd: int | None) -> bool:
    """Whether something is at the record's name in the held directory (not following a link);
    what cannot be looked at counts as there."""
    if directory_fd is None:
        return os.path.lexists(path)
    try:
        os.stat(path.name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True

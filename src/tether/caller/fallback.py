"""What a caller does itself when its supervisor is lost.

A supervisor that is SIGKILLed (or OOM-killed) can neither stop the command's
tree nor write its record. The caller notices, because the status pipe
reaches end of file with no ``finished`` message, and it is then the only
process left that knows anything about the run. Whatever the door (``tether
run``, ``tether timeout``, the API: they all read the status pipe through
:mod:`tether.caller.status`), it does what it still can, in this order:

1. Stop what is left of the tree. The command's leader already got its
   parent-death signal, but everything else was re-parented away from the dead
   supervisor and would run on. Under cgroup containment the caller knows the
   run's cgroups (the ``started`` message lists their directories, one per
   hierarchy) and, for each that is one of tether's own (tether's name,
   directly below the caller's own cgroup, whether the supervisor or the
   zygote made it: a forged message cannot point it elsewhere), writes
   ``cgroup.kill`` (v2) or SIGKILLs every process ``cgroup.procs`` lists
   until none is left (v1, bounded): everything goes, escapees included.
   Then it also SIGKILLs the command's
   process group, but only after finding a live member of it in ``/proc``: a
   group id cannot be reused while any member is alive, and an empty group's
   id may already belong to someone else. Descendants that had left the group
   are then out of the caller's reach; the docs say so. A supervisor lost
   before it said ``started`` is no different once the command exists: the
   command itself said where it is (``spawned``) between its fork and its
   exec. Before that, there is no command (its parent-death signal is set
   before it says so).
2. Write what it knows, with ``reason: supervisor_lost``, at the path where
   the record was expected, redacted like every record, so the evidence is
   never simply missing and an operator finds it where they would look. It
   goes through the record's directory as the caller has held it since the
   spawn (``spec.fds["record_dir"]``), never through the path looked up again:
   a directory swapped for a link meanwhile cannot redirect it.
3. Report the run as ended, as a :class:`~tether.shared.protocol.Finished`
   like the one the supervisor would have sent: every door then reports a
   lost supervisor the same way (status 125).

Caller side: standard library only.

``os.killpg`` is called here directly, deliberately: a process group has no
descriptor to pin it, and the guard (a live member, never the caller's own
group) is this module's policy, not a mechanism.
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

    ``started`` is where the command is, as ``started`` said, or as the command
    itself said before its exec (``spawned``) if the supervisor was lost before
    that; ``None`` if the supervisor was lost before the command existed.
    """
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
    """Write the fallback record unless the supervisor's own exists; return its path.

    Returns ``None`` when the run has no record path, when the supervisor's
    record is there after all, or when the fallback cannot be written either.
    """
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
    """Whether something (the supervisor's own record, after all) is at the record's name.

    Looked for in the held directory, without following a link; anything
    that cannot be looked at counts as there, so it is never overwritten.
    """
    if directory_fd is None:
        return os.path.lexists(path)
    try:
        os.stat(path.name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True

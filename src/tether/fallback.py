"""What the caller does when its supervisor vanished without a word.

A supervisor that is SIGKILLed (or OOM-killed) can neither stop the command's
tree nor write its record. The caller notices, because the status pipe reaches
end of file with no ``finished`` message, and it is then the only process left
that knows anything about the run. It does what it still can, in this order:

1. SIGKILL the command's process group. The command's leader already got its
   parent-death signal, but the rest of its group was re-parented away from
   the dead supervisor and would run on. The group id cannot have been reused
   while any member of the group is alive, and ``killpg`` of an empty group
   reaches nobody. Descendants that had left the group are out of the caller's
   reach (cgroup containment removes them all at once where it is used; the
   caller does not know the cgroup).
2. Write what it knows, with ``reason: supervisor_lost``, at the path where
   the record was expected, so the evidence is never simply missing and an
   operator finds it where they would look.

Caller side: standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tether.record import RecordError, build_supervisor_lost_document, write_record
from tether.spec import RunSpec

__all__ = ["LOST_MESSAGE", "after_supervisor_lost", "write_supervisor_lost_record"]

LOST_MESSAGE = "the supervisor was lost before it reported how the run ended"


def after_supervisor_lost(
    spec: RunSpec,
    *,
    supervisor_pid: int | None,
    pid: int | None,
    pgid: int | None,
    message: str = LOST_MESSAGE,
) -> Path | None:
    """Stop what is left of the command's group, then write the fallback record (its path)."""
    if pgid is not None and pgid > 1:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    return write_supervisor_lost_record(
        spec, supervisor_pid=supervisor_pid, pid=pid, pgid=pgid, message=message
    )


def write_supervisor_lost_record(
    spec: RunSpec,
    *,
    supervisor_pid: int | None,
    pid: int | None,
    pgid: int | None,
    message: str = LOST_MESSAGE,
) -> Path | None:
    """Write the fallback record unless the supervisor's own exists; return its path.

    Returns ``None`` when the run has no record path, when the supervisor's
    record is there after all, or when the fallback cannot be written either.
    """
    if spec.record_path is None:
        return None
    path = Path(spec.record_path)
    if os.path.lexists(path):
        return None
    now = time.monotonic()
    finished_at = datetime.now(UTC)
    document = build_supervisor_lost_document(
        label=spec.label,
        started_at=finished_at - timedelta(seconds=now - spec.asked_at),
        finished_at=finished_at,
        elapsed_seconds=now - spec.asked_at,
        deadline_seconds=spec.deadline_seconds,
        grace_seconds=spec.grace_seconds,
        supervisor_pid=supervisor_pid,
        command_pid=pid,
        command_pgid=pgid,
        message=message,
        hostname=socket.gethostname(),
    )
    try:
        write_record(path, document)
    except RecordError:
        return None
    return path

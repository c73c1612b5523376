"""What a caller does itself: after a lost supervisor, and for a refused command line.

**A refused command line.** Bad input (a duration that is NaN, a missing
``--``, an unusable ``--parent-fd``) never starts anything, and never fails
silently either: besides the one line on stderr, a ``launch_failed`` record is
written where the record was asked for, if that path is usable. A worker that
always looks for its record finds one, saying why nothing ran.

**A lost supervisor.**

A supervisor that is SIGKILLed (or OOM-killed) can neither stop the command's
tree nor write its record. The caller notices, because the status pipe reaches
end of file with no ``finished`` message, and it is then the only process left
that knows anything about the run. It does what it still can, in this order:

1. Stop what is left of the tree. The command's leader already got its
   parent-death signal, but everything else was re-parented away from the dead
   supervisor and would run on. Under cgroup containment the caller knows the
   run's cgroup (the ``started`` message says) and writes ``cgroup.kill``:
   everything goes, escapees included. Otherwise it SIGKILLs the command's
   process group, but only after finding a live member of it in ``/proc``: a
   group id cannot be reused while any member is alive, and an empty group's
   id may already belong to someone else. Descendants that had left the group
   are then out of the caller's reach; the docs say so.
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

from tether.caller.start import Started
from tether.core.reasons import Reason
from tether.shared.record_document import RecordError, build_caller_document, write_record
from tether.core.spec import RunSpec

__all__ = [
    "LOST_MESSAGE",
    "after_supervisor_lost",
    "write_refusal_record",
    "write_supervisor_lost_record",
]

LOST_MESSAGE = "the supervisor was lost before it reported how the run ended"


def after_supervisor_lost(
    spec: RunSpec, started: Started | None, *, message: str = LOST_MESSAGE
) -> Path | None:
    """Stop what is left of the command's tree, then write the fallback record (its path)."""
    if started is not None:
        _stop_what_is_left(started)
    return write_supervisor_lost_record(
        spec,
        supervisor_pid=None if started is None else started.supervisor_pid,
        pid=None if started is None else started.pid,
        pgid=None if started is None else started.pgid,
        message=message,
    )


def _stop_what_is_left(started: Started) -> None:
    cgroup = started.cgroup
    expected = f"tether-{started.supervisor_pid}-"
    if cgroup is not None and os.path.basename(cgroup).startswith(expected):
        with (
            contextlib.suppress(OSError),
            open(os.path.join(cgroup, "cgroup.kill"), "wb", buffering=0) as kill,
        ):
            kill.write(b"1")
    pgid = started.pgid
    if pgid is not None and pgid > 1 and _group_has_members(pgid):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


def _group_has_members(pgid: int) -> bool:
    """Whether any live process is in process group ``pgid`` (read from ``/proc``)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


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
    written = _write_caller_record(
        path,
        asked_at=spec.asked_at,
        reason=Reason.SUPERVISOR_LOST,
        label=spec.label,
        deadline_seconds=spec.deadline_seconds,
        grace_seconds=spec.grace_seconds,
        supervisor_pid=supervisor_pid,
        command_pid=pid,
        command_pgid=pgid,
        message=message,
    )
    return path if written else None


def write_refusal_record(
    path: Path,
    *,
    asked_at: float,
    label: str | None,
    deadline: float | None,
    grace: float | None,
    message: str,
    supervisor_pid: int | None = None,
) -> bool:
    """Write the ``launch_failed`` record of a refused command line; return whether it was."""
    return _write_caller_record(
        path,
        asked_at=asked_at,
        reason=Reason.LAUNCH_FAILED,
        label=label,
        deadline_seconds=deadline,
        grace_seconds=grace,
        supervisor_pid=supervisor_pid,
        message=message,
    )


def _write_caller_record(
    path: Path,
    *,
    asked_at: float,
    reason: Reason,
    label: str | None,
    deadline_seconds: float | None,
    grace_seconds: float | None,
    supervisor_pid: int | None,
    message: str,
    command_pid: int | None = None,
    command_pgid: int | None = None,
) -> bool:
    """Write a record that only the caller could write, timed from ``asked_at`` to now."""
    now = time.monotonic()
    finished_at = datetime.now(UTC)
    document = build_caller_document(
        reason=reason,
        label=label,
        started_at=finished_at - timedelta(seconds=now - asked_at),
        finished_at=finished_at,
        elapsed_seconds=now - asked_at,
        deadline_seconds=deadline_seconds,
        grace_seconds=grace_seconds,
        supervisor_pid=supervisor_pid,
        command_pid=command_pid,
        command_pgid=command_pgid,
        message=message,
        hostname=socket.gethostname(),
    )
    try:
        write_record(path, document)
    except RecordError:
        return False
    return True

"""The record the caller writes when its supervisor vanished without one.

A supervisor that is SIGKILLed (or OOM-killed) cannot write its record. The
caller notices, because the status pipe reaches end of file with no
``finished`` message, and it is then the only process left that knows
anything about the run. It writes what it knows, with ``reason:
supervisor_lost``, at the path where the record was expected, so the evidence
is never simply missing and an operator finds it where they would look.

Caller side: standard library only.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tether.record import RecordError, build_supervisor_lost_document, write_record
from tether.spec import RunSpec

__all__ = ["LOST_MESSAGE", "write_supervisor_lost_record"]

LOST_MESSAGE = "the supervisor was lost before it reported how the run ended"


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

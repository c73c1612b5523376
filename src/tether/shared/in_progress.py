"""How a run says it is in progress, whatever its record's name: an exclusive ``flock`` on its
event log, which pruning respects (docs/operators.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os


def hold(fd: int) -> None:
    """Mark the event log open on ``fd`` as a run in progress (best effort: never raises)."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def in_progress(directory_fd: int, log_name: str) -> bool:
    """Whether the event log ``log_name`` in ``directory_fd`` is held by a running supervisor."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(log_name, flags, dir_fd=directory_fd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False

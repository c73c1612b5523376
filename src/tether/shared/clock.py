"""The two clocks of a run, and the one conversion between them.

Deadlines are kept on the monotonic clock, which a change of the wall clock
cannot move; people read wall-clock times, in UTC. A run's start is a
monotonic reading taken by the caller when it asked (``asked_at``), possibly in
another process, so whoever reports a start or an end as a wall-clock time
converts it here, the same way: the wall clock now, minus how long ago that
monotonic reading was. (Suspend pauses the monotonic clock, so across a
suspend the wall-clock start drifts by the time the machine slept.)
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

__all__ = ["wall_clock_at"]


def wall_clock_at(monotonic: float) -> datetime:
    """The UTC wall-clock time at which the monotonic clock read ``monotonic``."""
    return datetime.now(UTC) - timedelta(seconds=time.monotonic() - monotonic)

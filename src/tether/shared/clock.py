"""The two clocks of a run (monotonic for deadlines, UTC for people), and the one conversion
between them (docs/architecture.md, "Why some mechanisms are built as they are").
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta


def wall_clock_at(monotonic: float) -> datetime:
    """The UTC wall-clock time at which the monotonic clock read ``monotonic``."""
    return datetime.now(UTC) - timedelta(seconds=time.monotonic() - monotonic)

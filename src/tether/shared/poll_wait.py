"""A wait in seconds as ``poll()`` takes it: whole milliseconds, rounded up, within its range.

``poll()`` takes a C ``int`` of milliseconds; a deadline of years (``tether timeout 4294967296
sleep 0`` is GNU-valid) overflows it, so a longer wait is cut to the longest ``poll()`` takes
and the caller's loop waits again. Rounded up, as :class:`selectors.PollSelector` does: a wait
cut short by rounding down would wake just before its deadline and spin until it came.
"""

from __future__ import annotations

import math

__all__ = ["poll_ms"]

#: The longest wait ``poll()`` takes, in milliseconds (about 24.8 days).
LONGEST_MS = 2**31 - 1


def poll_ms(seconds: float | None) -> int | None:
    """``seconds`` as ``poll()``'s timeout: ``None`` (no limit) stays ``None``."""
    if seconds is None:
        return None
    return 0 if seconds <= 0 else min(math.ceil(seconds * 1000), LONGEST_MS)

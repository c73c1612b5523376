"""What the loop waits on: one ``poll()`` over a few descriptors, each named by what it means.

Why ``poll()`` itself (docs/architecture.md, "Why some mechanisms are built as they are").
"""

from __future__ import annotations

import math
import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["Watch", "wait_bound"]

#: The longest single wait in ``poll()``: a day (the core answers an early tick with nothing).
_LONGEST_WAIT: Final = 86400.0


class Watch:
    """The descriptors the loop waits on, each by the name of what its readiness means (any
    counts)."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._names: dict[int, str] = {}

    def register(self, fd: int, name: str) -> None:
        """Wake up when ``fd`` is readable, and say ``name``."""
        self._poll.register(fd, select.POLLIN)
        self._names[fd] = name

    def unregister(self, fd: int) -> None:
        """Stop watching ``fd``."""
        self._poll.unregister(fd)
        del self._names[fd]

    def wait(self, timeout: float | None) -> set[str]:
        """The names ready within ``timeout`` seconds, rounded up to the millisecond (no spin
        before a deadline)."""
        if timeout is None:
            ready = self._poll.poll()
        else:
            ready = self._poll.poll(math.ceil(timeout * 1000) if timeout > 0 else 0)
        return {self._names[fd] for fd, _ in ready if fd in self._names}

    def close(self) -> None:
        """Stop watching everything; safe to call twice."""
        for fd in list(self._names):
            self.unregister(fd)


def wait_bound(seconds: float) -> float:
    """A ``poll()`` timeout for ``seconds`` away, within a C ``int`` of milliseconds."""
    return min(max(0.0, seconds), _LONGEST_WAIT)

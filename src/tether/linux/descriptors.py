"""Which descriptors a process holds, and closing all of them but some, completely.

Closing "every descriptor" up to ``sysconf(SC_OPEN_MAX)`` stops at the soft
open-file limit: a descriptor opened while the limit was higher (or inherited
from a process with a higher one) survives above it. With a soft limit of 1024
and descriptor 3000 inherited, that one reached the command. The ceiling here
is the highest descriptor this process really holds (``/proc/self/fd``), and
without ``/proc`` a bound far above any limit; ``os.closerange`` then closes
the range with ``close_range(2)`` where the kernel has it.

Also the descriptors a program inherited (``tether run`` and ``tether
timeout`` hand them on to their command, as a shell and GNU ``timeout`` do),
and a descriptor moved above the standard streams' numbers.
"""

from __future__ import annotations

import fcntl
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Final

__all__ = ["above_stdio", "close_all_but", "open_descriptors"]

#: Without ``/proc`` and with no finite hard limit: as far as closing goes.
_FALLBACK_CEILING: Final = 1 << 20


def above_stdio(fd: int) -> int:
    """``fd`` moved to a number above 2 (close-on-exec), so no child's stdio setup clobbers it.

    A descriptor passed to a child keeps its number there, and numbers 0 to 2
    are the child's standard streams. They are free here only when this
    process runs with a standard stream closed.
    """
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def open_descriptors(low: int = 3) -> list[int]:
    """The descriptors from ``low`` up that this process holds now, in order."""
    listed = _listed()
    names = range(low, _soft_limit()) if listed is None else listed
    held = []
    for fd in names:
        if fd < low:
            continue
        try:
            fcntl.fcntl(fd, fcntl.F_GETFD)  # the listing's own descriptor is closed by now
        except OSError:
            continue
        held.append(fd)
    return sorted(held)


def close_all_but(keep: Iterable[int], low: int = 3) -> None:
    """Close every descriptor from ``low`` up except ``keep``, above any limit.

    Safe in a forked child under a full descriptor table: nothing is
    imported, and when ``/proc/self/fd`` cannot be opened for want of a
    descriptor, those below the soft limit are closed first to make room.
    """
    kept = sorted(fd for fd in set(keep) if fd >= low)
    names = _listed()
    if names is None:
        _close_between(low, _soft_limit(), kept)
        names = _listed()
    ceiling = _FALLBACK_CEILING if names is None else max(names, default=2) + 1
    _close_between(low, ceiling, kept)


def _close_between(low: int, high: int, kept: list[int]) -> None:
    """Close ``low`` to ``high - 1`` but ``kept`` (sorted), a range at a time."""
    for fd in kept:
        if fd >= high:
            break
        if low < fd:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    if low < high:
        os.closerange(low, high)


def _listed() -> list[int] | None:
    """The numbers in ``/proc/self/fd`` (the listing's own among them); ``None`` without it."""
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return None


def _soft_limit() -> int:
    try:
        return os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        return 1024

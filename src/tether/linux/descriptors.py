"""Which descriptors a process holds, and closing all of them but some, completely.

Closing up to ``sysconf(SC_OPEN_MAX)`` misses a descriptor opened under a higher limit, so
the ceiling is the highest one ``/proc/self/fd`` shows (without ``/proc``, a bound far above
any limit), closed with ``os.closerange``. Also the descriptors a program inherited, and a
descriptor moved above the standard streams.
"""

from __future__ import annotations

import fcntl
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Final

__all__ = ["above_stdio", "close_all_but", "descriptor_ceiling", "open_descriptors"]

#: Without ``/proc`` and with no finite hard limit: as far as closing goes.
_FALLBACK_CEILING: Final = 1 << 20


def above_stdio(fd: int) -> int:
    """``fd`` moved above 2 (close-on-exec), so no child's stdio setup clobbers it."""
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


def descriptor_ceiling() -> int | None:
    """One above the highest descriptor this process holds now (``None``: no listing, as under
    a full table), for :func:`close_all_but` in a child about to be forked."""
    names = _listed()
    return None if names is None else max(names, default=2) + 1


def close_all_but(keep: Iterable[int], low: int = 3, *, ceiling: int | None = None) -> None:
    """Close every descriptor from ``low`` up except ``keep``, above any limit; safe in a forked
    child under a full table (imports nothing). ``ceiling``: the parent's
    :func:`descriptor_ceiling` just before the fork, which spares the child its own listing (what
    the child opened since is close-on-exec, as Python opens it, or kept)."""
    kept = sorted(fd for fd in set(keep) if fd >= low)
    if ceiling is not None:
        _close_between(low, ceiling, kept)
        return
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

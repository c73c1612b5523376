"""Spare descriptors, held so that stopping the tree does not run out of them.

Stopping opens files (``/proc`` walks, pidfds, ``cgroup.kill``), and descriptors are
scarcest when things go wrong. The supervisor checks before the spawn that it has
:data:`NEEDED` free (:func:`free_descriptors`), takes a few spares right after it (never
the last :data:`HEADROOM`), and :meth:`DescriptorReserve.call` gives one back each time an
open fails with ``EMFILE``/``ENFILE``; :meth:`DescriptorReserve.lent` hands them all back
around code that reads a failed open as "nothing there". Why: ``docs/containment.md``
("Too few file descriptors").
"""

from __future__ import annotations

import contextlib
import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final, TypeVar

    _T = TypeVar("_T")

__all__ = ["HEADROOM", "NEEDED", "SIZE", "DescriptorReserve", "exhausted", "free_descriptors"]

#: Free descriptors a supervisor needs as its command starts: a pidfd, the event log, one for
#: the walk, two for the spawn (``cgroup.procs`` and the cgroup's directory).
NEEDED: Final = 5

#: Spares held at most: what one step of the stop path holds at once, and one more.
SIZE: Final = 3

#: Free descriptors left for the supervisor's event log and one to load code with.
HEADROOM: Final = 2

#: The errors a spare descriptor can cure.
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE})


def exhausted(error: BaseException) -> bool:
    """Whether ``error`` says no descriptor could be had (``EMFILE``, ``ENFILE``)."""
    return isinstance(error, OSError) and error.errno in _EXHAUSTED


def _open_spare() -> int:
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def _open_spares(count: int) -> list[int]:
    """Open up to ``count`` spares; fewer if the table (or the system's) is full."""
    opened: list[int] = []
    with contextlib.suppress(OSError):
        while len(opened) < count:
            opened.append(_open_spare())
    return opened


def free_descriptors(at_most: int) -> int:
    """How many more descriptors this process can open, up to ``at_most``: counted by opening
    them (a ``/proc`` listing would need one)."""
    opened = _open_spares(at_most)
    for fd in opened:
        os.close(fd)
    return len(opened)


class DescriptorReserve:
    """A few spare descriptors, given back one at a time when an open fails for want of one."""

    def __init__(self, spares: list[int] | None = None) -> None:
        """Prefer :meth:`take`; an empty reserve spends nothing and retries nothing."""
        self._spares: list[int] = [] if spares is None else spares
        self._closed = False
        #: How many spares each open :meth:`lent` block gave back, innermost last.
        self._lent: list[int] = []

    @classmethod
    def take(cls, size: int = SIZE, *, leave: int = HEADROOM) -> DescriptorReserve:
        """Hold up to ``size`` spares, leaving at least ``leave`` descriptors free."""
        opened = _open_spares(size + leave)
        keep = max(0, len(opened) - leave)
        for fd in opened[keep:]:
            os.close(fd)
        return cls(opened[:keep])

    def __len__(self) -> int:
        return len(self._spares)

    def call(self, action: Callable[[], _T]) -> _T:
        """Return ``action()`` (safe to repeat), giving back a spare and retrying each time it runs
        out of files; what was spent is taken again afterwards."""
        spent = 0
        try:
            while True:
                try:
                    return action()
                except OSError as error:
                    if not exhausted(error) or not self._spares:
                        raise
                    os.close(self._spares.pop())
                    spent += 1
        finally:
            self._take_again(spent)

    def lent(self) -> DescriptorReserve:
        """Give every spare back for the block (``with reserve.lent():``), for code that reads
        a failed open as "nothing there"; then take them again. A plain context manager: a
        generator's machinery cost a supervisor more than the block's six system calls."""
        self._lent.append(len(self._spares))
        self._give_back()
        return self

    def __enter__(self) -> None:
        """The spares were given back by :meth:`lent`."""

    def __exit__(self, *_exception: object) -> None:
        self._take_again(self._lent.pop())

    def close(self) -> None:
        """Give every spare back for good: the tree they were kept for is gone."""
        self._closed = True
        self._give_back()

    def _give_back(self) -> None:
        while self._spares:
            with contextlib.suppress(OSError):
                os.close(self._spares.pop())

    def _take_again(self, count: int) -> None:
        if not self._closed:
            self._spares += _open_spares(count)

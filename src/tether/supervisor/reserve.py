"""Spare descriptors, held so that stopping the tree does not run out of them.

Stopping the tree opens files: ``/proc/<pid>/task/<tid>/children`` and
``/proc/<pid>/stat`` for the walk, a pidfd per escapee, ``cgroup.kill`` and
``cgroup.procs``. Each needs a free slot in the supervisor's descriptor table
(``EMFILE`` when the table is full: a caller's low ``ulimit -n``, which the
supervisor runs under because the command must get the caller's limits) and
a free open file in the system (``ENFILE``, when something exhausted the
system-wide table; root is exempt). Both are at their scarcest exactly when
things are going wrong, which is when the tree must be stopped.

So the supervisor holds a few spare descriptors, each a separate open of
``/dev/null`` (a separate open file, not a ``dup``, so that giving one back
frees a slot in the system's table as well as in its own), and
:meth:`DescriptorReserve.call` spends them: when an open fails with
``EMFILE`` or ``ENFILE``, one spare is closed and the step is tried again,
until it works or no spare is left; afterwards as many spares as were spent
are taken again. Code that reports a failed open as "nothing there"
(``cgroup.procs`` read through :mod:`tether.linux.cgroup`) runs inside
:meth:`DescriptorReserve.lent` instead, with every spare handed back for the
duration.

Before the command is spawned, the supervisor checks that it will have the
descriptors it needs at all (:data:`NEEDED`: a pidfd on the command, its
event log, one free for the walk, and two the spawn itself needs: the
cgroup's ``cgroup.procs`` and its directory; its selector is ``poll()``, which
holds none), and refuses to start a
command it could not stop (:func:`free_descriptors`). The reserve itself is
taken right after the spawn, never before: the spawn needs descriptors of
its own (its error pipe, the cgroup's ``cgroup.procs`` and directory), and a reserve taken
first would make a launch fail, or silently lose its cgroup, under a limit it
would otherwise fit. Nothing is opened between the spawn and the reserve. It
never takes the last few free descriptors (:data:`HEADROOM`): the supervisor
still has to open its event log and to load the code that
watches the command, and a reserve that took those would only move the
failure from stopping the tree to watching it. Under a limit that leaves no
room for spares, the reserve is empty: the stop path then has the one
descriptor :data:`NEEDED` kept free, and falls back on what needs fewer (see
:mod:`tether.supervisor.process_tree`).

On the path to the command's launch: standard library only, no ``typing`` at
run time.
"""

from __future__ import annotations

import contextlib
import errno
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Final, TypeVar

    _T = TypeVar("_T")

__all__ = ["HEADROOM", "NEEDED", "SIZE", "DescriptorReserve", "exhausted", "free_descriptors"]

#: How many free descriptors a supervisor needs when its command starts: a
#: pidfd on the command, its event log, one for the walk of the tree (which
#: opens one file at a time), and two for the spawn (the cgroup's
#: ``cgroup.procs``, and its directory, which the command is born in). Its
#: selector, ``poll()``, holds none.
NEEDED: Final = 5

#: How many spares the reserve holds at most: what one step of the stop path
#: holds at once (a pidfd while ``/proc/<pid>/stat`` is read), and one more.
SIZE: Final = 3

#: How many free descriptors the reserve leaves for the supervisor's own
#: needs after the launch: its event log, and one to load code with.
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
    """How many more descriptors this process can open, counted up to ``at_most``.

    Counted by opening them, then closing them again: no ``/proc`` listing,
    which would itself need one, and no scan of a limit that may be huge.
    """
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

    @classmethod
    def take(cls, size: int = SIZE, *, leave: int = HEADROOM) -> DescriptorReserve:
        """Hold up to ``size`` spares, leaving at least ``leave`` descriptors free.

        The free descriptors are counted by opening them (no ``/proc`` listing,
        which would itself need one): up to ``size + leave`` spares are opened,
        and the ``leave`` last are closed again.
        """
        opened = _open_spares(size + leave)
        keep = max(0, len(opened) - leave)
        for fd in opened[keep:]:
            os.close(fd)
        return cls(opened[:keep])

    def __len__(self) -> int:
        return len(self._spares)

    def call(self, action: Callable[[], _T]) -> _T:
        """Return ``action()``, giving back a spare and retrying each time it runs out of files.

        ``action`` must be safe to repeat (it is a look or a signal, tried
        again from the start). An error that is not ``EMFILE``/``ENFILE``, or
        one that persists once the spares are spent, is raised. Whatever was
        spent is taken again afterwards, as far as the table allows.
        """
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

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """Give every spare back for the duration of the block, then take them again.

        For code that cannot say that it ran out of descriptors (it reads a
        failed open as "nothing there"), so it must never run short.
        """
        spent = len(self._spares)
        self._give_back()
        try:
            yield
        finally:
            self._take_again(spent)

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

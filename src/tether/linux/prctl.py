"""``prctl(2)`` through ctypes, for the two flags the standard library does not offer.

``PR_SET_CHILD_SUBREAPER`` makes every orphaned descendant of the supervisor
re-parent to it rather than to init, which is how a descendant that escaped
with ``setsid()`` or a double fork stays findable. ``PR_SET_PDEATHSIG`` is the
backstop for the one case the supervisor cannot handle itself: its own
SIGKILL. Both are plain integers passed to libc through ctypes; only the
supervisor imports this module, and the C library's handle is opened on first
use.
"""

from __future__ import annotations

import ctypes
import functools
import os

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["set_child_subreaper", "set_parent_death_signal"]

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_SET_NAME: Final = 15

#: The name a supervisor takes once its command runs (``ps``, ``/proc/PID/comm``):
#: how another supervisor recognises a nested run in its tree.
SUPERVISOR_NAME: Final = "tether-sup"


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if _libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def set_child_subreaper(enabled: bool = True) -> None:
    """Make the calling process the reaper of its orphaned descendants (or stop being it)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, int(enabled))


def set_parent_death_signal(signal_number: int) -> None:
    """Ask for ``signal_number`` when the parent *thread* of the caller dies.

    The kernel ties this to the thread that forked, not the process; tether's
    supervisor is single-threaded, so the two are the same.
    """
    _prctl(_PR_SET_PDEATHSIG, signal_number)


def set_process_name(name: str) -> None:
    """Set the calling thread's name (``comm``, at most 15 bytes), as ``ps`` shows it."""
    raw = ctypes.create_string_buffer(name.encode()[:15])
    if _libc().prctl(_PR_SET_NAME, raw, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))

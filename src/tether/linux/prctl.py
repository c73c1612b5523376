"""``prctl(2)`` for the flags the standard library does not offer, through ``_ctypes``.

The subreaper, the parent-death signal, the process's name, and three values the caller's
zygote fingerprint reads (docs/architecture.md, "Why some mechanisms are built as they are").
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

__all__ = [
    "bind",
    "io_priority",
    "memory_deny_write_execute",
    "parent_death_signal_setter",
    "set_child_subreaper",
    "set_parent_death_signal",
    "set_process_name",
    "timer_slack",
]

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_SET_NAME: Final = 15
_PR_GET_TIMERSLACK: Final = 30
_PR_GET_MDWE: Final = 66

#: ``ioprio_get``'s number on this machine; ``None`` on one not listed here (it is not read).
_IOPRIO_GET: Final = {"x86_64": 252, "aarch64": 31, "i686": 290, "i386": 290}.get(
    os.uname().machine
)
_IOPRIO_WHO_PROCESS: Final = 1

#: The name a supervisor takes once its command runs (``ps``, ``/proc/PID/comm``):
#: how another supervisor recognises a nested run in its tree.
SUPERVISOR_NAME: Final = "tether-sup"
#: The name an API caller's fork server (its zygote) takes, in ``comm`` and on its command line.
ZYGOTE_NAME: Final = "tether-zygote"

#: ``prctl`` and the C types of its arguments, once looked up (see :func:`_bound`).
_binding: _Binding | None = None


class _Binding:
    """libc's ``prctl``, how to read ``errno`` after it, and ``unsigned long`` to pass a value."""

    __slots__ = ("get_errno", "prctl", "syscall", "unsigned_long")

    def __init__(
        self,
        prctl: Callable[..., int],
        get_errno: Callable[[], int],
        unsigned_long: Callable[[int], object],
        syscall: Callable[..., int],
    ) -> None:
        self.prctl = prctl
        self.get_errno = get_errno
        self.unsigned_long = unsigned_long
        self.syscall = syscall


def bind() -> None:
    """Look the C function up now (a fork server, so that its children share it)."""
    _bound()


def _bound() -> _Binding:
    global _binding  # noqa: PLW0603 - looked up once per process
    if _binding is None:
        try:
            _binding = _through_ctypes_core()
        except (ImportError, AttributeError, TypeError, OSError):
            _binding = _through_ctypes()
    return _binding


def _through_ctypes_core() -> _Binding:
    """What ``ctypes.CDLL(None, use_errno=True).prctl`` is, built from ``_ctypes`` alone."""
    import _ctypes

    class CInt(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "i"

    class CUnsignedLong(_ctypes._SimpleCData):  # type: ignore[type-arg]
        _type_ = "L"

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = CInt

    class Library:
        """What a function pointer is looked up in: anything with the library's handle."""

        _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]  # the program

    library = Library()
    prctl = Function(("prctl", library))  # type: ignore[arg-type]  # what CDLL passes: itself
    syscall = Function(("syscall", library))  # type: ignore[arg-type]
    return _Binding(prctl, _ctypes.get_errno, CUnsignedLong, syscall)


def _through_ctypes() -> _Binding:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return _Binding(libc.prctl, ctypes.get_errno, ctypes.c_ulong, libc.syscall)


def _prctl(option: int, value: object) -> None:
    binding = _bound()
    if binding.prctl(option, value, 0, 0, 0) != 0:
        number = binding.get_errno()
        raise OSError(number, os.strerror(number))


def timer_slack() -> int:
    """The calling thread's timer slack, in nanoseconds (as a C ``int`` holds it)."""
    return int(_bound().prctl(_PR_GET_TIMERSLACK, 0, 0, 0, 0))


def memory_deny_write_execute() -> int:
    """This process's ``PR_SET_MDWE`` flags; ``-1`` where the kernel has none (before 6.3)."""
    return int(_bound().prctl(_PR_GET_MDWE, 0, 0, 0, 0))


def io_priority() -> int | None:
    """The calling thread's I/O priority (``ioprio_get``); ``None`` where it cannot be read."""
    if _IOPRIO_GET is None:
        return None
    got = int(_bound().syscall(_IOPRIO_GET, _IOPRIO_WHO_PROCESS, 0))
    return None if got < 0 else got


def set_child_subreaper(enabled: bool = True) -> None:
    """Make the calling process the reaper of its orphaned descendants (or stop being it)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, _bound().unsigned_long(int(enabled)))


def set_parent_death_signal(signal_number: int) -> None:
    """Ask for ``signal_number`` when the parent *thread* dies (one thread in a supervisor)."""
    _prctl(_PR_SET_PDEATHSIG, _bound().unsigned_long(signal_number))


def parent_death_signal_setter(signal_number: int) -> Callable[[], None]:
    """:func:`set_parent_death_signal` for a child about to be forked: looked up and its argument
    made here, in the parent, so that the child makes one call and no object."""
    binding = _bound()
    prctl, get_errno = binding.prctl, binding.get_errno
    value = binding.unsigned_long(signal_number)

    def set_it() -> None:
        if prctl(_PR_SET_PDEATHSIG, value, 0, 0, 0) != 0:
            number = get_errno()
            raise OSError(number, os.strerror(number))

    return set_it


def set_process_name(name: str) -> None:
    """Set the calling thread's name (``comm``, at most 15 bytes), as ``ps`` shows it."""
    # A bytes object is passed as a pointer to its bytes, always followed by a NUL.
    _prctl(_PR_SET_NAME, name.encode()[:15])

"""A fork whose child is born in a cgroup v2 (``clone3`` with ``CLONE_INTO_CGROUP``, Linux 5.7).

A child born in its cgroup never runs outside it and never takes the machine-wide lock a
join by writing waits for (``docs/containment.md``). :func:`fork_into_cgroup` does what
:func:`os.fork` does around its ``fork()`` (``PyOS_BeforeFork``, the call,
``PyOS_AfterFork_*``, the interpreter's lock held), looked up once through ``_ctypes`` at
import (a fork server imports it before it forks, sparing every child that lookup). It
skips the C library's fork wrapper, so it is used only in a process with one thread, and
raises :class:`CloneUnavailable` where the kernel or a seccomp filter refuses it.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

__all__ = ["CloneUnavailable", "clone_into_cgroup_likely", "fork_into_cgroup", "kernel_at_least"]

#: ``clone3``'s number, the same on every architecture (new system calls share one table).
_SYS_CLONE3: Final = 435
#: The flag (Linux 5.7) that names the child's cgroup v2 by a directory descriptor.
_CLONE_INTO_CGROUP: Final = 0x200000000
#: Answers that mean the kernel (or a filter in front of it) has no such ``clone3``: no retry.
_NEVER: Final = frozenset({errno.ENOSYS, errno.EINVAL, errno.E2BIG})


class CloneUnavailable(Exception):
    """``clone3`` into a cgroup cannot be used here; fork and join instead."""


class _Binding:
    """``syscall`` and the interpreter's three fork steps, called with its lock held."""

    __slots__ = ("after_in_child", "after_in_parent", "before", "get_errno", "syscall")

    def __init__(self) -> None:
        import _ctypes

        class CLong(_ctypes._SimpleCData):  # type: ignore[type-arg]
            _type_ = "l"

        class Function(_ctypes.CFuncPtr):
            # PYTHONAPI: the call keeps the interpreter's lock, as os.fork() does around fork().
            _flags_ = (
                _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_PYTHONAPI | _ctypes.FUNCFLAG_USE_ERRNO
            )
            _restype_ = CLong

        class Program:
            """What a function is looked up in: the program, with libc and the interpreter."""

            _handle = _ctypes.dlopen(None, _ctypes.RTLD_LOCAL)  # type: ignore[arg-type]

        program = Program()
        self.syscall: Callable[..., int] = Function(("syscall", program))  # type: ignore[arg-type]
        self.before: Callable[[], object] = Function(("PyOS_BeforeFork", program))  # type: ignore[arg-type]
        self.after_in_child: Callable[[], object] = Function(("PyOS_AfterFork_Child", program))  # type: ignore[arg-type]
        self.after_in_parent: Callable[[], object] = Function(("PyOS_AfterFork_Parent", program))  # type: ignore[arg-type]
        self.get_errno: Callable[[], int] = _ctypes.get_errno


def _bind() -> _Binding | None:
    try:
        return _Binding()
    except (ImportError, AttributeError, TypeError, OSError):
        return None  # another Python, or no such function: fork and join


_binding = _bind()
_refused = _binding is None
_likely: bool | None = None


def clone_into_cgroup_likely() -> bool:
    """Whether :func:`fork_into_cgroup` is likely to work here (Linux 5.7+, no seccomp filter,
    no refusal seen): a guess, for what is worth preparing; the fork always tries."""
    global _likely  # noqa: PLW0603 - facts about this process, read once
    if _refused:
        return False
    if _likely is None:
        _likely = kernel_at_least(5, 7) and not _filtered()
    return _likely


def fork_into_cgroup(cgroup_fd: int) -> int:
    """Fork, the child born in the cgroup v2 ``cgroup_fd`` names; as :func:`os.fork`.

    :class:`CloneUnavailable` where it cannot be used (then never again here), :class:`OSError`
    for any other refusal: the caller may fork and join by writing instead."""
    global _refused  # noqa: PLW0603 - one fact about this process, learnt once
    binding = _binding
    if _refused or binding is None:
        raise CloneUnavailable("clone3 into a cgroup was refused here before")
    if len(os.listdir("/proc/self/task")) != 1:
        raise CloneUnavailable("more than one thread: only fork() keeps the C library whole")
    # struct clone_args up to its cgroup field (CLONE_ARGS_SIZE_VER2): flags, pidfd,
    # child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup.
    fields = (_CLONE_INTO_CGROUP, 0, 0, 0, int(signal.SIGCHLD), 0, 0, 0, 0, 0, cgroup_fd)
    arguments = b"".join(field.to_bytes(8, sys.byteorder) for field in fields)
    sys.audit("os.fork")
    binding.before()
    pid = binding.syscall(_SYS_CLONE3, arguments, len(arguments))
    if pid == 0:
        binding.after_in_child()
        return 0
    number = binding.get_errno()
    binding.after_in_parent()
    if pid > 0:
        return pid
    if number in _NEVER:
        _refused = True
        raise CloneUnavailable(os.strerror(number))
    raise OSError(number, os.strerror(number))


def kernel_at_least(major: int, minor: int) -> bool:
    """Whether this kernel's release is ``major.minor`` or later."""
    release = os.uname().release.split(".")
    try:
        return (int(release[0]), int(release[1].split("-")[0])) >= (major, minor)
    except (IndexError, ValueError):
        return False


def _filtered() -> bool:
    """Whether a seccomp filter stands in front of this process's system calls."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Seccomp:"):
                    return line.split()[1] != b"0"
    except (OSError, IndexError):
        return True
    return False

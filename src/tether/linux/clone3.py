"""A fork whose child is born in a cgroup (``clone3`` with ``CLONE_INTO_CGROUP``).

The command used to join its cgroup itself, between fork and exec, by
writing ``0`` to the cgroup's ``cgroup.procs``. That write takes a lock the
whole machine shares, and after a pause taking it first waits out an RCU
grace period: 5 to 20 ms on the 2-core machine, on the path of every launch
(:mod:`tether.linux.cgroup` says more). A process *born* in a cgroup v2
never migrates, so it never takes that lock for writing: Linux 5.7's
``clone3`` puts the child in the cgroup a descriptor names, as part of the
fork. It is also the tighter containment: the child never runs a
single instruction outside the cgroup.

Python has no ``clone3``, so :func:`fork_into_cgroup` does what
:func:`os.fork` does around its ``fork()``, with the system call in its
place: ``PyOS_BeforeFork`` (the interpreter's own locks, the ``before``
hooks of :func:`os.register_at_fork`), the call, then
``PyOS_AfterFork_Child`` or ``PyOS_AfterFork_Parent``, all with the global
interpreter lock held, as ``os.fork`` holds it. The functions are looked up
through ``_ctypes``, as :mod:`tether.linux.prctl` looks up ``prctl`` (``import
ctypes`` would cost about 3 ms on the path to every launch), once, when this
module is imported: the first lookup in a freshly forked child took about
5 ms here (0.1 ms in the process it was forked from, or a second one in the
same child), so a fork server that imports this module before it forks spares
every child that cost.

What it skips is the C library's ``fork()`` wrapper: ``pthread_atfork``
handlers, and the locks the wrapper takes so that a child of a
multi-threaded process finds malloc consistent. Neither matters in a
process with one thread, since no other thread can hold a lock at the
moment of the fork, and no library a supervisor loads registers such a
handler. So it is used only in a process with one thread (counted in
``/proc/self/task``), and otherwise raises :class:`CloneUnavailable`, as it
does where the kernel (older than 5.7) or a seccomp filter (some container
runtimes answer ``ENOSYS`` for ``clone3``) refuses it. The caller then forks
as before and the child joins by writing.
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

__all__ = ["CloneUnavailable", "clone_into_cgroup_likely", "fork_into_cgroup"]

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
    """Whether :func:`fork_into_cgroup` is likely to work in this process.

    Linux 5.7 or later, no seccomp filter (the ones container runtimes install
    may answer ``ENOSYS`` for ``clone3``), and no refusal seen yet. Only a
    guess, for what is worth preparing (the join's lock): the fork itself
    always tries, and falls back.
    """
    global _likely  # noqa: PLW0603 - facts about this process, read once
    if _refused:
        return False
    if _likely is None:
        _likely = _kernel_at_least(5, 7) and not _filtered()
    return _likely


def fork_into_cgroup(cgroup_fd: int) -> int:
    """Fork, the child born in the cgroup v2 whose directory ``cgroup_fd`` is; as :func:`os.fork`.

    Returns the child's pid in the parent and 0 in the child. Raises
    :class:`CloneUnavailable` where it cannot be used (more than one thread,
    no ``clone3`` into a cgroup: then never again in this process) and
    :class:`OSError` for any other refusal (``EAGAIN`` under ``ulimit -u``, a
    cgroup the kernel will not take the child into), in which case the caller
    may still fork and join by writing, and hear the reason from that.
    """
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


def _kernel_at_least(major: int, minor: int) -> bool:
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

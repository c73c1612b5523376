"""What a forked supervisor inherits that no request can carry: the caller's fingerprint.

The zygote (:mod:`tether.caller.zygote`) forks supervisors for a caller it was
started by, maybe long ago. Some of what a process inherits travels with each
request (the environment, the umask, the ignored signals, the soft resource
limits, the signal mask, the working directory and the stdio); the rest cannot
be set again in a forked child, or only with a privilege the caller gave up,
and a child that failed to take one on would be a command that can tell. So
the rest is *compared*: :func:`fingerprint` reads it from the launching
thread as one value, taken when the zygote starts and at every request, and
a request whose fingerprint differs gets a fresh zygote, which inherits all
of it by construction.

A fingerprint is read whole, and ``None`` if any part cannot be read (no
descriptor left): a part that cannot be compared is never taken for equal.
It costs some 75 microseconds, once per request.
"""

from __future__ import annotations

import errno
import os
import re
import resource

from tether.linux.prctl import io_priority, memory_deny_write_execute, timer_slack

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["RLIMITS", "Unreadable", "fingerprint"]

#: Every namespace ``/proc`` shows, those the caller's *children* will be in included
#: (``unshare(CLONE_NEWPID)`` moves only them).
_NAMESPACES: Final = (
    "cgroup",
    "ipc",
    "mnt",
    "net",
    "pid",
    "pid_for_children",
    "time",
    "time_for_children",
    "user",
    "uts",
)

#: Every resource limit this system has, by name (``RLIMIT_NOFILE``...).
RLIMITS: Final = tuple(name for name in dir(resource) if name.startswith("RLIMIT_"))


def fingerprint() -> tuple[object, ...] | None:
    """What a zygote must share with its caller to fork the caller's supervisors.

    Whatever a forked process cannot be handed in a request, read from the
    calling thread (several of these are a thread's own, and a spawned
    supervisor would have had the launching thread's): every line of its
    ``/proc`` status but those that are a process's own or travel with the
    request (:data:`_NOT_IDENTITY`), which covers the credentials (real,
    effective, saved and file system ids, the groups), every capability set,
    ``NoNewPrivs``, seccomp, the CPUs and memory nodes it may use, the
    speculation controls and any attribute a later kernel adds there; then
    the namespaces, the root directory, the cgroup, the LSM label, the
    personality, the nice value and scheduling policy, ``oom_score_adj``, the
    timer slack, the I/O priority, memory-deny-write-execute and the hard
    resource limits. Some could be
    set again in the forked child, and some only with a privilege the caller
    gave up; a fresh zygote inherits them all, by construction, and costs
    once per change what a spawned supervisor costs every time. ``None`` if
    they cannot be read now (no descriptor left); :class:`Unreadable` if they
    cannot be read for any other reason (a process that gave up root is no
    longer dumpable, and its own ``/proc/self`` refuses it): a zygote is then
    let go of (fail closed).
    """
    namespaces = []
    for name in _NAMESPACES:
        try:
            namespaces.append(os.readlink(f"/proc/thread-self/ns/{name}"))  # "mnt:[4026531841]"
        except FileNotFoundError:
            namespaces.append("")  # a namespace this kernel does not have
        except OSError as error:
            _raise_unless_short(error)
            return None
    try:
        status = _read("/proc/thread-self/status")
        personality = _read("/proc/thread-self/personality")
        oom_score_adj = _read("/proc/self/oom_score_adj")
        with open("/proc/self/cgroup", "rb") as cgroup:
            where = cgroup.read()
        root = _root()  # a chroot changes no namespace
        scheduling = (
            os.getpriority(os.PRIO_PROCESS, 0),  # this thread's
            os.sched_getscheduler(0),
            os.sched_getparam(0).sched_priority,
            timer_slack(),
            io_priority(),
            memory_deny_write_execute(),
        )
    except OSError as error:
        _raise_unless_short(error)
        return None
    hard = []
    for name in RLIMITS:
        try:
            hard.append(resource.getrlimit(getattr(resource, name))[1])
        except (OSError, ValueError):
            return None
    return (
        _NOT_IDENTITY.sub(b"", status),
        tuple(namespaces),
        root,
        where,
        _lsm_label(),
        personality,
        oom_score_adj,
        scheduling,
        tuple(hard),
    )


#: The lines of ``/proc/<tid>/status`` that are not a zygote's to match: each
#: process's own (its ids, its counters, its memory in use) or what travels
#: with every request (the umask, the signal mask and dispositions). Every
#: other line is, a line a later kernel adds included.
_NOT_IDENTITY: Final = re.compile(
    rb"^(?:Name|Umask|State|Tgid|Ngid|Pid|PPid|TracerPid|FDSize|NStgid|NSpid|NSpgid|NSsid"
    rb"|Kthread|CoreDumping|Threads|SigQ|SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt"
    rb"|voluntary_ctxt_switches|nonvoluntary_ctxt_switches|Vm\w*|Rss\w*|Hugetlb\w*):.*\n",
    re.MULTILINE,
)


def _root() -> tuple[int, int, bytes]:
    """The root directory as a mount sees it: its device, inode and *mount*.

    A device and an inode alone are shared by a bind mount of the same
    directory: a caller that ``chroot``s into a read-only bind mount of ``/``
    has the same root by them, where a fresh process would be confined to the
    read-only mount. The mount's id (``mnt_id`` in the descriptor's
    ``fdinfo``) tells the two apart.
    """
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        info = _read(f"/proc/self/fdinfo/{fd}")
    finally:
        os.close(fd)
    mount = _MOUNT_ID.search(info)
    if mount is None:
        raise OSError(errno.ENOENT, "no mnt_id in /proc/self/fdinfo")  # a kernel before 3.15
    return status.st_dev, status.st_ino, mount[1]


#: The mount's id in a descriptor's ``fdinfo``.
_MOUNT_ID: Final = re.compile(rb"^mnt_id:\s*(\d+)", re.MULTILINE)


class Unreadable(Exception):
    """The caller's identity cannot be read (``/proc/self`` refused, say): not its zygote's."""


#: What a lack of resources looks like: the identity cannot be read *now*.
_SHORT_OF: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def _raise_unless_short(error: OSError) -> None:
    """Return for want of a descriptor (this once); raise :class:`Unreadable` for anything else."""
    if error.errno not in _SHORT_OF:
        raise Unreadable(str(error)) from None


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


#: Whether this kernel has no LSM label to read (``EINVAL``): it never gains one.
_no_lsm = False


def _lsm_label() -> bytes | None:
    """The calling thread's LSM label (SELinux, AppArmor, Smack), ``None`` without one."""
    global _no_lsm  # noqa: PLW0603 - learnt once
    if _no_lsm:
        return None
    try:
        return _read("/proc/thread-self/attr/current")
    except OSError as error:
        if error.errno in (errno.EINVAL, errno.ENOENT):
            _no_lsm = True
        return None

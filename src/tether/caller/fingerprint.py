"""What a forked supervisor inherits that no request can carry: the caller's fingerprint.

Taken from the launching thread when the zygote starts and at every request (about
75 µs); a request whose fingerprint differs gets a fresh zygote, which inherits all of it
by construction. ``None`` if a part cannot be read now (never taken for equal); what it
covers and why: ``docs/architecture.md`` (Processes, "The command cannot tell").
"""

from __future__ import annotations

import errno
import os
import re
import resource

from tether.linux.prctl import io_priority, memory_deny_write_execute, timer_slack
from tether.linux.proctree import read_file
from tether.shared.signals import ignored_in

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["RLIMITS", "CallerState", "Unreadable", "caller_state", "fingerprint"]

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
_RLIMIT_NUMBERS: Final = tuple((name, int(getattr(resource, name))) for name in RLIMITS)


class CallerState:
    """One reading of the caller for a request: its fingerprint, and what the same reads say
    that travels with the request (so that ``/proc/thread-self/status`` is read once)."""

    __slots__ = ("identity", "ignored", "rlimits")

    def __init__(
        self,
        identity: tuple[object, ...],
        ignored: tuple[int, ...] | None,
        rlimits: dict[str, tuple[int, int]],
    ) -> None:
        #: What :func:`fingerprint` returns.
        self.identity = identity
        #: The ``SigIgn`` line of the same status, as ``ignored_now`` reads it; ``None``
        #: without one (then ask :func:`~tether.caller.request.ignored_now`).
        self.ignored = ignored
        #: Every resource limit, soft and hard, by name (one ``getrlimit`` each).
        self.rlimits = rlimits


def fingerprint() -> tuple[object, ...] | None:
    """What a zygote must share with its caller (``docs/architecture.md``); ``None`` if it
    cannot be read now, :class:`Unreadable` otherwise (the zygote is let go of)."""
    state = caller_state()
    return None if state is None else state.identity


def caller_state() -> CallerState | None:
    """:func:`fingerprint`, with what its reads also say for the request (:class:`CallerState`);
    ``None`` and :class:`Unreadable` as there."""
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
        status = read_file("/proc/thread-self/status")
        personality = read_file("/proc/thread-self/personality")
        oom_score_adj = read_file("/proc/self/oom_score_adj")
        where = read_file("/proc/self/cgroup")
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
    rlimits = {}
    hard = []
    read: dict[int, tuple[int, int]] = {}
    for name, number in _RLIMIT_NUMBERS:
        soft_and_hard = read.get(number)
        if soft_and_hard is None:  # once for two names of one limit (RLIMIT_OFILE, _NOFILE)
            try:
                soft_and_hard = read[number] = resource.getrlimit(number)
            except (OSError, ValueError):
                return None
        rlimits[name] = soft_and_hard
        hard.append(soft_and_hard[1])
    identity = (
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
    return CallerState(identity, ignored_in(status), rlimits)


#: The lines of ``/proc/<tid>/status`` not to match: each process's own, or what travels with
#: every request. Every other line is, one a later kernel adds included.
_NOT_IDENTITY: Final = re.compile(
    rb"^(?:Name|Umask|State|Tgid|Ngid|Pid|PPid|TracerPid|FDSize|NStgid|NSpid|NSpgid|NSsid"
    rb"|Kthread|CoreDumping|Threads|SigQ|SigPnd|ShdPnd|SigBlk|SigIgn|SigCgt"
    rb"|voluntary_ctxt_switches|nonvoluntary_ctxt_switches|Vm\w*|Rss\w*|Hugetlb\w*):.*\n",
    re.MULTILINE,
)


def _root() -> tuple[int, int, bytes]:
    """The root directory as a mount sees it: device, inode and *mount* id (a bind mount of
    ``/`` shares the first two)."""
    fd = os.open("/", os.O_PATH | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        info = read_file(f"/proc/self/fdinfo/{fd}")
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


#: Whether this kernel has no LSM label to read (``EINVAL``): it never gains one.
_no_lsm = False


def _lsm_label() -> bytes | None:
    """The calling thread's LSM label (SELinux, AppArmor, Smack), ``None`` without one."""
    global _no_lsm  # noqa: PLW0603 - learnt once
    if _no_lsm:
        return None
    try:
        return read_file("/proc/thread-self/attr/current")
    except OSError as error:
        if error.errno in (errno.EINVAL, errno.ENOENT):
            _no_lsm = True
        return None

"""cgroup v2: a fresh cgroup for one run, emptied with ``cgroup.kill``.

A process can leave its process group and its session, and a double fork
takes it out of its parent's care, but it cannot leave its cgroup without
write access to another cgroup's ``cgroup.procs``. So where the supervisor
may create a cgroup of its own, putting the command in one is the strongest
containment Linux offers: everything the command starts is born inside it,
``cgroup.procs`` lists what is still running, and writing ``1`` to
``cgroup.kill`` (Linux 5.14) SIGKILLs all of it in one step, including
processes forked while the kill is under way and processes the supervisor
cannot see or could not signal itself (a descendant that switched to another
uid, one in a PID namespace the supervisor's ``/proc`` does not show).

Nothing here is assumed. The supervisor's own cgroup comes from
``/proc/self/cgroup`` (the ``0::`` line, cgroup v2 only), the directory that
holds it from ``/proc/self/mountinfo`` (every ``cgroup2`` mount whose root
covers that path), and a candidate directory is believed only if its
``cgroup.procs`` lists the supervisor itself. The run's cgroup is created
*below* that one, named ``tether-<creator pid>-<random>`` (the creator is the
supervisor, or the zygote that forks it, and lives at least until the command
has joined: an empty cgroup whose creator is gone is stale); creating it,
finding ``cgroup.kill`` in it and opening its ``cgroup.procs`` must all
succeed, or :class:`CgroupUnavailable` says why and the caller falls back to
the sweep. The command is born in the cgroup where the kernel allows it
(:attr:`V2Cgroup.clone_descriptor`, :mod:`tether.linux.clone3`); otherwise it
joins the cgroup itself, between fork and exec, by writing ``0`` to the
``cgroup.procs`` descriptor it inherited (:meth:`V2Cgroup.join`). Either way
it runs nothing of its own outside the cgroup, and no child it starts can be
born outside it. That fork or write is the only step that can still fail
late (``EBUSY`` from the no-internal-process rule, a cgroup removed under our
feet); the supervisor then looks at the leader's
``/proc/<pid>/cgroup`` to learn which containment it really got.

Removal is ``rmdir``, bottom-up through any cgroups the command created below
its own, once nothing is running in them (a zombie does not count: the
kernel takes a task out of the cgroup when it exits, before it is reaped). A
supervisor that was SIGKILLed cannot remove its cgroup; the next supervisor
that creates one beside it removes stale ones whose creator is gone and which
are empty and unused (:func:`remove_stale`): the creator holds a shared
``flock`` on the ``cgroup.procs`` it keeps open for the join, which, unlike the
pid in the name, means the same in every PID namespace.

A join by writing waits, and :func:`warm_attach_lock` shortens the wait (a
command born in its cgroup never writes, and never waits). Every write of
a pid to a ``cgroup.procs`` takes one lock shared by the whole machine (the
kernel's ``cgroup_threadgroup_rwsem``), and taking it after a pause waits for
an RCU grace period first: 5 to 20 ms measured on the 2-core machine, the
largest single cost between a supervisor's start and its command's ``exec``.
The lock stays quick to take for about one grace period after its last user
lets go, and a second writer that arrives while the first is still waiting
shares that first one's wait. So a process with nothing better to do can take
the lock once, for nothing, by writing its own pid to its own cgroup's
``cgroup.procs`` (a move to where it already is), and a join that follows
within a grace period or so finds the lock ready: 0.1 to 2 ms instead of 10,
measured with the join 5 to 20 ms after the warm-up began. The kernel holds
its cgroup mutex through that wait, so a ``mkdir`` of a cgroup waits with it:
the run's cgroup must be made before the warm-up begins
(:mod:`tether.supervisor.run_cgroup` does both, in that order). It is only
ever a saving: on a kernel mounted with ``favordynmods`` the lock never
waits, and where the write is refused nothing was taken.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import stat
import time

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Final

__all__ = [
    "CgroupUnavailable",
    "JoinableCgroup",
    "V2Cgroup",
    "cgroup_of",
    "divisible",
    "enable_controllers",
    "holds_processes",
    "is_hierarchy_root",
    "is_run_cgroup",
    "kill_cgroup",
    "kill_run_cgroup",
    "make_cgroup",
    "own_cgroup",
    "probe_controllers",
    "read_usage",
    "read_words",
    "remove_stale",
    "remove_unused",
    "run_cgroup_name",
    "unescape",
    "warm_attach_lock",
    "write_plain",
]

#: The name of every cgroup tether creates: ``tether-<creator pid>-<8 hex digits>``.
_PREFIX: Final = "tether"

#: How many stale cgroups one supervisor tries to remove, at most.
_STALE_BOUND: Final = 32


class CgroupUnavailable(Exception):
    """No cgroup of the run's own could be made here; the message says why (``errno``, the
    kernel's, where it said one)."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    def __reduce__(self) -> tuple[object, ...]:
        return (CgroupUnavailable, (str(self), self.errno))


#: The digits of each base an escape may use.
_DIGITS: Final = {8: "01234567", 16: "0123456789abcdefABCDEF"}


def unescape(field: str, marker: str = "\\", width: int = 3, base: int = 8) -> str:
    """Undo escapes of one byte as ``marker`` and ``width`` digits in ``base``.

    mountinfo's octal escapes by default (``\\040`` for a space, and so on);
    a D-Bus address's ``%xx`` with ``"%", 2, 16``. Each escape is a *byte*: a
    path in UTF-8 escapes ``ü`` as two of them (``%c3%bc``), so the bytes are
    put together first and decoded once, as the file system's names are
    (:func:`os.fsdecode`). By hand, as everything here: no ``re`` on the path
    to a command's launch. A marker without its digits, or with digits past a
    byte, stays as it is.
    """
    digits = _DIGITS[base]
    first, *pieces = field.split(marker)
    if not pieces:
        return field
    unescaped = bytearray(os.fsencode(first))
    for piece in pieces:
        code = piece[:width]
        escaped = len(code) == width and all(digit in digits for digit in code)
        value = int(code, base) if escaped else 256
        if value < 256:
            unescaped.append(value)
            unescaped += os.fsencode(piece[width:])
        else:
            unescaped += os.fsencode(marker + piece)
    return os.fsdecode(bytes(unescaped))


def _creator_of(name: str) -> str | None:
    """The creator's pid in a cgroup name tether gave (``tether-<pid>-<8 hex>``), or None."""
    parts = name.split("-")
    if len(parts) != 3:
        return None
    prefix, pid, suffix = parts
    if prefix != _PREFIX or not (pid.isascii() and pid.isdigit()) or len(suffix) != 8:
        return None
    if not all(digit in "0123456789abcdef" for digit in suffix):
        return None
    return pid


def _cgroup2_mounts() -> list[tuple[str, str]]:
    """Return ``(root, mount point)`` of every cgroup v2 mount this process can see."""
    mounts: list[tuple[str, str]] = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
            for line in info:
                before, _, after = line.partition(" - ")
                fields = before.split()
                if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
                    mounts.append((unescape(fields[3]), unescape(fields[4])))
    except OSError:
        pass
    return mounts


def cgroup_of(pid: int | str) -> str | None:
    """Return the cgroup v2 path of ``pid`` (``/`` for the root), ``None`` if it has none."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="surrogateescape") as lines:
            for line in lines:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError:
        pass
    return None


def _lists(directory: str, pid: int) -> bool:
    try:
        with open(os.path.join(directory, "cgroup.procs"), "rb") as procs:
            return str(pid).encode() in procs.read().split()
    except OSError:
        return False


def _directories_of(path: str, mounts: list[tuple[str, str]]) -> list[str]:
    """The directory that would be cgroup ``path`` in each of ``mounts`` whose root covers it."""
    return [
        os.path.normpath(mount_point + "/" + path[len(root.rstrip("/")) :])
        for root, mount_point in mounts
        if root in ("/", path) or path.startswith(root + "/")
    ]


def own_cgroup() -> tuple[str, str]:
    """Return this process's cgroup v2 path and the directory that is that cgroup.

    Raise :class:`CgroupUnavailable` if there is no cgroup v2 hierarchy, or
    none of its mounts shows this process's cgroup.
    """
    path = cgroup_of("self")
    if path is None:
        raise CgroupUnavailable("no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")
    mounts = _cgroup2_mounts()
    if not mounts:
        raise CgroupUnavailable("no cgroup2 file system is mounted")
    me = os.getpid()
    for directory in _directories_of(path, mounts):
        if _lists(directory, me):
            return path, directory
    raise CgroupUnavailable(f"no cgroup2 mount shows this process's cgroup {path!r}")


def warm_attach_lock() -> None:
    """Take the kernel's cgroup-attach lock once, for nothing, so that a join soon after is quick.

    Writes this process's pid to its own cgroup's ``cgroup.procs``: a move to
    where it already is, which waits out the lock's grace period (see the
    module's docstring). Best effort and silent: only a process forked to do
    this and exit calls it, so not even an interrupt is let out. Unchecked by
    ``cgroup.procs`` (:func:`own_cgroup` reads it, which on a busy root cgroup
    is a long read): if the directory found is not this process's cgroup
    after all, the write moves the exiting process there, which harms nothing.
    """
    with contextlib.suppress(BaseException):
        path = cgroup_of("self")
        directories = [] if path is None else _directories_of(path, _cgroup2_mounts())
        if directories:
            fd = os.open(os.path.join(directories[0], "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)


def remove_stale(parent: str) -> int:
    """Remove empty cgroups tether made in ``parent`` whose creator is gone; return how many.

    A populated one is left alone (``rmdir`` refuses it): whatever runs in it
    belongs to someone, and tether does not kill what it did not start. So is
    one whose ``cgroup.procs`` someone still holds (:func:`_in_use`): the pid
    in its name is a pid in its creator's namespace, which may mean nobody (or
    somebody else) here, where the lock means the same in every namespace.
    """
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    stale = [
        name
        for name in names
        if (creator := _creator_of(name)) and not os.path.exists(f"/proc/{creator}")
    ]
    for name in stale[:_STALE_BOUND]:
        with contextlib.suppress(OSError):
            removed += remove_unused(os.path.join(parent, name))
    return removed


def _hold(procs_fd: int) -> None:
    """Mark a run's cgroup in use for as long as its ``cgroup.procs`` stays open anywhere.

    A shared ``flock`` on the descriptor the command joins through: it belongs
    to the open file, so every process that inherited the descriptor (the
    supervisor a zygote forked, the spare that made the cgroup ahead) holds it
    too, and the kernel lets go of it when the last of them closes it or dies.
    :func:`remove_stale` asks for it exclusively: unlike a pid, the answer holds
    across PID namespaces.
    """
    with contextlib.suppress(OSError):
        fcntl.flock(procs_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)


def remove_unused(directory: str) -> int:
    """Remove the empty cgroup ``directory`` unless its ``cgroup.procs`` is held (:func:`_hold`):
    1 if removed, 0 if not; :class:`OSError` if it cannot be looked at or removed."""
    fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # someone still holds it: a creator alive in another namespace
        os.rmdir(directory)
    finally:
        os.close(fd)
    return 1


def run_cgroup_name() -> str:
    """A fresh name for a run's cgroups: ``tether-<this process's pid>-<8 random hex digits>``."""
    return f"{_PREFIX}-{os.getpid()}-{os.urandom(4).hex()}"


#: Why a file may be missing from a new cgroup, where the kernel or its configuration decides.
_MISSING: Final = {
    "cgroup.kill": " (this kernel has no cgroup.kill: Linux 5.14 or later)",
    "memory.memsw.limit_in_bytes": " (swap accounting is off: boot with swapaccount=1)",
}


def make_cgroup(
    parent: str, name: str, files: Iterable[tuple[str, str]], *needed: str
) -> tuple[str, int]:
    """Make cgroup ``name`` in ``parent``, ``files`` written in order; its directory and join fd.

    ``needed``: files it must have besides. The descriptor is its
    ``cgroup.procs``, opened for the command's join. Raise
    :class:`CgroupUnavailable` saying why; a cgroup half made is removed first.
    """
    files = list(files)
    directory = os.path.join(parent, name)
    try:
        os.mkdir(directory, 0o755)
    except OSError as error:
        raise CgroupUnavailable(f"cannot create a cgroup in {parent}: {_why(error)}") from None
    try:
        for file in (*needed, *(file for file, _content in files)):
            if not os.path.exists(os.path.join(directory, file)):
                raise CgroupUnavailable(f"{directory} has no {file}{_MISSING.get(file, '')}")
        for file, content in files:
            _write_control(directory, file, content)
        try:
            fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError as error:
            raise CgroupUnavailable(
                f"cannot open {directory}/cgroup.procs: {_why(error)}"
            ) from None
        _hold(fd)
    except CgroupUnavailable:
        with contextlib.suppress(OSError):
            os.rmdir(directory)
        raise
    return directory, fd


class JoinableCgroup:
    """A cgroup made empty, its ``cgroup.procs`` held open for the command to join it."""

    __slots__ = ("_procs_fd", "directory")

    def __init__(self, directory: str, procs_fd: int) -> None:
        #: Its directory in its hierarchy's mount.
        self.directory = directory
        self._procs_fd: int | None = procs_fd

    def directories(self) -> list[str]:
        """This cgroup's directory and those of the cgroups below it, deepest first."""
        return [directory for directory, _sub, _files in os.walk(self.directory, topdown=False)]

    def discard(self) -> bool:
        """Remove this cgroup if nothing runs in it (nor below it); return whether it is gone."""
        self.close_join()
        for directory in self.directories():
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                continue
            except OSError:
                return False
        return True

    def join(self) -> None:
        """Move the calling process into this cgroup (run between fork and exec).

        Raise :class:`OSError` if the kernel refuses, with its errno and this
        cgroup's ``cgroup.procs`` as the file name (the step that failed). It
        is one ``write`` on a descriptor opened before the fork, so the child
        opens nothing itself.
        """
        procs = os.path.join(self.directory, "cgroup.procs")
        if self._procs_fd is None:
            raise OSError(errno.EBADF, "the cgroup was already joined", procs)
        try:
            os.write(self._procs_fd, b"0")
        except OSError as error:
            raise OSError(error.errno, error.strerror, procs) from None

    def intact(self) -> bool:
        """Whether this is still the cgroup made, and empty: a cgroup made ahead of its run
        (by the zygote's spare) may have been removed, or replaced by another of its name,
        meanwhile. Its ``cgroup.procs`` is still the file held open, and lists nobody."""
        if self._procs_fd is None:
            return False
        try:
            held = os.fstat(self._procs_fd)
            fd = os.open(os.path.join(self.directory, "cgroup.procs"), os.O_RDONLY | os.O_CLOEXEC)
            try:
                now = os.fstat(fd)
                listed = os.read(fd, 1)
            finally:
                os.close(fd)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino) and not listed

    @property
    def join_descriptor(self) -> int | None:
        """The descriptor :meth:`join` writes to (``None`` once closed): one a fork must keep."""
        return self._procs_fd

    def close_join(self) -> None:
        """Stop offering the cgroup to new processes (the supervisor's copy of the descriptor)."""
        if self._procs_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._procs_fd)
            self._procs_fd = None


class V2Cgroup(JoinableCgroup):
    """The cgroup of one run's command: created empty, joined by the command, removed after."""

    def __init__(self, path: str, directory: str, procs_fd: int) -> None:
        super().__init__(directory, procs_fd)
        #: The cgroup's path in the hierarchy, as ``/proc/<pid>/cgroup`` shows it.
        self.path = path
        # Held from the moment it is made, as cgroup.procs is: the command is born in it.
        self._directory_fd: int | None
        try:
            self._directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self._directory_fd = None  # the command joins by writing instead

    @classmethod
    def create(
        cls,
        controllers: tuple[str, ...] = (),
        files: dict[str, str] | None = None,
        *,
        name: str | None = None,
        beside: bool = False,
    ) -> V2Cgroup:
        """Create a fresh cgroup below this process's own; raise :class:`CgroupUnavailable`.

        With ``controllers`` (``memory``, ``cpu``, ``pids``), they must be
        enabled for it already (:func:`probe_controllers`: this process's
        cgroup is not tether's, and is never written to), and ``files`` (name to
        content: the limits) are written to it before anything can join it.
        ``name``: one from :func:`run_cgroup_name` (the run's cgroups in v1
        hierarchies share it); a fresh one by default. ``beside``: in the
        parent of this process's cgroup instead, beside it (a container whose
        entry point moved its processes into a leaf and enabled the
        controllers in the cgroup above: the parent holds no process).
        """
        own_path, own_directory = own_cgroup()
        if beside:
            if own_path in ("", "/"):
                raise CgroupUnavailable("the hierarchy's root has no cgroup above it")
            own_path, own_directory = os.path.dirname(own_path), os.path.dirname(own_directory)
        probe_controllers(own_directory, controllers)  # read only: never the caller's cgroup
        remove_stale(own_directory)
        name = name or run_cgroup_name()
        directory, fd = make_cgroup(own_directory, name, (files or {}).items(), "cgroup.kill")
        path = os.path.join(own_path, name)
        return cls(path, directory, fd)

    # -- joining: JoinableCgroup ----------------------------------------------

    @property
    def clone_descriptor(self) -> int | None:
        """This cgroup's directory, open: a child forked into it never has to join it
        (:func:`tether.linux.clone3.fork_into_cgroup`); ``None`` once closed."""
        return self._directory_fd

    def close_join(self) -> None:
        super().close_join()
        if self._directory_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._directory_fd)
            self._directory_fd = None

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` (alive or a zombie) belongs to this cgroup."""
        return cgroup_of(pid) == self.path

    # -- looking and killing --------------------------------------------------

    def pids(self) -> list[int]:
        """The processes running in this cgroup and below it (zombies are not listed)."""
        found: list[int] = []
        for directory in self.directories():
            try:
                with open(os.path.join(directory, "cgroup.procs"), "rb") as procs:
                    # A process this PID namespace cannot see would be listed as 0.
                    found.extend(pid for word in procs.read().split() if (pid := int(word)))
            except OSError:
                continue
        return found

    def populated(self) -> bool:
        """Whether anything still runs in this cgroup or below it."""
        try:
            with open(os.path.join(self.directory, "cgroup.events"), "rb") as events:
                return b"populated 1" in events.read()
        except FileNotFoundError:
            return False
        except OSError:
            return True

    def kill(self) -> bool:
        """SIGKILL everything in this cgroup and below it; return whether the kernel took it."""
        return kill_cgroup(self.directory)

    # -- removing -------------------------------------------------------------

    def remove(self, *, timeout: float = 1.0) -> bool:
        """Remove this cgroup (and any below it); return whether it is gone.

        If something still runs in it, it is killed and waited for, at most
        ``timeout`` seconds, on ``cgroup.events`` (the kernel notifies a
        change of ``populated``); a process stuck in the kernel can outlast
        that, and the cgroup is then left in place.
        """
        if self.discard():
            return True
        self.kill()
        self._wait_unpopulated(timeout)
        return self.discard()

    def _wait_unpopulated(self, timeout: float) -> None:
        try:
            events = os.open(os.path.join(self.directory, "cgroup.events"), os.O_RDONLY)
        except OSError:
            return
        try:
            poller = select.poll()
            poller.register(events, select.POLLPRI)
            end = time.monotonic() + timeout
            while self.populated():
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return
                poller.poll(remaining * 1000)
                # Re-arm: the notification is edge-triggered on a read of the file.
                os.pread(events, 4096, 0)
        finally:
            os.close(events)


def _write_control(directory: str, name: str, content: str) -> None:
    """Write one of the cgroup's own files (a limit), as it is: never created or followed."""
    path = os.path.join(directory, name)
    try:
        write_plain(path, content)
    except OSError as error:
        raise CgroupUnavailable(f"cannot write {content!r} to {path}: {_why(error)}") from None


def read_words(path: str) -> list[str]:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read().split()
    except OSError:
        return []


#: Why the kernel divides nothing below a cgroup that holds processes, and what would work.
HOLDS_PROCESSES: Final = (
    "it holds processes of its own, and the kernel divides resources only below a cgroup "
    "that holds none"
)


def is_hierarchy_root(directory: str) -> bool:
    """Whether ``directory`` is the root of its cgroup v2 hierarchy (the kernel's own root).

    The kernel gives every cgroup but its root a ``cgroup.type``; a cgroup
    namespace's root (a container's ``/``) has one, and is divided by the same
    rules as any other cgroup.
    """
    return not os.path.lexists(os.path.join(directory, "cgroup.type"))


def holds_processes(directory: str) -> bool:
    """Whether any process is a member of the cgroup at ``directory`` itself (not below).

    Read from ``cgroup.procs``; a process this PID namespace cannot see is
    listed as ``0`` and counts. An unreadable list counts as holding some.
    """
    try:
        fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        return bool(os.read(fd, 64).split())
    except OSError:
        return True
    finally:
        os.close(fd)


def divisible(directory: str) -> None:
    """Whether the kernel lets a domain cgroup below ``directory`` take controllers; why not.

    Read only. Not where ``directory`` holds processes and is not the
    hierarchy's root (the "no internal processes" rule: the kernel refuses a
    domain controller there with ``EBUSY``, and *accepts* a threaded one,
    ``pids`` or ``cpu``, by turning the cgroup into a thread root for good, so
    the refusal cannot be left to the kernel), nor where it is part of a thread
    subtree already (its ``cgroup.type`` is not ``domain``). Raise
    :class:`CgroupUnavailable` saying which.
    """
    if is_hierarchy_root(directory):
        return
    kind = " ".join(read_words(os.path.join(directory, "cgroup.type"))) or "domain"
    if kind != "domain":
        raise CgroupUnavailable(
            f"{directory} is a {kind!r} cgroup (a thread subtree), below which the kernel "
            "enables no memory controller and lets no process join a new cgroup"
        )
    if holds_processes(directory):
        raise CgroupUnavailable(f"the cgroup {directory} cannot be divided: {HOLDS_PROCESSES}")


def _offered(directory: str, controllers: tuple[str, ...]) -> None:
    """Whether the cgroup v2 hierarchy offers ``controllers`` to ``directory``; why not."""
    available = set(read_words(os.path.join(directory, "cgroup.controllers")))
    absent = [name for name in controllers if name not in available]
    if absent:
        listed = " ".join(sorted(available)) or "none"
        raise CgroupUnavailable(
            f"the cgroup v2 hierarchy offers no {' or '.join(absent)} controller to "
            f"{directory} (it offers: {listed}); on a machine that also mounts cgroup v1, "
            "the controller may be bound to a v1 hierarchy"
        )


def probe_controllers(directory: str, controllers: tuple[str, ...]) -> None:
    """Whether a new cgroup below ``directory`` gets ``controllers``; why not. Read only.

    A controller reaches a cgroup only if its parent lists it in
    ``cgroup.subtree_control``. tether never writes there in a cgroup it did
    not make (the caller's cgroup, a service's, a session's): it only looks.
    Refused, each with its own remedy: a controller the cgroup v2 hierarchy
    lacks (``cgroup.controllers``: on a machine that also mounts cgroup v1,
    it is bound there); a cgroup that cannot be divided (:func:`divisible`);
    a controller its manager did not enable. Raise :class:`CgroupUnavailable`.
    """
    if not controllers:
        return
    _offered(directory, controllers)
    divisible(directory)
    enabled = set(read_words(os.path.join(directory, "cgroup.subtree_control")))
    missing = [name for name in controllers if name not in enabled]
    if missing:
        request = " ".join(f"+{name}" for name in missing)
        raise CgroupUnavailable(
            f"the {' and '.join(missing)} controller(s) are not enabled below {directory}, "
            "and tether changes no cgroup it did not make (whoever manages it can: "
            f"echo {request!r} > {os.path.join(directory, 'cgroup.subtree_control')})"
        )


def enable_controllers(directory: str, controllers: tuple[str, ...]) -> None:
    """Make ``controllers`` available to the cgroups below ``directory``, or say why not.

    Only ever for a cgroup that is tether's own to divide (a scope a service
    manager made for the supervisor and delegated to it); anywhere else,
    :func:`probe_controllers` looks without writing. Checked first as it
    does (a controller the hierarchy lacks; a cgroup that holds processes,
    read from ``cgroup.procs`` rather than left to the kernel's ``EBUSY``,
    which a threaded controller never gets), then ``+memory`` (and so on) is
    written to ``cgroup.subtree_control`` for what is missing. Raise
    :class:`CgroupUnavailable` with the reason.
    """
    enabled = set(read_words(os.path.join(directory, "cgroup.subtree_control")))
    missing = tuple(name for name in controllers if name not in enabled)
    if not missing:
        return
    _offered(directory, missing)
    divisible(directory)
    request = " ".join(f"+{name}" for name in missing)
    try:
        write_plain(os.path.join(directory, "cgroup.subtree_control"), request)
    except OSError as error:
        why = HOLDS_PROCESSES if error.errno == errno.EBUSY else _why(error)
        raise CgroupUnavailable(
            f"cannot enable the {' and '.join(missing)} controller(s) below {directory}: {why}"
        ) from None


def write_plain(path: str, content: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, content.encode())
    finally:
        os.close(fd)


def _keyed(path: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``cpu.stat``, ``memory.events``) as numbers by key."""
    values: dict[str, int] = {}
    words = read_words(path)
    for key, value in zip(words[::2], words[1::2], strict=False):
        if value.isdecimal():
            values[key] = int(value)
    return values


def read_usage(directory: str) -> dict[str, int | float | None]:
    """What the whole tree in the cgroup at ``directory`` used, as the kernel counted it.

    CPU time from ``cpu.stat`` (always there in cgroup v2), peak memory from
    ``memory.peak`` (Linux 5.19, with the memory controller), OOM kills from
    ``memory.events`` (hierarchical: the cgroups the command made below count
    too) with how often the tree hit its limit (``max``), and how often a
    fork was refused at ``pids.max`` from ``pids.events``. Read once the tree
    is gone, before the cgroup is removed; ``None`` for what this kernel or
    this cgroup does not count.
    """
    cpu = _keyed(os.path.join(directory, "cpu.stat"))
    memory_events = _keyed(os.path.join(directory, "memory.events"))
    pids_events = _keyed(os.path.join(directory, "pids.events"))
    peak = read_words(os.path.join(directory, "memory.peak"))

    def seconds(key: str) -> float | None:
        return None if key not in cpu else round(cpu[key] / 1e6, 6)

    return {
        "cpu_seconds": seconds("usage_usec"),
        "cpu_user_seconds": seconds("user_usec"),
        "cpu_system_seconds": seconds("system_usec"),
        "memory_peak_bytes": int(peak[0]) if peak and peak[0].isdecimal() else None,
        "oom_kills": memory_events.get("oom_kill"),
        "memory_limit_hits": memory_events.get("max"),
        "pids_max_refusals": pids_events.get("max"),
    }


def kill_cgroup(directory: str) -> bool:
    """SIGKILL everything in the cgroup at ``directory`` and below; whether the kernel took it.

    One write of ``1`` to its ``cgroup.kill``: the kernel applies it to every
    member at once, forks in flight included. The file is opened as it is in
    every cgroup, never created, truncated or followed through a link: a
    directory that is no cgroup (a caller told a wrong one) is not written to.
    """
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(os.path.join(directory, "cgroup.kill"), flags)
    except OSError:
        return False
    try:
        os.write(fd, b"1")
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _why(error: OSError) -> str:
    return error.strerror or str(error)


def _own_directories() -> list[str]:
    """This process's own cgroup directory in every mounted hierarchy, v2 and v1.

    From ``/proc/self/cgroup`` (``0::path`` for v2, ``N:controllers:path`` for
    v1) and the ``cgroup2``/``cgroup`` mounts of ``/proc/self/mountinfo``
    (a v1 mount is matched by the controllers its options name).
    """
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="surrogateescape") as lines:
            memberships = [line.rstrip("\n").split(":", 2) for line in lines]
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
            mounts = info.read().splitlines()
    except OSError:
        return []
    v2: list[tuple[str, str]] = []
    v1: list[tuple[set[str], str, str]] = []
    for line in mounts:
        before, _, after = line.partition(" - ")
        fields, kind = before.split(), after.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        root, point = unescape(fields[3]), unescape(fields[4])
        if kind[0] == "cgroup2":
            v2.append((root, point))
        elif kind[0] == "cgroup":
            v1.append((set(kind[2].split(",")), root, point))
    found: list[str] = []
    for membership in memberships:
        if len(membership) != 3:
            continue
        _, controllers, path = membership
        if not controllers:
            found += _directories_of(path, v2)
            continue
        wanted = set(controllers.split(","))
        found += _directories_of(path, [(r, m) for opts, r, m in v1 if wanted <= opts])
    return found


def is_run_cgroup(directory: str) -> bool:
    """Whether ``directory`` is a cgroup tether makes for a run, where it makes them.

    Named ``tether-<creator pid>-<8 hex digits>`` and directly below this
    process's own cgroup in a mounted hierarchy (v2 or v1): where the run's
    supervisor (or the zygote that forked it, both in their caller's cgroup)
    made it; or directly in the user's systemd scope the supervisor asked
    for (:mod:`tether.linux.systemd_scope`): a scope named after it
    (``<name>.scope``), in a cgroup v2 mount, delegated to this user (it
    owns the scope's directory: the user's, or root's for the system's
    manager's scope). The caller's fallback
    kills nothing else, whatever a status message said: a forged ``started``
    cannot make it kill another cgroup.
    """
    if not os.path.isabs(directory) or os.path.normpath(directory) != directory:
        return False
    name = os.path.basename(directory)
    if _creator_of(name) is None or os.path.islink(directory):
        return False
    parent = os.path.dirname(directory)
    own = _own_directories()
    # Below this process's cgroup; beside it, in its parent (``V2Cgroup.create(beside=True)``).
    above = {os.path.dirname(each) for each in own}
    return parent in own or parent in above or _in_own_scope(parent, name)


def _in_own_scope(scope: str, name: str) -> bool:
    """Whether ``scope`` is the systemd scope made for run cgroup ``name``, and this user's.

    A user's manager leaves the scope it delegated owned by that user; the
    system's manager, which makes root's, leaves it root's.
    """
    if os.path.basename(scope) != f"{name}.scope":
        return False
    if not any(scope.startswith(point.rstrip("/") + "/") for _root, point in _cgroup2_mounts()):
        return False
    try:
        status = os.lstat(scope)
    except OSError:
        return False
    return stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid()


#: How many rounds of SIGKILL a cgroup v1 directory gets before it is given up on.
_V1_ROUNDS: Final = 50


def kill_run_cgroup(directory: str) -> bool:
    """SIGKILL everything in one of tether's run cgroups; whether it is empty (or gone) after.

    ``cgroup.kill`` where there is one (cgroup v2). A cgroup v1 directory has
    none: every process its ``cgroup.procs`` (and those of the cgroups below
    it) lists is SIGKILLed through a pidfd, and again, until the lists are
    empty, at most :data:`_V1_ROUNDS` rounds, each waiting (at most a tenth
    of a second) for the processes killed to exit. Only call it for a
    directory :func:`is_run_cgroup` accepts.
    """
    if os.path.exists(os.path.join(directory, "cgroup.kill")):
        return kill_cgroup(directory)
    for _ in range(_V1_ROUNDS):
        pidfds = _kill_listed(directory)
        if not pidfds:
            return True
        try:
            with contextlib.suppress(OSError):
                poller = select.poll()
                for pidfd in pidfds:
                    poller.register(pidfd, select.POLLIN)
                end = time.monotonic() + 0.1
                while len(poller.poll(max(0.0, end - time.monotonic()) * 1000)) < len(pidfds):
                    if time.monotonic() >= end:
                        break
        finally:
            for pidfd in pidfds:
                os.close(pidfd)
    return False


def _kill_listed(directory: str) -> list[int]:
    """SIGKILL what the v1 cgroup at ``directory`` and those below it list; their pidfds.

    Each pid is opened (a pidfd) and only then checked to be listed still: a
    pid that exited between the read and the open may already be someone
    else's, and that one is not in the list.
    """
    import signal

    killed: list[int] = []
    for below, _subdirectories, _files in os.walk(directory, topdown=False):
        procs = os.path.join(below, "cgroup.procs")
        opened: dict[str, int] = {}
        for word in read_words(procs):
            if word.isdecimal() and word != "0" and word not in opened:
                with contextlib.suppress(OSError):
                    opened[word] = os.pidfd_open(int(word))
        still = set(read_words(procs))
        for word, pidfd in opened.items():
            try:
                if word not in still:
                    raise ProcessLookupError
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                os.close(pidfd)
                continue
            killed.append(pidfd)
    return killed

"""cgroup v2: a fresh cgroup for one run, emptied with ``cgroup.kill``; what finds, makes,
divides, reads and removes cgroups for the other cgroup modules.

Nothing is assumed: this process's cgroup comes from ``/proc/self/cgroup`` and
``/proc/self/mountinfo``, a directory is believed only if its ``cgroup.procs``
lists this process. A run's cgroup is named ``tether-<creator pid>-<8 hex>``,
held (a shared ``flock`` on its ``cgroup.procs``) while its creator may still
use it, and removed by the next run once empty and unheld. Why each step, and
the join's lock :func:`warm_attach_lock` readies: ``docs/containment.md``
(rung 3).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import stat
import time

from tether.linux.proctree import read_file

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
    "lists",
    "make_cgroup",
    "own_cgroup",
    "probe_controllers",
    "read_keyed",
    "read_text",
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
    """Undo escapes of one byte as ``marker`` and ``width`` digits in ``base``: mountinfo's
    octal ones by default, a D-Bus address's ``%xx`` with ``"%", 2, 16``. The bytes are put
    together, then decoded once; a marker without its digits stays as it is.
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


def read_text(path: str) -> str:
    """The text of a small file (``/proc/self/cgroup``, ``mountinfo``); "" if unreadable. Its
    readers split lines with ``str.splitlines``, which ends a line at a carriage return as a
    text file would."""
    try:
        return read_file(path).decode("utf-8", "surrogateescape")
    except OSError:
        return ""


def _cgroup2_mounts() -> list[tuple[str, str]]:
    """Return ``(root, mount point)`` of every cgroup v2 mount this process can see."""
    mounts: list[tuple[str, str]] = []
    for line in read_text("/proc/self/mountinfo").splitlines():
        before, _, after = line.partition(" - ")
        fields = before.split()
        if after.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            mounts.append((unescape(fields[3]), unescape(fields[4])))
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


def lists(directory: str, pid: int) -> bool:
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


#: :func:`own_cgroup`'s last answer, by the texts it was found from (see there): one entry.
_own: dict[tuple[str, str], tuple[str, str]] = {}


def own_cgroup() -> tuple[str, str]:
    """This process's cgroup v2 path and the directory that is that cgroup, or
    :class:`CgroupUnavailable` (no v2 hierarchy, or no mount shows it).

    The directory is believed once its ``cgroup.procs`` lists this process (a read of every
    pid in it: all of a host's, at a hierarchy's root). That answer is kept with the texts of
    ``/proc/self/cgroup`` and ``/proc/self/mountinfo`` it came from, both read again at each
    call: while neither changes (the process was not moved, nothing was mounted), it is the
    same directory, and a child forked since (the zygote's spare) is in it too.
    """
    memberships = read_text("/proc/self/cgroup")
    mountinfo = read_text("/proc/self/mountinfo")
    kept = _own.get((memberships, mountinfo))
    if kept is not None:
        return kept
    path = next((line[3:] for line in memberships.splitlines() if line.startswith("0::")), None)
    if path is None:
        raise CgroupUnavailable("no cgroup v2 hierarchy (no 0:: line in /proc/self/cgroup)")
    mounts = _cgroup2_mounts()
    if not mounts:
        raise CgroupUnavailable("no cgroup2 file system is mounted")
    me = os.getpid()
    for directory in _directories_of(path, mounts):
        if lists(directory, me):
            _own.clear()
            _own[memberships, mountinfo] = path, directory
            return path, directory
    raise CgroupUnavailable(f"no cgroup2 mount shows this process's cgroup {path!r}")


def warm_attach_lock() -> None:
    """Take the kernel's cgroup-attach lock once, for nothing (this process's pid to its own
    ``cgroup.procs``), so that a join soon after is quick. Silent, unchecked: only a child forked
    for it calls it (``docs/containment.md``, "The join's lock").
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
    """Remove the empty, unheld cgroups tether made in ``parent`` whose creator is gone;
    how many. A populated or held one is left alone (:func:`remove_unused`).
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
    """Mark a run's cgroup in use while its ``cgroup.procs`` is open anywhere (shared ``flock``)."""
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
    """Make cgroup ``name`` in ``parent``, ``files`` written in order (``needed``: files it
    must have besides); its directory and its ``cgroup.procs`` opened for the join.
    :class:`CgroupUnavailable` saying why, nothing left made.
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

    def pids(self) -> list[int]:
        """The processes in this cgroup and below it (zombies are not listed; one this PID
        namespace cannot see, listed as 0, neither)."""
        found: list[int] = []
        for directory in self.directories():
            words = read_words(os.path.join(directory, "cgroup.procs"))
            found.extend(pid for word in words if word.isdecimal() and (pid := int(word)))
        return found

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
        """Move the calling process into this cgroup (between fork and exec: one ``write`` on a
        descriptor opened before the fork); :class:`OSError` naming its ``cgroup.procs``.
        """
        procs = os.path.join(self.directory, "cgroup.procs")
        if self._procs_fd is None:
            raise OSError(errno.EBADF, "the cgroup was already joined", procs)
        try:
            os.write(self._procs_fd, b"0")
        except OSError as error:
            raise OSError(error.errno, error.strerror, procs) from None

    def intact(self) -> bool:
        """Whether this is still the cgroup made (its ``cgroup.procs`` the file held open), and
        empty: one made ahead of its run may have been removed or replaced meanwhile.
        """
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
        """A fresh cgroup below this process's own (``beside``: in its parent), ``controllers``
        enabled for it already (read only: :func:`probe_controllers`), ``files`` (the limits)
        written before anything can join; :class:`CgroupUnavailable` if not.
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

    @property
    def clone_descriptor(self) -> int | None:
        """This cgroup's directory, open, for a child to be born in; ``None`` once closed."""
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

    def remove(self, *, timeout: float = 1.0) -> bool:
        """Remove this cgroup (and any below it); whether it is gone. What still runs in it
        is killed and waited for on ``cgroup.events``, ``timeout`` seconds at most.
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
    """The words of a cgroup file (ASCII), ``[]`` if it cannot be read."""
    try:
        return read_file(path).decode("ascii", "replace").split()
    except OSError:
        return []


#: Why the kernel divides nothing below a cgroup that holds processes, and what would work.
HOLDS_PROCESSES: Final = (
    "it holds processes of its own, and the kernel divides resources only below a cgroup "
    "that holds none"
)


def is_hierarchy_root(directory: str) -> bool:
    """Whether ``directory`` is its hierarchy's kernel root (it alone has no ``cgroup.type``)."""
    return not os.path.lexists(os.path.join(directory, "cgroup.type"))


def holds_processes(directory: str) -> bool:
    """Whether any process is a member of the cgroup at ``directory`` itself (an
    unreadable list, or one this namespace cannot see, counts as some).
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
    """Whether a domain cgroup below ``directory`` could take controllers; read only,
    :class:`CgroupUnavailable` saying why not (a thread subtree; processes in it, where the
    kernel would refuse a domain controller and turn a threaded one into a thread root).
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
    """Whether a new cgroup below ``directory`` gets ``controllers``; read only, never
    written in a cgroup tether did not make. :class:`CgroupUnavailable` with the remedy.
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
    """Enable ``controllers`` below ``directory``, tether's own to divide (a delegated
    scope, its own leaf's parent), checked first as :func:`probe_controllers` checks;
    :class:`CgroupUnavailable` saying why not.
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


def read_keyed(path: str) -> dict[str, int]:
    """A flat-keyed cgroup file (``cpu.stat``, ``memory.events``) as numbers by key."""
    values: dict[str, int] = {}
    words = read_words(path)
    for key, value in zip(words[::2], words[1::2], strict=False):
        if value.isdecimal():
            values[key] = int(value)
    return values


def read_usage(directory: str) -> dict[str, int | float | None]:
    """What the tree in the cgroup at ``directory`` used, as the kernel counted it
    (``cpu.stat``, ``memory.peak``, ``memory.events``, ``pids.events``); ``None`` for what it
    does not count. Read once the tree is gone, before removal.
    """
    cpu = read_keyed(os.path.join(directory, "cpu.stat"))
    memory_events = read_keyed(os.path.join(directory, "memory.events"))
    pids_events = read_keyed(os.path.join(directory, "pids.events"))
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
    """SIGKILL everything in the cgroup at ``directory`` and below (one write to its
    ``cgroup.kill``, never created or followed); whether the kernel took it.
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
    """This process's own cgroup directory in every mounted hierarchy, v2 and v1 (a v1
    mount matched by the controllers its options name).
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
    """Whether ``directory`` is one of tether's run cgroups where tether makes them: named
    ``tether-<pid>-<8 hex>``, below (or beside) this process's own cgroup in a mounted
    hierarchy, or in the systemd scope made for it. A forged status cannot name another.
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
    """Whether ``scope`` is the systemd scope made for run cgroup ``name``, and owned by
    this user (the user's manager leaves it the user's; the system's, root's).
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
    """SIGKILL everything in one of tether's run cgroups (:func:`is_run_cgroup`); whether
    it is empty after. ``cgroup.kill`` on v2; on v1, each listed pid through a pidfd, again,
    :data:`_V1_ROUNDS` rounds at most.
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
    """SIGKILL what the v1 cgroup at ``directory`` and those below list, each pidfd opened
    before its pid is checked to be listed still; the pidfds.
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

"""cgroup v1: the run's own cgroup in one v1 hierarchy, for limits on hybrid and legacy hosts.

A v1 hierarchy is found as the mount whose options name the controller, this
process's cgroup in it from ``/proc/self/cgroup``, believed only if its
``cgroup.procs`` lists this process; the run's cgroup is made below it, with
the run's name, limits written before the join. v1 has no ``cgroup.kill`` and
no ``cgroup.events``: ``docs/containment.md`` ("Limits") says what stands in.
The pure half (:func:`parse_v1_mounts`, :func:`parse_v1_paths`) reads text.
"""

from __future__ import annotations

import contextlib
import os

from tether.linux.cgroup import (
    JoinableCgroup,
    lists,
    make_cgroup,
    read_keyed,
    read_text,
    remove_stale,
    unescape,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "Hierarchy",
    "V1Cgroup",
    "find_hierarchies",
    "parse_v1_mounts",
    "parse_v1_paths",
    "read_usage_v1",
]


class Hierarchy:
    """One mounted cgroup v1 hierarchy: its controllers, and this process's cgroup in it."""

    __slots__ = ("controllers", "directory", "mount_point", "path")

    def __init__(
        self, controllers: frozenset[str], mount_point: str, path: str, directory: str
    ) -> None:
        #: The controllers bound to it (``memory``; ``cpu`` and ``cpuacct`` when co-mounted).
        self.controllers = controllers
        self.mount_point = mount_point
        #: This process's cgroup in it, as ``/proc/self/cgroup`` names it.
        self.path = path
        #: That cgroup's directory.
        self.directory = directory

    def __repr__(self) -> str:
        return f"Hierarchy({sorted(self.controllers)}, {self.directory!r})"


#: A v1 mount's super options that name no controller (``release_agent=`` and other
#: ``key=value`` options are left out as well, but ``name=``).
_MOUNT_FLAGS = frozenset(
    {
        "rw",
        "ro",
        "seclabel",
        "xattr",
        "noprefix",
        "clone_children",
        "cpuset_v2_mode",
        "favordynmods",
    }
)


def parse_v1_mounts(text: str) -> list[tuple[frozenset[str], str, str]]:
    """``(controllers, root, mount point)`` of every cgroup v1 mount in mountinfo ``text``
    (controllers: the super options but mount flags such as ``rw`` or SELinux's ``seclabel``;
    named hierarchies kept as they are).
    """
    mounts: list[tuple[frozenset[str], str, str]] = []
    for line in text.splitlines():
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        options = frozenset(
            option
            for option in tail[2].split(",")
            if option not in _MOUNT_FLAGS and ("=" not in option or option.startswith("name="))
        )
        mounts.append((options, unescape(fields[3]), unescape(fields[4])))
    return mounts


def parse_v1_paths(text: str) -> dict[frozenset[str], str]:
    """This process's cgroup per v1 hierarchy in ``/proc/self/cgroup`` ``text``, by
    controllers (``ID:CONTROLLERS:PATH``; the v2 line and junk left out).
    """
    paths: dict[frozenset[str], str] = {}
    for line in text.splitlines():
        number, colon, rest = line.partition(":")
        controllers, colon2, path = rest.partition(":")
        if not (colon and colon2 and controllers and number.isdecimal()) or number == "0":
            continue
        paths[frozenset(controllers.split(","))] = path
    return paths


#: :func:`find_hierarchies`'s last checked answer for this process, by the texts it was
#: found from (as :func:`~tether.linux.cgroup.own_cgroup` keeps its own).
#: One entry.
_checked: dict[tuple[str, str], tuple[Hierarchy, ...]] = {}
#: Its last unchecked answer (any pid's), with the texts it was found from: theirs alone.
_unchecked: dict[tuple[str, str], tuple[Hierarchy, ...]] = {}


def find_hierarchies(pid: int | str = "self", *, check: bool = True) -> list[Hierarchy]:
    """Every cgroup v1 hierarchy this process is in, with its cgroup's directory
    (``check``: believed only if its ``cgroup.procs`` lists this process).

    Checked, this process's answer is kept with the texts of ``/proc/self/cgroup`` and
    ``/proc/self/mountinfo``, read again at each call: the same while neither changes, in a
    child forked since too (the checks read every pid of each hierarchy's cgroup).
    """
    memberships = read_text(f"/proc/{pid}/cgroup")
    mountinfo = read_text("/proc/self/mountinfo")
    # Unchecked, the answer is the two texts' alone (an API launch with limits asks it each time).
    kept_by = (_checked if pid == "self" else None) if check else _unchecked
    kept = None if kept_by is None else kept_by.get((memberships, mountinfo))
    if kept is not None:
        return list(kept)
    paths = parse_v1_paths(memberships)
    found: list[Hierarchy] = []
    me = os.getpid()
    for controllers, root, mount_point in parse_v1_mounts(mountinfo):
        path = paths.get(controllers)
        if path is None or not (root in ("/", path) or path.startswith(root + "/")):
            continue
        directory = os.path.normpath(mount_point + "/" + path[len(root.rstrip("/")) :])
        if check and not lists(directory, me):
            continue
        found.append(Hierarchy(controllers, mount_point, path, directory))
    if kept_by is not None:
        kept_by.clear()
        kept_by[memberships, mountinfo] = tuple(found)
    return found


class V1Cgroup(JoinableCgroup):
    """The run's cgroup in one v1 hierarchy: made with its limits, joined, read, removed."""

    __slots__ = ("_tasks_fd", "controllers", "path")

    def __init__(self, controllers: frozenset[str], path: str, directory: str, fd: int) -> None:
        super().__init__(directory, fd)
        self.controllers = controllers
        #: Its path in the hierarchy, as ``/proc/<pid>/cgroup`` shows it.
        self.path = path
        #: Its ``tasks``, for the join (:meth:`join`); ``None``: the join writes ``cgroup.procs``.
        self._tasks_fd: int | None = None
        with contextlib.suppress(OSError):
            self._tasks_fd = os.open(os.path.join(directory, "tasks"), os.O_WRONLY | os.O_CLOEXEC)

    def join(self) -> None:
        """Move the calling thread, a child's only one between fork and exec, in through
        ``tasks``: no machine-wide lock (``docs/containment.md``); a refusal is tried again,
        and said, on ``cgroup.procs``."""
        if self._tasks_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._tasks_fd, b"0")
                return
        super().join()

    @property
    def tasks_descriptor(self) -> int | None:
        """The descriptor of ``tasks`` the join writes to: one a fork must keep."""
        return self._tasks_fd

    def close_join(self) -> None:
        if self._tasks_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._tasks_fd)
            self._tasks_fd = None
        super().close_join()

    @classmethod
    def create(
        cls,
        hierarchy: Hierarchy,
        name: str,
        files: Sequence[tuple[str, str]],
        *,
        sweep: bool = True,
    ) -> V1Cgroup:
        """Make ``name`` below this process's cgroup in ``hierarchy``, ``files`` written in
        order; :class:`~tether.linux.cgroup.CgroupUnavailable` saying why, nothing left made.
        ``sweep``: remove stale cgroups there first (``False``: the caller just did).
        """
        if sweep:
            remove_stale(hierarchy.directory)
        directory, fd = make_cgroup(hierarchy.directory, name, files)
        path = hierarchy.path.rstrip("/") + "/" + name
        return cls(hierarchy.controllers, path, directory, fd)

    def holds(self, pid: int | str) -> bool:
        """Whether ``pid`` (alive or a zombie) is in this cgroup."""
        return parse_v1_paths(read_text(f"/proc/{pid}/cgroup")).get(self.controllers) == self.path


def _number(text: str) -> int | None:
    word = text.strip()
    return int(word) if word.isdecimal() else None


def read_usage_v1(cgroups: Iterable[V1Cgroup]) -> dict[str, int | float | None]:
    """What the tree used as the v1 hierarchies counted it (``cpuacct.usage*``,
    ``memory.max_usage_in_bytes``, ``memory.failcnt``, ``memory.oom_control``, ``pids.events``);
    ``None`` for what none counts. Read once the tree is gone, before removal.
    """
    usage: dict[str, int | float | None] = {}
    for cgroup in cgroups:
        at = cgroup.directory
        if "cpuacct" in cgroup.controllers:
            for key, file in (
                ("cpu_seconds", "cpuacct.usage"),
                ("cpu_user_seconds", "cpuacct.usage_user"),
                ("cpu_system_seconds", "cpuacct.usage_sys"),
            ):
                nanoseconds = _number(read_text(os.path.join(at, file)))
                usage[key] = None if nanoseconds is None else round(nanoseconds / 1e9, 6)
        if "memory" in cgroup.controllers:
            control = read_keyed(os.path.join(at, "memory.oom_control"))
            peak = _number(read_text(os.path.join(at, "memory.max_usage_in_bytes")))
            usage["memory_peak_bytes"] = peak
            usage["memory_limit_hits"] = _number(read_text(os.path.join(at, "memory.failcnt")))
            usage["oom_kills"] = control.get("oom_kill")
            usage["under_oom"] = control.get("under_oom")
        if "pids" in cgroup.controllers:
            usage["pids_max_refusals"] = read_keyed(os.path.join(at, "pids.events")).get("max")
    return usage

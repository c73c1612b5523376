"""cgroup v1: the run's own cgroup in one v1 hierarchy, for limits on hybrid and legacy hosts.

On a *hybrid* host (systemd's default until 2021, RHEL 8, Amazon Linux 2, many
HPC nodes, this project's CI) the ``memory``, ``cpu``, ``cpuacct`` and ``pids``
controllers are bound to cgroup v1 hierarchies, each mounted on its own
(``/sys/fs/cgroup/memory``, ...), and the cgroup v2 mount offers none of them:
there, a limit can only be a v1 one. Each hierarchy is a tree of its own, and
a process is in exactly one cgroup of each; ``/proc/self/cgroup`` has one line
per hierarchy (``4:memory:/some/path``) and ``/proc/self/mountinfo`` one
``cgroup`` mount per hierarchy, its controllers in the super options.

Nothing is assumed here either: the hierarchy of a controller is the mount
whose options name it, this process's cgroup in it the path its line names,
and the directory found is believed only if its ``cgroup.procs`` lists this
process (a container may mount a hierarchy's subtree, or another one). The
run's cgroup is made *below* that one (never at a hierarchy's root unless the
process is there), with the name the run's v2 cgroup has
(``tether-<creator pid>-<8 hex>``), its limits written before the descriptor
of its ``cgroup.procs`` is opened for the command's join (a write of ``0``
between fork and exec, as in v2).

v1 has no ``cgroup.kill`` and no ``cgroup.events``: the tree is stopped by
the run's v2 cgroup where there is one (a hybrid host has one, for
membership), and otherwise by the supervisor's sweep, which signals every
pid listed in ``cgroup.procs`` after checking it is still a member. Removal
is ``rmdir`` once the tree is gone, deepest first, retried a bounded number
of times: the kernel takes a task out of its cgroups when it exits.

The pure half (:func:`parse_v1_mounts`, :func:`parse_v1_paths`) reads the
two files' text; tests feed it text and a directory laid out like cgroupfs.
"""

from __future__ import annotations

import os

from tether.linux.cgroup import JoinableCgroup, make_cgroup, remove_stale, unescape

# On the path to the command's launch: no ``typing`` at run time.
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


def parse_v1_mounts(text: str) -> list[tuple[frozenset[str], str, str]]:
    """``(controllers, root, mount point)`` of every cgroup v1 mount in mountinfo ``text``.

    The controllers are the super options (after `` - cgroup cgroup ``) that
    are not mount flags; ``name=systemd`` and other named hierarchies are
    kept as they are, and hold no controller a limit needs.
    """
    mounts: list[tuple[frozenset[str], str, str]] = []
    for line in text.splitlines():
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not separator or len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        options = frozenset(tail[2].split(",")) - {"rw", "ro"}
        mounts.append((options, unescape(fields[3]), unescape(fields[4])))
    return mounts


def parse_v1_paths(text: str) -> dict[frozenset[str], str]:
    """This process's cgroup per v1 hierarchy in ``/proc/self/cgroup`` ``text``, by controllers.

    Lines are ``ID:CONTROLLERS:PATH``; the v2 line (``0::PATH``) and lines
    that do not parse are left out. A path may hold colons.
    """
    paths: dict[frozenset[str], str] = {}
    for line in text.splitlines():
        number, colon, rest = line.partition(":")
        controllers, colon2, path = rest.partition(":")
        if not (colon and colon2 and controllers and number.isdecimal()) or number == "0":
            continue
        paths[frozenset(controllers.split(","))] = path
    return paths


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            return file.read()
    except OSError:
        return ""


def find_hierarchies(pid: int | str = "self", *, check: bool = True) -> list[Hierarchy]:
    """Every cgroup v1 hierarchy this process is in, with its cgroup's directory.

    ``check``: believe a directory only if its ``cgroup.procs`` lists this
    process (the supervisor's check; the caller's quick look skips it).
    """
    paths = parse_v1_paths(_read(f"/proc/{pid}/cgroup"))
    found: list[Hierarchy] = []
    me = str(os.getpid()).encode()
    for controllers, root, mount_point in parse_v1_mounts(_read("/proc/self/mountinfo")):
        path = paths.get(controllers)
        if path is None or not (root in ("/", path) or path.startswith(root + "/")):
            continue
        directory = os.path.normpath(mount_point + "/" + path[len(root.rstrip("/")) :])
        if check and me not in _read_bytes(os.path.join(directory, "cgroup.procs")).split():
            continue
        found.append(Hierarchy(controllers, mount_point, path, directory))
    return found


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return b""


class V1Cgroup(JoinableCgroup):
    """The run's cgroup in one v1 hierarchy: made with its limits, joined, read, removed."""

    __slots__ = ("controllers", "path")

    def __init__(self, controllers: frozenset[str], path: str, directory: str, fd: int) -> None:
        super().__init__(directory, fd)
        self.controllers = controllers
        #: Its path in the hierarchy, as ``/proc/<pid>/cgroup`` shows it.
        self.path = path

    @classmethod
    def create(cls, hierarchy: Hierarchy, name: str, files: Sequence[tuple[str, str]]) -> V1Cgroup:
        """Make ``name`` below this process's cgroup in ``hierarchy``, ``files`` written in order.

        Raise :class:`~tether.linux.cgroup.CgroupUnavailable` saying why; a
        cgroup half made is removed first.
        """
        remove_stale(hierarchy.directory)
        directory, fd = make_cgroup(hierarchy.directory, name, files)
        path = hierarchy.path.rstrip("/") + "/" + name
        return cls(hierarchy.controllers, path, directory, fd)

    def holds(self, pid: int | str) -> bool:
        """Whether ``pid`` (alive or a zombie) is in this cgroup."""
        return parse_v1_paths(_read(f"/proc/{pid}/cgroup")).get(self.controllers) == self.path

    def pids(self) -> list[int]:
        """The processes in this cgroup and below it."""
        found: list[int] = []
        for directory in self.directories():
            words = _read_bytes(os.path.join(directory, "cgroup.procs")).split()
            found.extend(pid for word in words if word.isdigit() and (pid := int(word)))
        return found


def _keyed(text: str) -> dict[str, int]:
    words = text.split()
    return {
        key: int(value)
        for key, value in zip(words[::2], words[1::2], strict=False)
        if value.isdecimal()
    }


def _number(text: str) -> int | None:
    word = text.strip()
    return int(word) if word.isdecimal() else None


def read_usage_v1(cgroups: Iterable[V1Cgroup]) -> dict[str, int | float | None]:
    """What the tree used as the v1 hierarchies counted it (``None`` for what none counts).

    ``cpuacct.usage`` (nanoseconds; ``usage_user``/``usage_sys`` split it),
    ``memory.max_usage_in_bytes`` (the peak), ``memory.failcnt`` (how often
    the limit was hit), ``memory.oom_control`` (``oom_kill``: Linux 4.13;
    ``under_oom``), ``pids.events`` (``max``: forks refused). Read once the
    tree is gone, before the cgroups are removed.
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
                nanoseconds = _number(_read(os.path.join(at, file)))
                usage[key] = None if nanoseconds is None else round(nanoseconds / 1e9, 6)
        if "memory" in cgroup.controllers:
            control = _keyed(_read(os.path.join(at, "memory.oom_control")))
            peak = _number(_read(os.path.join(at, "memory.max_usage_in_bytes")))
            usage["memory_peak_bytes"] = peak
            usage["memory_limit_hits"] = _number(_read(os.path.join(at, "memory.failcnt")))
            usage["oom_kills"] = control.get("oom_kill")
            usage["under_oom"] = control.get("under_oom")
        if "pids" in cgroup.controllers:
            usage["pids_max_refusals"] = _keyed(_read(os.path.join(at, "pids.events"))).get("max")
    return usage

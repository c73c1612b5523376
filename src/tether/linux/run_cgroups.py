"""The run's cgroups, the one object the supervisor holds (:class:`RunCgroups`), and
which backend takes each limit (:func:`plan_backends`).

Read only from ``/proc/self/mountinfo`` and ``/proc/self/cgroup``, per host and
per controller: ``cgroup2``, ``cgroup1``, a systemd scope (the user's or the
system's manager), ``cgroup2-beside`` a leaf in the cgroup above, or
:class:`~tether.linux.cgroup.CgroupUnavailable` saying what would work. The
table of when each applies: ``docs/containment.md`` ("Limits").
"""

from __future__ import annotations

import contextlib
import os

from tether.linux.cgroup import (
    HOLDS_PROCESSES,
    CgroupUnavailable,
    V2Cgroup,
    cgroup_of,
    enable_controllers,
    is_hierarchy_root,
    own_cgroup,
    probe_controllers,
    read_usage,
    read_words,
    remove_stale,
    remove_unused,
    run_cgroup_name,
    write_plain,
)
from tether.linux.cgroup1 import Hierarchy, V1Cgroup, find_hierarchies, read_usage_v1
from tether.linux.systemd_scope import (
    hierarchy_controllers,
    run_cgroup_in_scope,
    system_manager_address,
    user_bus_address,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

__all__ = [
    "SCOPE_BACKENDS",
    "USAGE_KEYS",
    "OwnLeaf",
    "RunCgroups",
    "plan_backends",
    "remove_left_by",
    "remove_stale_everywhere",
]

#: The backends that put the run's cgroup v2 in a transient scope a service manager makes for
#: the supervisor: the user's manager's (a non-root caller), the system manager's (root).
SCOPE_BACKENDS: Final = frozenset({"systemd-scope", "systemd-system-scope"})

#: What :meth:`RunCgroups.usage` says, in the record's order (``tree_usage``).
USAGE_KEYS: Final = (
    "cpu_seconds",
    "cpu_user_seconds",
    "cpu_system_seconds",
    "memory_peak_bytes",
    "oom_kills",
    "memory_limit_hits",
    "under_oom",
    "pids_max_refusals",
)

#: What would work where a v2 cgroup cannot take a controller and no v1 hierarchy can.
_DELEGATE: Final = (
    "run tether as root, or in a cgroup delegated to you: "
    "systemd-run --user --scope -p Delegate=yes tether ..."
)

#: The same for root, who is never told to become root.
_ROOT_REMEDY: Final = (
    "where no service manager hands out a delegated cgroup (a container), tether moves no "
    "process it did not start: make `tether run` the container's entry point (alone in its "
    "cgroup, it steps into a leaf itself), or have the entry point move its processes into a "
    "leaf cgroup and enable the controllers in the cgroup above it (as docker-in-docker's "
    "entrypoint does), and tether makes the run's cgroup beside that leaf; or run without limits"
)

#: For a read-only cgroup file system (a container's default).
_READ_ONLY_REMEDY: Final = (
    "give the container a writable cgroup namespace (podman or docker run --cgroupns=private "
    "with /sys/fs/cgroup mounted read-write, or --privileged), or run without limits"
)


def _remedy(why: str) -> str:
    """What would work, for this user, where ``why`` is why nothing can take a limit."""
    if not _privileged():
        return _DELEGATE
    if HOLDS_PROCESSES in why or "thread subtree" in why:
        return _ROOT_REMEDY
    return "run without limits"


def _unwritable(directory: str) -> CgroupUnavailable:
    """Why tether cannot make a cgroup in ``directory``, with what would work."""
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return CgroupUnavailable(
            f"{directory} is mounted read-only (a container's default): {_READ_ONLY_REMEDY}"
        )
    return CgroupUnavailable(f"{directory} is not writable by this user")


def _v2_refusal(directory: str, name: str) -> str:
    """Why a new cgroup below ``directory`` cannot take controller ``name``; "" if it can."""
    try:
        if not os.access(directory, os.W_OK):
            raise _unwritable(directory)
        probe_controllers(directory, (name,))
    except CgroupUnavailable as why:
        return str(why)
    return ""


def _beside(path: str, directory: str, name: str) -> bool:
    """Whether the cgroup above this process's could take ``name`` for the run (read only)."""
    if path in ("", "/"):
        return False
    return not _v2_refusal(os.path.dirname(directory), name)


def _nothing_takes(why: str) -> CgroupUnavailable:
    """The refusal where no backend can take a controller: why, and what would work."""
    if _READ_ONLY_REMEDY in why:
        return CgroupUnavailable(why)
    return CgroupUnavailable(f"{why}; {_remedy(why)}")


def _check_v1(name: str, hierarchy: Hierarchy) -> None:
    """Whether this process may divide ``hierarchy`` (cgroup v1) for controller ``name``."""
    if os.access(hierarchy.directory, os.W_OK):
        return
    if _privileged():
        raise _unwritable(hierarchy.directory)
    raise CgroupUnavailable(
        f"the {name} controller is bound to cgroup v1 ({hierarchy.directory}), "
        "which only root can divide (systemd delegates no cgroup v1 to a user): "
        "run tether as root"
    )


#: The run's cgroup v2 beside a leaf in the cgroup above: one the entry point left, or one
#: the ``tether run`` caller moves itself into (:class:`OwnLeaf`).
_BESIDE: Final = frozenset({"cgroup2-beside", "cgroup2-own-leaf"})


def _only(directory: str, mover: int, name: str) -> bool:
    """Whether ``mover`` is the only process in the cgroup at ``directory``, which could then
    take controller ``name`` once it moved into a leaf (a container whose entry point is
    ``tether run``). Read only."""
    if is_hierarchy_root(directory) or not os.access(directory, os.W_OK):
        return False
    try:
        with open(os.path.join(directory, "cgroup.procs"), "rb") as procs:
            members = procs.read().split()
        with open(os.path.join(directory, "cgroup.type"), "rb") as kind:
            domain = kind.read().split() == [b"domain"]
        with open(os.path.join(directory, "cgroup.controllers"), "rb") as offered:
            available = name.encode() in offered.read().split()
    except OSError:
        return False
    return domain and available and members == [str(mover).encode()]


class OwnLeaf:
    """The ``tether run`` caller moved into a leaf of its own cgroup, which it alone held,
    its controllers enabled above it, so that the run's cgroup is made beside it; undone by
    :meth:`leave` (``docs/containment.md``, "after the caller stepped aside").
    """

    __slots__ = ("directory", "enabled", "leaf")

    def __init__(self, directory: str, leaf: str, enabled: tuple[str, ...]) -> None:
        self.directory = directory
        self.leaf = leaf
        self.enabled = enabled

    @classmethod
    def enter(cls, controllers: tuple[str, ...]) -> OwnLeaf:
        """Move this process into a new leaf of its cgroup; enable ``controllers`` above it."""
        _path, directory = own_cgroup()
        leaf = os.path.join(directory, run_cgroup_name())
        try:
            os.mkdir(leaf, 0o755)
        except OSError as error:
            raise CgroupUnavailable(f"cannot create {leaf}: {error.strerror}") from None
        made = cls(directory, leaf, ())
        try:
            _write_pid(leaf)
            before = set(read_words(os.path.join(directory, "cgroup.subtree_control")))
            enable_controllers(directory, controllers)  # refuses if anything came in
            made.enabled = tuple(name for name in controllers if name not in before)
        except (OSError, CgroupUnavailable) as error:
            made.leave()
            why = error.strerror if isinstance(error, OSError) else str(error)
            raise CgroupUnavailable(f"cannot divide {directory} for the run: {why}") from None
        return made

    def leave(self) -> None:
        """Undo what :meth:`enter` did, as far as nothing else now depends on it."""
        others = [
            name
            for name in _listdir(self.directory)
            if name.startswith("tether-") and os.path.join(self.directory, name) != self.leaf
        ]
        with contextlib.suppress(OSError):
            if self.enabled and not others:
                write_plain(
                    os.path.join(self.directory, "cgroup.subtree_control"),
                    " ".join(f"-{name}" for name in self.enabled),
                )
            _write_pid(self.directory)
        with contextlib.suppress(OSError):
            os.rmdir(self.leaf)


def _listdir(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _write_pid(directory: str) -> None:
    """Move this process into the cgroup at ``directory``."""
    write_plain(os.path.join(directory, "cgroup.procs"), "0")


def _v1_by_controller(hierarchies: list[Hierarchy]) -> dict[str, Hierarchy]:
    return {name: hierarchy for hierarchy in hierarchies for name in hierarchy.controllers}


def _privileged() -> bool:
    """Whether this process is root, for whom tether divides the system's cgroups itself."""
    return os.geteuid() == 0


def _scope(path: str, directory: str, environ: Mapping[str, str]) -> tuple[set[str], str, str]:
    """The controllers a systemd scope could hold here (the v2 hierarchy's), the backend it
    would be (the user's manager, or the system's for root), and why not if none.
    """
    if _privileged():
        if system_manager_address(environ) is None:
            return set(), "", "no service manager to ask for a delegated scope"
        return hierarchy_controllers(path, directory), "systemd-system-scope", ""
    if user_bus_address(environ) is None:
        return (
            set(),
            "",
            (
                "no user bus to ask systemd for a delegated scope "
                "(neither $DBUS_SESSION_BUS_ADDRESS nor $XDG_RUNTIME_DIR/bus is a socket)"
            ),
        )
    return hierarchy_controllers(path, directory), "systemd-scope", ""


def plan_backends(
    controllers: tuple[str, ...],
    *,
    check: bool = True,
    environ: Mapping[str, str] | None = None,
    mover: int | None = None,
) -> tuple[dict[str, str], dict[str, Hierarchy]]:
    """Which backend takes each of ``controllers``, and the v1 hierarchies it uses.

    Read only (``check``: believe a v1 directory only if it lists this process). A scope
    answer is a promise to ask; where one controller needs it, every v2 one goes there too.
    ``mover``: a ``tether run`` caller's pid, which may step into a leaf (:class:`OwnLeaf`).
    """
    backends: dict[str, str] = {}
    v2_why = ""
    try:
        v2_path, v2_directory = own_cgroup()
    except CgroupUnavailable as why:
        v2_path, v2_directory, v2_why = "", None, str(why)
    v1 = _v1_by_controller(find_hierarchies(check=check)) if controllers else {}
    scope: tuple[set[str], str, str] | None = None
    for name in controllers:
        if v2_directory is not None:
            v2_why = _v2_refusal(v2_directory, name)
            if not v2_why:
                backends[name] = "cgroup2"
                continue
        hierarchy = v1.get(name)
        if hierarchy is None and v2_directory is not None:
            if scope is None:
                scope = _scope(v2_path, v2_directory, os.environ if environ is None else environ)
            offered, scope_backend, no_scope = scope
            if name in offered:
                backends[name] = scope_backend
                continue
            if _beside(v2_path, v2_directory, name):
                backends[name] = "cgroup2-beside"
                continue
            if mover is not None and _only(v2_directory, mover, name):
                backends[name] = "cgroup2-own-leaf"
                continue
            v2_why = f"{v2_why}; {no_scope}" if no_scope and not _privileged() else v2_why
        if hierarchy is None:
            raise _nothing_takes(v2_why)
        _check_v1(name, hierarchy)
        backends[name] = "cgroup1"
    in_scope = (SCOPE_BACKENDS | _BESIDE).intersection(backends.values())
    if in_scope:
        scope_backend = sorted(in_scope)[0]  # one, as the hierarchy's shape makes it
        backends = {
            name: scope_backend if backend == "cgroup2" else backend
            for name, backend in backends.items()
        }
    return backends, v1


#: The v1 hierarchies tether may make cgroups in.
_V1_CONTROLLERS: Final = frozenset({"memory", "cpu", "cpuacct", "pids"})


def _parents() -> list[str]:
    """Where tether makes a run's cgroups: below this process's own, in every hierarchy."""
    parents: list[str] = []
    with contextlib.suppress(CgroupUnavailable):
        parents.append(own_cgroup()[1])
    parents.extend(
        hierarchy.directory
        for hierarchy in find_hierarchies()
        if hierarchy.controllers & _V1_CONTROLLERS
    )
    return parents


def remove_stale_everywhere() -> list[str]:
    """Remove stale cgroups of tether's naming below this process's own, in every hierarchy
    (:func:`~tether.linux.cgroup.remove_stale`); the directories, for ``tether prune``.
    """
    removed: list[str] = []
    for parent in _parents():
        removed.extend([parent] * remove_stale(parent))
    return removed


def remove_left_by(creator: int) -> int:
    """Remove the empty, unused cgroups ``creator`` (a pid, dead) made beside this process's
    own, in every hierarchy: what a spare the zygote killed made ahead. How many."""
    removed = 0
    prefix = f"tether-{creator}-"
    for parent in _parents():
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                if name.startswith(prefix) and len(name) == len(prefix) + 8:
                    with contextlib.suppress(OSError):
                        removed += remove_unused(os.path.join(parent, name))
    return removed


class RunCgroups:
    """The run's cgroups, the one object the supervisor holds: made, joined, read, removed.

    ``v2``: its cgroup v2 (membership, ``cgroup.kill``, v2 limits), where there
    is one; ``v1``: one per v1 hierarchy a limit needs (and ``cpuacct``'s);
    ``enforced_by``: each limit's backend. As prepared
    (:func:`tether.supervisor.cgroup_choice.prepare_run_cgroups`):
    ``required_by`` names what makes the join a must ("" if nothing does),
    ``refusal`` why the command may not start, ``deferred`` that the cgroup is
    left to the supervisor (a systemd scope takes the process that asks),
    ``warming`` the pid of the child warming the join's lock.
    """

    __slots__ = ("deferred", "enforced_by", "refusal", "required_by", "v1", "v2", "warming")

    def __init__(
        self,
        v2: V2Cgroup | None = None,
        v1: list[V1Cgroup] | None = None,
        enforced_by: dict[str, str] | None = None,
        *,
        refusal: CgroupUnavailable | None = None,
        deferred: bool = False,
    ) -> None:
        self.v2 = v2
        self.v1 = [] if v1 is None else v1
        self.enforced_by = {} if enforced_by is None else enforced_by
        self.refusal = refusal
        self.deferred = deferred
        self.required_by = ""
        self.warming: int | None = None

    @classmethod
    def create(
        cls,
        *,
        backends: Mapping[str, str] | None = None,
        hierarchies: Mapping[str, Hierarchy] | None = None,
        v2_files: Mapping[str, str] | None = None,
        v1_files: Mapping[str, list[tuple[str, str]]] | None = None,
        enforced_by: dict[str, str] | None = None,
        limit_controllers: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> RunCgroups:
        """Make the run's cgroups, limits written; :class:`CgroupUnavailable` if one cannot be.

        ``backends``, ``hierarchies``: :func:`plan_backends`'s answer (without them, a v2 cgroup
        alone); a scope backend moves this process into a new scope first.
        """
        name = run_cgroup_name()
        if not backends:
            return cls(V2Cgroup.create(name=name))
        # A SIGKILLed supervisor's, in any hierarchy tether makes cgroups in: once each (the
        # run's own below are not swept again).
        for directory in {
            h.directory for h in (hierarchies or {}).values() if h.controllers & _V1_CONTROLLERS
        }:
            remove_stale(directory)
        made = cls(enforced_by=dict(enforced_by or {}))
        try:
            if SCOPE_BACKENDS.intersection(backends.values()):
                made.v2 = _make_in_scope(
                    name, backends, v2_files or {}, limit_controllers or {}, environ
                )
            else:
                made.v2 = _make_v2(name, backends, v2_files or {})
            made.v1 = _make_v1(
                name, backends, hierarchies or {}, v1_files or {}, v2=made.v2 is not None
            )
        except BaseException:
            made.discard()
            raise
        return made

    def _all(self) -> list[V2Cgroup | V1Cgroup]:
        return [*self.v1, *([] if self.v2 is None else [self.v2])]

    def take(self) -> RunCgroups | None:
        """These cgroups for the command to join (``None``: none made, the sweep alone), once
        the warming child is reaped; raise the :attr:`refusal` (or the deferral) instead."""
        self._reap()
        if self.refusal is not None:
            raise self.refusal
        if self.deferred:  # never a command without the cgroup its limits need
            raise CgroupUnavailable(
                "the run's cgroup was left to its supervisor, which never made it"
            )
        return self if self._all() else None

    def join(self, *, born_in_v2: bool = False) -> None:
        """Move the calling process into every cgroup of the run (between fork and exec);
        ``born_in_v2``: it was forked into the v2 one, and joins the v1 ones alone."""
        for cgroup in self.v1 if born_in_v2 else self._all():
            cgroup.join()

    def join_takes_lock(self) -> bool:
        """Whether the command's join writes a ``cgroup.procs``, taking the lock
        :func:`~tether.linux.cgroup.warm_attach_lock` readies: not if born in its only cgroup."""
        # Here, not with the module: a caller checking its limits has no fork to prepare.
        from tether.linux.clone3 import clone_into_cgroup_likely, kernel_at_least

        if not self._all():
            return False
        # A join through ``tasks`` (V1Cgroup.join) takes no lock on Linux 6.1 and later.
        v1_locks = any(cgroup.tasks_descriptor is None for cgroup in self.v1)
        if self.v1 and (v1_locks or not kernel_at_least(6, 1)):
            return True
        born = self.v2 is not None and self.v2.clone_descriptor is not None
        return not born or not clone_into_cgroup_likely()

    def join_descriptors(self) -> list[int]:
        """The descriptors the join writes to and the one a child is born in: a fork keeps them."""
        kept = [fd for cgroup in self._all() if (fd := cgroup.join_descriptor) is not None]
        kept += [fd for cgroup in self.v1 if (fd := cgroup.tasks_descriptor) is not None]
        born_in = None if self.v2 is None else self.v2.clone_descriptor
        return kept if born_in is None else [*kept, born_in]

    def release(self) -> None:
        """Close this process's join descriptors: the cgroups are handed on, or joined."""
        for cgroup in self._all():
            cgroup.close_join()

    def intact(self) -> bool:
        """Whether every cgroup made ahead is still the one made, and empty."""
        return all(cgroup.intact() for cgroup in self._all())

    @property
    def directory(self) -> str:
        """The run's main cgroup directory: the v2 one, or else the first v1 one."""
        return self.v2.directory if self.v2 is not None else self.v1[0].directory

    @property
    def directories(self) -> list[str]:
        """Every cgroup directory of the run, v2 first (a caller stops the run by them)."""
        return [cgroup.directory for cgroup in reversed(self._all())]

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` (alive or a zombie) is in the run's main cgroup."""
        if self.v2 is not None:
            return cgroup_of(pid) == self.v2.path
        return self.v1[0].holds(pid)

    def pids(self) -> list[int]:
        """The processes in any cgroup of the run (zombies are not listed)."""
        return sorted({pid for cgroup in self._all() for pid in cgroup.pids()})

    def usage(self) -> dict[str, int | float | None]:
        """What the whole tree used, v2's count first; read before :meth:`remove`."""
        usage = read_usage(self.v2.directory) if self.v2 is not None else {}
        for key, value in read_usage_v1(self.v1).items():
            if usage.get(key) is None:
                usage[key] = value
        return {key: usage.get(key) for key in USAGE_KEYS}

    def kill(self) -> bool:
        """SIGKILL the run through v2's ``cgroup.kill``; whether the kernel took it."""
        return self.v2 is not None and self.v2.kill()

    def remove(self, *, timeout: float = 1.0) -> bool:
        """Remove every cgroup of the run, killing what is left; whether all are gone."""
        gone = self.v2 is None or self.v2.remove(timeout=timeout)
        for cgroup in self.v1:
            gone = _remove_v1(cgroup, timeout) and gone
        return gone

    def discard(self) -> bool:
        """The command will not start: reap the warming child, remove every empty cgroup;
        whether all are gone."""
        self._reap()
        gone = True
        for cgroup in self._all():
            gone = cgroup.discard() and gone
        return gone

    def _reap(self) -> None:
        if self.warming is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.warming, 0)
            self.warming = None


def _make_v2(name: str, backends: Mapping[str, str], files: Mapping[str, str]) -> V2Cgroup | None:
    """The v2 cgroup with its limits; without any, ``None`` where none can be made."""
    beside = "cgroup2-beside" in backends.values()
    kinds = ("cgroup2", "cgroup2-beside")
    controllers = tuple(each for each, backend in backends.items() if backend in kinds)
    written = {file: text for file, text in files.items() if file.split(".", 1)[0] in controllers}
    try:
        return V2Cgroup.create(controllers, written, name=name, beside=beside)
    except CgroupUnavailable:
        if controllers:
            raise
        return None


def _make_in_scope(
    name: str,
    backends: Mapping[str, str],
    files: Mapping[str, str],
    limit_controllers: Mapping[str, str],
    environ: Mapping[str, str] | None,
) -> V2Cgroup:
    """The v2 cgroup with its limits, in a scope the system's manager (root) or the user's
    made for this process.
    """
    environ = os.environ if environ is None else environ
    system = "systemd-system-scope" in backends.values()
    direct = False
    if system:
        found = system_manager_address(environ)
        if found is None:
            raise CgroupUnavailable("the system's service manager is gone; run without limits")
        address, direct = found
    else:
        user_bus = user_bus_address(environ)
        if user_bus is None:
            raise CgroupUnavailable(f"the user bus is gone; {_DELEGATE}")
        address = user_bus
    controllers = tuple(each for each, backend in backends.items() if backend in SCOPE_BACKENDS)
    written = {file: text for file, text in files.items() if file.split(".", 1)[0] in controllers}
    limits = {
        limit: controller
        for limit, controller in limit_controllers.items()
        if controller in controllers
    }
    return run_cgroup_in_scope(
        name, controllers, written, limits, address=address, direct=direct, system=system
    )


def _make_v1(
    name: str,
    backends: Mapping[str, str],
    hierarchies: Mapping[str, Hierarchy],
    files: Mapping[str, list[tuple[str, str]]],
    *,
    v2: bool,
) -> list[V1Cgroup]:
    """One cgroup per v1 hierarchy the limits need, and ``cpuacct``'s for the CPU time."""
    wanted = [each for each, backend in backends.items() if backend == "cgroup1"]
    if not wanted:
        return []
    if ("cpu" in wanted or not v2) and "cpuacct" in hierarchies:
        wanted.append("cpuacct")
    made: list[V1Cgroup] = []
    seen: set[str] = set()
    try:
        for controller in wanted:
            hierarchy = hierarchies[controller]
            if hierarchy.directory in seen:
                continue
            seen.add(hierarchy.directory)
            writes = [
                item for each in sorted(hierarchy.controllers) for item in files.get(each, [])
            ]
            made.append(V1Cgroup.create(hierarchy, name, writes, sweep=False))
    except BaseException:
        for cgroup in made:
            cgroup.discard()
        raise
    return made


def _remove_v1(cgroup: V1Cgroup, timeout: float) -> bool:
    import time

    end = time.monotonic() + timeout
    while not cgroup.discard():
        if time.monotonic() >= end:
            return False
        for pid in cgroup.pids():  # a v1-only host: what the sweep did not reach
            with contextlib.suppress(OSError):
                _kill_member(cgroup, pid)
        time.sleep(0.01)
    return True


def _kill_member(cgroup: V1Cgroup, pid: int) -> None:
    """SIGKILL ``pid`` through a pidfd, only if it is still in ``cgroup`` once the pidfd is open."""
    import signal

    pidfd = os.pidfd_open(pid)
    try:
        if cgroup.holds(pid):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)

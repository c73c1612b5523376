"""All of a run's cgroups: its v2 cgroup, and one per cgroup v1 hierarchy a limit needs.

Which backend enforces a limit is chosen per host *and per controller*
(:func:`plan_backends`), from ``/proc/self/mountinfo`` and
``/proc/self/cgroup``, never from guesses about distributions:

- ``cgroup2`` where the controller can be enabled below this process's own
  cgroup v2 (a pure v2 host, a delegated scope);
- ``cgroup1`` where it cannot and a v1 hierarchy holds it (a hybrid or a
  legacy host) whose cgroup this process may divide (root: systemd
  delegates no v1 hierarchy to a user);
- ``systemd-scope`` where it cannot, no v1 hierarchy holds it, the v2
  hierarchy does, this process is not root and a user bus is there: the
  supervisor asks the user's service manager for a scope with
  ``Delegate=yes`` and makes the run's cgroup in it
  (:mod:`tether.linux.systemd_scope`), as ``systemd-run --user --scope -p
  Delegate=yes`` would; whatever the scope turns out not to have been
  delegated is refused then, before the command starts;
- none: :class:`~tether.linux.cgroup.CgroupUnavailable`, with a message
  that says what would work.

:class:`RunCgroups` is what the supervisor holds for the run: the v2 cgroup
(membership and ``cgroup.kill``, where there is one, limits or not) and the
v1 cgroups (the limits, ``cpuacct`` for the CPU time), all with one name.
The command joins every one of them between fork and exec, through
descriptors opened before the fork; :attr:`RunCgroups.directories` lists
them all, for whoever must find the run's processes without the supervisor.
"""

from __future__ import annotations

import contextlib
import os

from tether.linux.cgroup import (
    HOLDS_PROCESSES,
    CgroupUnavailable,
    RunCgroup,
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
    """Whether the run's cgroup can take ``name`` in the parent of this process's cgroup.

    Where this process's own cgroup cannot be divided and no manager hands
    out one that can, but the cgroup above it holds no process and lists the
    controller in its ``cgroup.subtree_control`` already: the layout a
    container's entry point leaves when it moves its processes into a leaf
    and enables the controllers (docker-in-docker's entrypoint). Read only,
    as every check here: tether moves no process and enables nothing there.
    """
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
    """The ``tether run`` caller moved into a leaf of its own cgroup, which it alone held.

    So that the run's cgroup can be made beside it (``cgroup2-beside``, as the
    supervisor sees it): the caller makes ``tether-<pid>-<hex>`` in its
    cgroup, moves itself there, checks that nothing else came in meanwhile,
    and enables the controllers the limits need in the cgroup, now empty of
    processes. Everything tether changed is undone by :meth:`leave`: the
    controllers it enabled are disabled (unless a run's cgroup of another
    tether is there and may use them), the caller moves back, the leaf is
    removed. A caller SIGKILLed in between leaves an empty leaf of tether's
    naming, which the next run or ``tether prune`` removes.
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
    """What a systemd scope could hold here, the backend it would be, and why not if nothing.

    The controllers of the v2 hierarchy (a scope gets at most those): for a
    non-root process with a user bus to ask (``systemd-scope``), for root with
    the system's manager to ask (``systemd-system-scope``); none, with the
    reason, otherwise.
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

    Read only, from either side: nothing is written, no cgroup is made
    (a controller must be enabled below this process's cgroup v2 already,
    and that cgroup divisible: :func:`~tether.linux.cgroup.probe_controllers`).
    ``check``: believe a v1 directory only if its
    ``cgroup.procs`` lists this process (the supervisor); the caller's quick
    look skips that read. ``environ``: where the user bus is looked for
    (default: this process's). A ``systemd-scope`` answer is a promise to
    ask: nothing talks to the bus here. When one controller needs the scope,
    every controller v2 could take goes there too (the run has one v2
    cgroup). ``mover``: the pid of a ``tether run`` caller, tether's own
    process, which may move into a leaf of its cgroup (:class:`OwnLeaf`) if it
    is the only process there: ``cgroup2-own-leaf``, a promise that it will
    (never the API's caller, a program tether did not start). Raise
    :class:`CgroupUnavailable` for the first controller nothing can take,
    saying what would work.
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
    """Remove stale cgroups of tether's naming below this process's own, in every hierarchy.

    Only empty ones whose creator is gone (:func:`~tether.linux.cgroup.remove_stale`):
    never one tether did not name, never one something runs in. Return the
    directories they were in, for ``tether prune`` to say.
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
    """The run's cgroups, in every hierarchy: made with the limits, joined, read, removed."""

    __slots__ = ("enforced_by", "v1", "v2")

    def __init__(
        self, v2: RunCgroup | None, v1: list[V1Cgroup], enforced_by: dict[str, str]
    ) -> None:
        #: The run's cgroup v2 (membership, ``cgroup.kill``, v2 limits), where there is one.
        self.v2 = v2
        #: Its cgroups in v1 hierarchies (v1 limits, ``cpuacct``).
        self.v1 = v1
        #: Each limit asked for, by name, and the backend that enforces it.
        self.enforced_by = enforced_by

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
        """Make the run's cgroups; :class:`CgroupUnavailable` if one cannot be made.

        ``backends`` and ``hierarchies`` are :func:`plan_backends`'s answer;
        ``v2_files`` what to write in the v2 cgroup (by file), ``v1_files`` in
        each v1 one (by controller, in order). Without ``backends``, only a
        v2 cgroup is made (membership). Every limit is written before this
        returns, and nothing is left made if one cannot be. Where the
        backend is ``systemd-scope``, this process is moved into a new scope
        first (:func:`~tether.linux.systemd_scope.run_cgroup_in_scope`: only
        a supervisor may call it so), asked for on the user bus found in
        ``environ``; ``limit_controllers`` (each limit's controller, by API
        name) lets it name every limit the scope cannot take.
        """
        name = run_cgroup_name()
        if not backends:
            return cls(RunCgroup.create(name=name), [], {})
        for hierarchy in {h.directory: h for h in (hierarchies or {}).values()}.values():
            remove_stale(hierarchy.directory)  # a SIGKILLed supervisor's, in any hierarchy
        made = cls(None, [], dict(enforced_by or {}))
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

    # -- joining --------------------------------------------------------------

    def _all(self) -> list[RunCgroup | V1Cgroup]:
        return [*self.v1, *([] if self.v2 is None else [self.v2])]

    def join(self, *, born_in_v2: bool = False) -> None:
        """Move the calling process into every cgroup of the run (between fork and exec).

        ``born_in_v2``: the process was forked into the v2 cgroup
        (:attr:`clone_descriptor`) and joins only the v1 ones: a move to where
        it already is would wait for the lock all the same.
        """
        for cgroup in self.v1 if born_in_v2 else self._all():
            cgroup.join()

    @property
    def clone_descriptor(self) -> int | None:
        """The v2 cgroup's directory, for a child to be born in; ``None`` if there is none."""
        return None if self.v2 is None else self.v2.clone_descriptor

    @property
    def join_takes_lock(self) -> bool:
        """Whether the command's join will write a ``cgroup.procs``, and so take the lock
        that :func:`~tether.linux.cgroup.warm_attach_lock` readies: a v1 cgroup to join,
        or a v2 one the command is not likely to be born in."""
        # Here, not with the module: a caller checking its limits loads this module, and
        # has no fork of a command to prepare (nor C functions to look up for one).
        from tether.linux.clone3 import clone_into_cgroup_likely

        return bool(self.v1) or self.clone_descriptor is None or not clone_into_cgroup_likely()

    @property
    def join_descriptors(self) -> list[int]:
        """The descriptors :meth:`join` writes to, and the one a child is born in by: ones
        a fork must keep."""
        kept = [fd for cgroup in self._all() if (fd := cgroup.join_descriptor) is not None]
        born_in = self.clone_descriptor
        return kept if born_in is None else [*kept, born_in]

    def close_join(self) -> None:
        for cgroup in self._all():
            cgroup.close_join()

    def intact(self) -> bool:
        """Whether every cgroup of the run is still the one made, and empty
        (:meth:`~tether.linux.cgroup.JoinableCgroup.intact`)."""
        return all(cgroup.intact() for cgroup in self._all())

    # -- looking --------------------------------------------------------------

    @property
    def directory(self) -> str:
        """The run's main cgroup directory: the v2 one, or else the first v1 one."""
        return self.v2.directory if self.v2 is not None else self.v1[0].directory

    @property
    def directories(self) -> list[str]:
        """Every cgroup directory of the run, v2 first, then each v1 hierarchy's.

        What a caller that lost the supervisor needs to stop the run's
        processes: ``cgroup.kill`` in the v2 one, the pids in each one's
        ``cgroup.procs`` otherwise.
        """
        return [cgroup.directory for cgroup in reversed(self._all())]

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` (alive or a zombie) is in the run's main cgroup."""
        if self.v2 is not None:
            return cgroup_of(pid) == self.v2.path
        return self.v1[0].holds(pid)

    def pids(self) -> list[int]:
        """The processes in any cgroup of the run (zombies are not listed)."""
        found: set[int] = set()
        for cgroup in self._all():
            found.update(cgroup.pids())
        return sorted(found)

    def populated(self) -> bool:
        if self.v2 is not None and self.v2.populated():
            return True
        return any(cgroup.pids() for cgroup in self.v1)

    def usage(self) -> dict[str, int | float | None]:
        """What the whole tree used, from whichever hierarchy counts each (v2 first).

        Read once the tree is gone, before :meth:`remove`.
        """
        usage = read_usage(self.v2.directory) if self.v2 is not None else {}
        for key, value in read_usage_v1(self.v1).items():
            if usage.get(key) is None:
                usage[key] = value
        return {key: usage.get(key) for key in USAGE_KEYS}

    # -- stopping and removing ------------------------------------------------

    def kill(self) -> bool:
        """SIGKILL the whole run through ``cgroup.kill``; whether the kernel took it.

        Only v2 has one: without it, the supervisor's sweep signals each pid
        of :meth:`pids`, checked, as it does any process it did not walk to.
        """
        return self.v2 is not None and self.v2.kill()

    def remove(self, *, timeout: float = 1.0) -> bool:
        """Remove every cgroup of the run; whether all are gone.

        The v2 cgroup first (killed and waited for if anything still runs in
        it, as :meth:`RunCgroup.remove` does), then each v1 one, retried a
        bounded number of times: v1 tells nobody when a cgroup empties.
        """
        gone = self.v2 is None or self.v2.remove(timeout=timeout)
        for cgroup in self.v1:
            gone = _remove_v1(cgroup, timeout) and gone
        return gone

    def discard(self) -> bool:
        """Remove every cgroup of the run that is empty; whether all are gone."""
        gone = True
        for cgroup in self._all():
            gone = cgroup.discard() and gone
        return gone


def _make_v2(name: str, backends: Mapping[str, str], files: Mapping[str, str]) -> RunCgroup | None:
    """The v2 cgroup with its limits; without any, ``None`` where none can be made."""
    beside = "cgroup2-beside" in backends.values()
    kinds = ("cgroup2", "cgroup2-beside")
    controllers = tuple(each for each, backend in backends.items() if backend in kinds)
    written = {file: text for file, text in files.items() if file.split(".", 1)[0] in controllers}
    try:
        return RunCgroup.create(controllers, written, name=name, beside=beside)
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
) -> RunCgroup:
    """The v2 cgroup with its limits, in a scope a service manager made for this process.

    The system's manager for root (``systemd-system-scope``), the user's own
    otherwise (``systemd-scope``).
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
            made.append(V1Cgroup.create(hierarchy, name, writes))
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

"""Choosing where a run's limits go, against directories laid out like cgroupfs.

No kernel here: each test lays out the cgroup files a host of one kind
has (a system service's cgroup on cgroup v2, a cgroup damaged into a thread
root, the hierarchy's root, a container's read-only mount) and checks what
:mod:`tether.linux.cgroup` and :func:`tether.linux.run_cgroups.plan_backends`
decide there, and that deciding wrote nothing: a check of the limits only
reads (``caller/request._limits`` runs it in the caller). Runs as any user,
on any host.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.linux import cgroup as cgroup_module
from tether.linux import run_cgroups
from tether.linux.cgroup import (
    CgroupUnavailable,
    divisible,
    holds_processes,
    is_hierarchy_root,
    probe_controllers,
)

#: Every controller of a Debian 12/13 guest's hierarchy (vm-hosts.md, "Guest facts").
_ALL = "cpuset cpu io memory hugetlb pids rdma misc\n"


def _cgroup(
    directory: Path,
    *,
    procs: str = "",
    subtree: str = "",
    kind: str | None = "domain",
    controllers: str = _ALL,
) -> Path:
    """A cgroup's files, as the kernel shows them (``kind`` None: the hierarchy's root)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup.procs").write_text(procs)
    (directory / "cgroup.subtree_control").write_text(subtree)
    (directory / "cgroup.controllers").write_text(controllers)
    if kind is not None:
        (directory / "cgroup.type").write_text(f"{kind}\n")
    return directory


def _snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file below ``root`` with its content and modification time, to show nothing changed."""
    return {
        str(path.relative_to(root)): (path.read_text(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root in a system service on cgroup v2 (vm-hosts.md §2): its cgroup holds the service's
    processes, nothing enabled below it, no v1 hierarchy, no service manager to ask."""
    hierarchy = _cgroup(tmp_path / "cgroupfs", subtree="cpu memory pids", kind=None)
    unit = _cgroup(hierarchy / "system.slice" / "vmlab-run.service", procs="518\n519\n")
    path = "/system.slice/vmlab-run.service"
    monkeypatch.setattr(run_cgroups, "own_cgroup", lambda: (path, str(unit)))
    monkeypatch.setattr(run_cgroups, "find_hierarchies", lambda **_: [])
    monkeypatch.setattr(run_cgroups, "_privileged", lambda: True)
    monkeypatch.setattr(os, "access", lambda *_args, **_kw: True)  # root may write anywhere
    return unit


@pytest.mark.parametrize("controllers", [("pids",), ("cpu",), ("memory",), ("cpu", "pids")])
def test_a_cgroup_that_holds_processes_is_refused_whatever_the_controller(
    service: Path, controllers: tuple[str, ...]
) -> None:
    """pids and cpu are threaded: the kernel would take ``+pids`` there and make a thread root."""
    before = _snapshot(service.parent.parent)
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroups.plan_backends(controllers, check=False)
    message = str(refused.value)
    assert "holds processes of its own" in message
    assert str(service) in message
    assert "\n" not in message
    assert "as root" not in message  # root is never told to become root
    assert _snapshot(service.parent.parent) == before  # the check wrote nothing


def test_a_thread_root_left_by_an_earlier_write_is_refused_and_named(tmp_path: Path) -> None:
    damaged = _cgroup(tmp_path / "unit", procs="", subtree="pids", kind="domain threaded")
    with pytest.raises(CgroupUnavailable, match=r"'domain threaded' cgroup \(a thread subtree\)"):
        probe_controllers(str(damaged), ("memory",))


def test_the_hierarchy_root_may_hold_processes_and_is_used_read_only(tmp_path: Path) -> None:
    root = _cgroup(tmp_path / "cgroupfs", procs="1\n", subtree="memory pids", kind=None)
    assert is_hierarchy_root(str(root))
    before = _snapshot(root)
    probe_controllers(str(root), ("memory", "pids"))  # enabled already: usable
    with pytest.raises(CgroupUnavailable) as refused:
        probe_controllers(str(root), ("cpu", "memory"))
    message = str(refused.value)
    assert "cpu controller(s) are not enabled below" in message
    assert "tether changes no cgroup it did not make" in message
    assert f"echo '+cpu' > {root}/cgroup.subtree_control" in message
    assert _snapshot(root) == before


def test_a_controller_the_hierarchy_lacks_is_named_with_what_it_offers(tmp_path: Path) -> None:
    root = _cgroup(tmp_path / "cgroupfs", controllers="hugetlb\n", kind=None)
    with pytest.raises(CgroupUnavailable, match=r"no memory controller .*it offers: hugetlb"):
        probe_controllers(str(root), ("memory",))


def test_holding_processes_is_read_from_cgroup_procs(tmp_path: Path) -> None:
    empty = _cgroup(tmp_path / "empty")
    hidden = _cgroup(tmp_path / "hidden", procs="0\n")  # a process another PID namespace holds
    assert not holds_processes(str(empty))
    assert holds_processes(str(hidden))
    assert not holds_processes(str(tmp_path / "gone"))
    divisible(str(empty))
    with pytest.raises(CgroupUnavailable, match="holds processes"):
        divisible(str(hidden))


def test_enabling_in_a_cgroup_that_holds_processes_is_refused_before_any_write(
    tmp_path: Path,
) -> None:
    """Even where tether may divide (its own scope), a process left in it stops the write."""
    scope = _cgroup(tmp_path / "tether-1-0123abcd.scope", procs="4242\n")
    with pytest.raises(CgroupUnavailable, match="holds processes"):
        cgroup_module.enable_controllers(str(scope), ("pids",))
    assert (scope / "cgroup.subtree_control").read_text() == ""
    (scope / "cgroup.procs").write_text("")
    cgroup_module.enable_controllers(str(scope), ("pids",))
    assert (scope / "cgroup.subtree_control").read_text() == "+pids"


def test_a_read_only_cgroup_file_system_names_what_works_in_a_container(
    service: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """podman's default: ``/sys/fs/cgroup`` mounted read-only (vm-hosts.md §4)."""

    class ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(os, "access", lambda *_args, **_kw: False)
    monkeypatch.setattr(os, "statvfs", lambda _path: ReadOnly())
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroups.plan_backends(("memory",), check=False)
    message = str(refused.value)
    assert "is mounted read-only (a container's default)" in message
    assert "--cgroupns=private" in message
    assert "--privileged" in message
    assert "without limits" in message
    assert "as root" not in message


@pytest.fixture
def container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root in a privileged container with a cgroup namespace of its own, no service manager:
    its ``/`` is a cgroup like any other (it has a ``cgroup.type``)."""
    top = _cgroup(tmp_path / "cgroupfs", procs="1\n7\n", controllers="cpu io memory pids\n")
    monkeypatch.setattr(run_cgroups, "find_hierarchies", lambda **_: [])
    monkeypatch.setattr(run_cgroups, "_privileged", lambda: True)
    monkeypatch.setattr(run_cgroups, "system_manager_address", lambda _environ: None)
    monkeypatch.setattr(os, "access", lambda *_args, **_kw: True)
    return top


def test_a_container_whose_root_cgroup_holds_its_processes_is_refused_with_what_works(
    container: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_cgroups, "own_cgroup", lambda: ("/", str(container)))
    before = _snapshot(container)
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroups.plan_backends(("memory", "pids"), check=False)
    message = str(refused.value)
    assert "holds processes of its own" in message
    assert "docker-in-docker" in message
    assert "tether makes the run's cgroup beside that leaf" in message
    assert "as root" not in message
    assert _snapshot(container) == before


def test_an_entry_point_that_left_a_leaf_gets_the_run_cgroup_beside_it(
    container: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docker-in-docker's entrypoint: every process moved into ``init``, the controllers
    enabled above it. tether moves nothing and enables nothing: it makes its cgroup beside."""
    (container / "cgroup.procs").write_text("")
    (container / "cgroup.subtree_control").write_text("cpu memory pids\n")
    leaf = _cgroup(container / "init", procs="1\n7\n", controllers="cpu memory pids\n")
    monkeypatch.setattr(run_cgroups, "own_cgroup", lambda: ("/init", str(leaf)))
    before = _snapshot(container)
    backends, _ = run_cgroups.plan_backends(("memory", "pids"), check=False)
    assert backends == {"memory": "cgroup2-beside", "pids": "cgroup2-beside"}
    assert _snapshot(container) == before
    (container / "cgroup.subtree_control").write_text("cpu pids\n")  # memory not enabled above
    with pytest.raises(CgroupUnavailable, match="docker-in-docker"):
        run_cgroups.plan_backends(("memory",), check=False)


def test_the_run_cgroup_beside_the_leaf_is_made_in_the_cgroup_above(
    container: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (container / "cgroup.procs").write_text("")
    (container / "cgroup.subtree_control").write_text("memory\n")
    leaf = _cgroup(container / "init", procs=f"{os.getpid()}\n")
    monkeypatch.setattr(cgroup_module, "own_cgroup", lambda: ("/init", str(leaf)))
    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        real_mkdir(path, mode)  # and the files the kernel gives a new cgroup
        for name in ("cgroup.procs", "cgroup.kill", "memory.max", "memory.oom.group"):
            Path(path, name).write_text("")

    monkeypatch.setattr(os, "mkdir", mkdir)
    made = cgroup_module.V2Cgroup.create(
        ("memory",), {"memory.max": "67108864"}, name="tether-42-0123abcd", beside=True
    )
    try:
        assert made.directory == str(container / "tether-42-0123abcd")
        assert made.path == "/tether-42-0123abcd"
        assert (container / "tether-42-0123abcd" / "memory.max").read_text() == "67108864"
        assert (container / "cgroup.subtree_control").read_text() == "memory\n"
        assert (leaf / "cgroup.procs").read_text() == f"{os.getpid()}\n"  # nothing moved
    finally:
        made.close_join()


@pytest.fixture
def kernel_writes(container: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Writes to the laid-out cgroupfs do what the kernel's do: ``0`` to a ``cgroup.procs``
    moves this process there; ``+memory -pids`` edits ``cgroup.subtree_control``. Each write
    is listed, relative to the container's cgroup."""
    writes: list[tuple[str, str]] = []
    me = str(os.getpid())

    def write(path: str, text: str) -> None:
        target = Path(path)
        writes.append((str(target.relative_to(container)), text))
        if target.name == "cgroup.procs":
            for procs in container.rglob("cgroup.procs"):
                procs.write_text("".join(f"{p}\n" for p in procs.read_text().split() if p != me))
            target.write_text(target.read_text() + me + "\n")
        elif target.name == "cgroup.subtree_control":
            enabled = set(target.read_text().split())
            for word in text.split():
                (enabled.add if word[0] == "+" else enabled.discard)(word[1:])
            target.write_text(" ".join(sorted(enabled)))
        else:
            target.write_text(text)

    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        real_mkdir(path, mode)
        _cgroup(Path(path), controllers="")

    real_rmdir = os.rmdir

    def rmdir(path: str | os.PathLike[str]) -> None:  # a cgroup goes with its files
        if not any(Path(path, name).is_dir() for name in os.listdir(path)):
            for name in os.listdir(path):
                Path(path, name).unlink()
        real_rmdir(path)

    monkeypatch.setattr(os, "rmdir", rmdir)
    monkeypatch.setattr(run_cgroups, "write_plain", write)
    monkeypatch.setattr(cgroup_module, "write_plain", write)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(run_cgroups, "own_cgroup", lambda: ("/", str(container)))
    return writes


def test_a_tether_run_entry_point_alone_in_its_cgroup_moves_into_a_leaf_and_undoes_it(
    container: Path, kernel_writes: list[tuple[str, str]]
) -> None:
    """``podman run --privileged IMAGE tether run --memory-max ...``: the caller is tether's
    own and the only process there, so it steps into a leaf; after the run, all is as before."""
    me = os.getpid()
    (container / "cgroup.procs").write_text(f"{me}\n")
    before = _snapshot(container)
    backends, _ = run_cgroups.plan_backends(("memory",), check=False, mover=me)
    assert backends == {"memory": "cgroup2-own-leaf"}
    with pytest.raises(CgroupUnavailable, match="holds processes"):
        run_cgroups.plan_backends(("memory",), check=False)  # an API caller: not tether's own
    assert _snapshot(container) == before  # planning wrote nothing
    leaf = run_cgroups.OwnLeaf.enter(("memory",))
    name = Path(leaf.leaf).name
    assert name.startswith(f"tether-{me}-")
    assert (container / "cgroup.procs").read_text() == ""
    assert (container / "cgroup.subtree_control").read_text() == "memory"
    assert run_cgroups._beside("/" + name, leaf.leaf, "memory")  # what the supervisor sees
    leaf.leave()
    assert kernel_writes == [
        (f"{name}/cgroup.procs", "0"),
        ("cgroup.subtree_control", "+memory"),
        ("cgroup.subtree_control", "-memory"),
        ("cgroup.procs", "0"),
    ]
    assert _snapshot(container).keys() == before.keys()
    assert (container / "cgroup.procs").read_text() == f"{me}\n"
    assert (container / "cgroup.subtree_control").read_text() == ""


def test_an_entry_point_that_is_not_alone_is_refused(
    container: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_cgroups, "own_cgroup", lambda: ("/", str(container)))
    (container / "cgroup.procs").write_text(f"1\n{os.getpid()}\n")  # a shell started tether
    with pytest.raises(CgroupUnavailable, match="docker-in-docker"):
        run_cgroups.plan_backends(("memory",), check=False, mover=os.getpid())

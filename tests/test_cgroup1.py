"""cgroup v1, file by file: the parsers (hypothesis), and a directory laid out like cgroupfs.

The real kernel is in ``test_limits_cgroup.py``; here the text of
``/proc/self/mountinfo`` and ``/proc/self/cgroup`` is made up, and a v1
cgroup is a plain directory with the files a kernel would have.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.core.limits import LimitError, limit_files_v1
from tether.linux.cgroup import CgroupUnavailable
from tether.linux.cgroup1 import (
    Hierarchy,
    V1Cgroup,
    parse_v1_mounts,
    parse_v1_paths,
    read_usage_v1,
)

HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /lxc/box /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /mnt/with\\040space rw - cgroup cgroup ro,freezer
"""
#: An SELinux host's v1 mounts carry ``seclabel``; agents and flags name no controller.
SELINUX_MOUNTINFO = """\
29 23 0:25 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,seclabel,memory
30 23 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,seclabel,cpu,cpuacct
31 23 0:27 / /cg/systemd rw - cgroup cgroup rw,seclabel,xattr,release_agent=/x,name=systemd
32 23 0:28 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,seclabel,cpuset,clone_children
"""


HYBRID_CGROUP = """\
9:name=systemd:/user.slice
8:pids:/lxc/box/job
4:memory:/process_api/d711
2:cpu,cpuacct:/
0::/user.slice
"""


def test_mounts_name_each_hierarchys_controllers_root_and_place() -> None:
    mounts = parse_v1_mounts(HYBRID_MOUNTINFO)
    assert (frozenset({"cpu", "cpuacct"}), "/", "/sys/fs/cgroup/cpu,cpuacct") in mounts
    assert (frozenset({"pids"}), "/lxc/box", "/sys/fs/cgroup/pids") in mounts
    assert (frozenset({"freezer"}), "/", "/mnt/with space") in mounts
    assert all(place != "/sys/fs/cgroup/unified" for _c, _r, place in mounts)  # v2 is not v1
    assert all(place != "/sys/fs/cgroup" for _c, _r, place in mounts)  # nor is a tmpfs


def test_mount_flags_are_not_taken_for_controllers() -> None:
    controllers = {found for found, _root, _place in parse_v1_mounts(SELINUX_MOUNTINFO)}
    assert controllers == {
        frozenset({"memory"}),
        frozenset({"cpu", "cpuacct"}),
        frozenset({"name=systemd"}),
        frozenset({"cpuset"}),
    }
    assert frozenset({"name=systemd"}) in {c for c, _r, _p in parse_v1_mounts(HYBRID_MOUNTINFO)}


def test_paths_are_by_hierarchy_and_leave_out_v2() -> None:
    paths = parse_v1_paths(HYBRID_CGROUP)
    assert paths[frozenset({"memory"})] == "/process_api/d711"
    assert paths[frozenset({"cpu", "cpuacct"})] == "/"
    assert paths[frozenset({"name=systemd"})] == "/user.slice"
    assert frozenset() not in paths
    assert frozenset({""}) not in paths


@given(st.text())
def test_the_parsers_take_any_text(text: str) -> None:
    for controllers, root, place in parse_v1_mounts(text):
        assert isinstance(controllers, frozenset)
        assert root
        assert place
    for controllers, path in parse_v1_paths(text).items():
        assert controllers
        assert isinstance(path, str)


@given(
    st.lists(st.sampled_from(["memory", "cpu", "cpuacct", "pids"]), min_size=1, unique=True),
    st.text(alphabet="abc/:-_0123456789", min_size=1).map(lambda p: "/" + p.lstrip("/")),
)
def test_a_cgroup_line_parses_back(controllers: list[str], path: str) -> None:
    line = f"7:{','.join(controllers)}:{path}\n"
    assert parse_v1_paths(line) == {frozenset(controllers): path}


def test_v1_files_count_memory_and_swap_together_and_write_them_in_order() -> None:
    files = limit_files_v1({"memory_max": 64, "memory_swap_max": 16, "cpu_max": 0.2, "pids_max": 9})
    assert files["memory"] == [
        ("memory.limit_in_bytes", "64"),
        ("memory.memsw.limit_in_bytes", "80"),  # memory + swap, after the memory limit
        ("memory.oom_control", "0"),  # the OOM killer on
    ]
    assert files["cpu"] == [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "20000")]
    assert files["pids"] == [("pids.max", "9")]
    with pytest.raises(LimitError, match="needs memory_max too"):
        limit_files_v1({"memory_swap_max": 0})


@given(st.integers(1, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_memsw_is_never_below_the_memory_limit(memory: int, swap: int) -> None:
    written = dict(limit_files_v1({"memory_max": memory, "memory_swap_max": swap})["memory"])
    assert memory <= int(written["memory.memsw.limit_in_bytes"]) <= 2**63 - 1


def _cgroupfs(parent: Path) -> Hierarchy:
    """A hierarchy of one (made-up) cgroup, ``/box``, at ``parent``."""
    parent.mkdir(exist_ok=True)
    return Hierarchy(frozenset({"memory"}), str(parent), "/box", str(parent))


def test_a_v1_cgroup_is_made_written_joined_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hierarchy = _cgroupfs(tmp_path / "memory")
    real_mkdir = os.mkdir

    def kernel_mkdir(path: str, mode: int = 0o777) -> None:  # cgroupfs fills a new directory
        real_mkdir(path, mode)
        for name in ("cgroup.procs", "memory.limit_in_bytes", "memory.oom_control"):
            Path(path, name).write_text("")

    monkeypatch.setattr(os, "mkdir", kernel_mkdir)
    made = V1Cgroup.create(
        hierarchy,
        "tether-1-00000000",
        [("memory.limit_in_bytes", "64"), ("memory.oom_control", "0")],
    )
    try:
        assert made.path == "/box/tether-1-00000000"
        assert Path(made.directory, "memory.limit_in_bytes").read_text() == "64"
        assert made.join_descriptor is not None
        with pytest.raises(
            CgroupUnavailable, match=r"has no memory.memsw.limit_in_bytes.*swapaccount"
        ):
            V1Cgroup.create(hierarchy, "tether-1-11111111", [("memory.memsw.limit_in_bytes", "1")])
        # (A kernel's rmdir takes a half-made cgroup's files along; a plain directory keeps them.)
    finally:
        made.close_join()
    for name in os.listdir(made.directory):
        os.unlink(os.path.join(made.directory, name))  # what the kernel's rmdir would take along
    assert made.discard()
    assert not Path(made.directory).exists()


def test_usage_is_read_from_each_hierarchys_files(tmp_path: Path) -> None:
    memory, cpu, pids = (tmp_path / name for name in ("memory", "cpu", "pids"))
    for directory in (memory, cpu, pids):
        directory.mkdir()
    (memory / "memory.max_usage_in_bytes").write_text("67108864\n")
    (memory / "memory.failcnt").write_text("41\n")
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (cpu / "cpuacct.usage").write_text("2500000000\n")
    (cpu / "cpuacct.usage_user").write_text("2000000000\n")
    (pids / "pids.events").write_text("max 7\n")
    cgroups = [
        V1Cgroup(frozenset({"memory"}), "/m", str(memory), -1),
        V1Cgroup(frozenset({"cpu", "cpuacct"}), "/c", str(cpu), -1),
        V1Cgroup(frozenset({"pids"}), "/p", str(pids), -1),
    ]
    assert read_usage_v1(cgroups) == {
        "cpu_seconds": 2.5,
        "cpu_user_seconds": 2.0,
        "cpu_system_seconds": None,  # no cpuacct.usage_sys: an old kernel
        "memory_peak_bytes": 64 * 2**20,
        "memory_limit_hits": 41,
        "oom_kills": 1,
        "under_oom": 0,
        "pids_max_refusals": 7,
    }

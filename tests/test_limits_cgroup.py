"""Limits the kernel enforces, on real processes: memory, processes, CPU.

They run wherever something can enforce the limit: the run's own cgroup v2
with the controller enabled, or (a hybrid or legacy host, as root: this
project's CI) the run's own cgroup in the controller's v1 hierarchy. Each
test skips, saying why, only where nothing can (a non-root user on cgroup v1,
which is then refused: tested here too). Nothing here asserts a time: the
CPU test compares the CPU time the kernel counted with the wall-clock time,
loosely.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tether
from conftest import (
    BOUND,
    ROOT,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.linux import cgroup as cgroup_module
from tether.linux import cgroup1 as cgroup1_module
from tether.linux import run_cgroups as run_cgroups_module
from tether.linux.cgroup import (
    CgroupUnavailable,
    _cgroup2_mounts,
    _directories_of,
    cgroup_of,
    own_cgroup,
)
from tether.linux.cgroup1 import Hierarchy, find_hierarchies, parse_v1_paths
from tether.linux.run_cgroups import SCOPE_BACKENDS, plan_backends
from tether.supervisor.cgroup_choice import prepare_run_cgroups


def require(*controllers: str) -> None:
    """Skip where nothing can enforce ``controllers`` (a non-root user on cgroup v1)."""
    try:
        plan_backends(controllers)
    except CgroupUnavailable as why:
        pytest.skip(f"nothing can enforce {', '.join(controllers)} for tether here: {why}")


def require_v1(*controllers: str) -> list[Hierarchy]:
    """The cgroup v1 hierarchies of ``controllers``, which this process may divide; or skip.

    A hybrid or legacy host, as root (systemd delegates no cgroup v1 to a
    user): this project's development machine, a Debian 12 guest booted with
    ``systemd.unified_cgroup_hierarchy=0``. Not a pure cgroup v2 host.
    """
    hierarchies = []
    for controller in controllers:
        found = [h for h in find_hierarchies() if controller in h.controllers]
        if not found or not os.access(found[0].directory, os.W_OK):
            pytest.skip(
                f"needs the {controller} controller on a cgroup v1 hierarchy this user may "
                "divide (a hybrid or legacy host, as root); here it is "
                + ("not writable" if found else "not bound to cgroup v1")
            )
        hierarchies.append(found[0])
    return hierarchies


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def backend(controller: str) -> str:
    """What enforces ``controller`` here (``cgroup2`` or ``cgroup1``)."""
    return plan_backends((controller,))[0][controller]


def run_cgroups_of(pid: int) -> list[Path]:
    """The directories of the run's cgroups ``pid`` is in, in every hierarchy (tether's only)."""
    found: list[Path] = []
    for hierarchy in find_hierarchies():
        path = parse_v1_paths(Path(f"/proc/{pid}/cgroup").read_text())[hierarchy.controllers]
        if "/tether-" in path:
            found.append(Path(hierarchy.directory) / path.rsplit("/", 1)[1])
    v2 = cgroup_of(pid)
    if v2 is not None and "/tether-" in v2:  # below this process's cgroup, or in a scope
        found.extend(Path(directory) for directory in _directories_of(v2, _cgroup2_mounts()))
    return found


def named_in(cgroup_text: str) -> set[str]:
    """The tether cgroup names in a ``/proc/<pid>/cgroup`` text."""
    return {line.rsplit("/", 1)[1] for line in cgroup_text.splitlines() if "/tether-" in line}


def leftovers(names: set[str]) -> list[str]:
    """Any cgroup of those names left in any hierarchy, v2 included (in a scope made for it
    too: ``<name>.scope`` anywhere in the v2 hierarchy, which systemd removes once empty)."""
    parents = [Path(h.directory) for h in find_hierarchies()]
    with contextlib.suppress(CgroupUnavailable):
        parents.append(Path(own_cgroup()[1]))
    left = [str(parent / name) for parent in parents for name in names if (parent / name).exists()]
    end = time.monotonic() + BOUND
    for name in names:
        for _root, mount in _cgroup2_mounts():
            for scope in Path(mount).glob(f"**/{name}.scope"):
                while scope.exists() and time.monotonic() < end:
                    time.sleep(0.02)
                if scope.exists():
                    left.append(str(scope))
    return left


@pytest.fixture(params=["zygote", "plain"])
def door(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The API's two paths to a supervisor: forked by the zygote, or a fresh interpreter."""
    monkeypatch.setenv("TETHER_ZYGOTE", "1" if request.param == "zygote" else "0")
    return str(request.param)


@pytest.mark.usefixtures("door")
def test_a_tree_over_memory_max_is_oom_killed_whole_and_recorded_as_such(
    tmp_path: Path, processes: Processes
) -> None:
    require("memory")
    ready = ReadyPipe(tmp_path / "ready")
    record = tmp_path / "r.json"
    # With swap, the hog would go on in swap for a long time: none for it.
    swap = {"memory_swap_max": 0} if len(Path("/proc/swaps").read_text().splitlines()) > 1 else {}
    try:
        try:
            handle = tether.launch(
                fixture("hog", "memory", str(ready.path)),
                memory_max="64M",
                deadline=BOUND,
                record=record,
                **swap,  # type: ignore[arg-type]
            )
        except tether.LaunchError as error:
            if "memory.swap.max" not in str(error):
                raise
            pytest.skip(f"this machine has swap but no swap accounting: {error}")
        leader, sibling = ready.ready_pids()
        processes.track(leader, sibling, handle.supervisor_pid)
        outcome = handle.wait()
    finally:
        ready.close()
    assert outcome.reason is tether.Reason.COMPLETED  # tether did not stop it: the kernel did
    assert outcome.returncode == -9
    assert outcome.oom_killed is True
    with pytest.raises(tether.CommandFailed, match="OOM killer"):
        outcome.check()
    assert not alive(sibling)
    data = json.loads(record.read_text())
    validate_record(data)
    assert data["oom_killed"] is True
    assert data["limits"]["memory_max"] == 64 * 2**20
    assert data["limits_enforced_by"]["memory_max"] == backend("memory")
    usage = data["tree_usage"]
    assert usage["oom_kills"] >= 1
    if usage["memory_peak_bytes"] is not None:  # memory.peak: Linux 5.19
        assert usage["memory_peak_bytes"] <= 64 * 2**20
        assert usage["memory_peak_bytes"] > 32 * 2**20
    shown = subprocess.run(
        tether_argv("show", str(record)), capture_output=True, text=True, check=True
    ).stdout
    lead = "killed by the OOM killer at its memory limit of 64 MiB"
    title, reason = shown.splitlines()[:3:2]
    assert title == f"run (no label): {lead} (reason completed)"
    assert reason.split(None, 1) == [
        "reason",
        f"{lead} ({usage['oom_kills']} OOM kill"
        + ("s" if usage["oom_kills"] > 1 else "")
        + "); recorded as completed",
    ]
    assert str(outcome).startswith(f"{lead}: the command was killed by SIGKILL (status 137); ")
    assert repr(outcome).startswith(f"Outcome(oom_summary={lead!r}, reason=")
    assert outcome.oom_summary == lead
    listed = subprocess.run(
        tether_argv("ls", str(tmp_path)), capture_output=True, text=True, check=True
    ).stdout
    assert f" {lead} (completed) " in listed.splitlines()[1]


def test_a_fork_loop_is_stopped_at_pids_max() -> None:
    require("pids")
    outcome = tether.run(
        fixture("hog", "forks"), pids_max=50, capture_output=True, text=True, grace=1
    )
    assert isinstance(outcome.stdout, str)
    made, why = outcome.stdout.split()
    assert why == "EAGAIN"
    assert 0 < int(made) < 50
    assert outcome.ok
    data: dict[str, Any] = outcome.read_record()
    assert data["tree_usage"]["pids_max_refusals"] >= 1
    assert data["limits_enforced_by"]["pids_max"] == backend("pids")
    assert data["stragglers"] >= 1  # the children, stopped once the command exited


def test_a_busy_tree_under_cpu_max_gets_about_its_share() -> None:
    require("cpu")
    outcome = tether.run(fixture("hog", "cpu", "2"), cpu_max=0.2)
    assert outcome.ok
    assert outcome.cpu_seconds is not None
    assert outcome.elapsed_seconds
    share = outcome.cpu_seconds / outcome.elapsed_seconds
    # Loosely: the kernel throttles per 100 ms period; the interpreter's start is unthrottled
    # by nothing but the same limit. Far below the 2 CPUs the spinning threads would take.
    assert 0.05 < share < 0.5, share
    data: dict[str, Any] = outcome.read_record()
    assert data["limits_enforced_by"]["cpu_max"] == backend("cpu")


def test_the_cli_sets_limits_too(tmp_path: Path) -> None:
    require("memory", "pids", "cpu")
    record = tmp_path / "r.json"
    result = subprocess.run(
        tether_argv(
            "run",
            "--memory-max",
            "256M",
            "--cpus",
            "1.5",
            "--pids-max",
            "64",
            "--record",
            str(record),
            "--",
            "cat",
            "/proc/self/cgroup",
        ),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    names = named_in(result.stdout)
    assert len(names) == 1  # one name, in every hierarchy the run has a cgroup in
    assert not leftovers(names)
    data = json.loads(record.read_text())
    assert data["limits"] == {
        "memory_max": 256 * 2**20,
        "memory_swap_max": None,
        "cpu_max": 1.5,
        "pids_max": 64,
    }
    assert data["oom_killed"] is False
    assert data["limits_enforced_by"] == {
        "memory_max": backend("memory"),
        "memory_swap_max": None,
        "cpu_max": backend("cpu"),
        "pids_max": backend("pids"),
    }


def test_the_cli_run_over_memory_max_is_oom_killed(tmp_path: Path, processes: Processes) -> None:
    require("memory")
    ready = ReadyPipe(tmp_path / "ready")
    record = tmp_path / "r.json"
    try:
        caller = processes.start(
            tether_argv(
                "run",
                "-v",
                "--memory-max",
                "64M",
                "--record",
                str(record),
                "--",
                *fixture("hog", "memory", str(ready.path)),
            ),
            stderr=subprocess.PIPE,
        )
        leader, sibling = ready.ready_pids()
        processes.track(leader, sibling)
        _out, err = caller.communicate(timeout=BOUND)
    finally:
        ready.close()
    assert caller.returncode == 137, err
    assert not alive(sibling)
    data = json.loads(record.read_text())
    validate_record(data)
    assert data["oom_killed"] is True
    assert data["tree_usage"]["memory_peak_bytes"] <= 64 * 2**20
    verdict = err.decode().splitlines()[-1]
    assert verdict.startswith(
        "tether: killed by the OOM killer at its memory limit of 64 MiB: "
        "the command was killed by SIGKILL (status 137); "
    ), err


def test_twenty_runs_with_limits_at_once_each_in_its_own_cgroups() -> None:
    require("memory", "pids")
    handles = [
        tether.launch(
            ["cat", "/proc/self/cgroup"],
            memory_max="128M",
            pids_max=50,
            stdout=tether.PIPE,
            record=False,
            deadline=BOUND,
        )
        for _ in range(20)
    ]
    names: list[str] = []
    for handle in handles:
        assert handle.stdout is not None
        text = handle.stdout.read().decode()
        assert handle.wait().ok
        mine = named_in(text)
        assert len(mine) == 1
        names.extend(mine)
    assert len(set(names)) == 20
    assert not leftovers(set(names))


def _wait_reaped(pid: int) -> None:
    end = time.monotonic() + BOUND
    while os.path.exists(f"/proc/{pid}"):
        assert time.monotonic() < end, f"{pid} was never reaped"
        time.sleep(0.01)


def test_a_killed_supervisors_cgroups_are_removed_by_the_next_run_and_nothing_else(
    tmp_path: Path, processes: Processes, monkeypatch: pytest.MonkeyPatch
) -> None:
    require("memory")
    monkeypatch.setenv("TETHER_ZYGOTE", "0")  # the supervisor names the cgroups: it dies here
    ready = ReadyPipe(tmp_path / "ready")
    try:
        handle = tether.launch(
            ["sh", "-c", f"echo ready $$ > {ready.path}; exec sleep 600"],
            memory_max="64M",
            record=False,
            deadline=BOUND,
        )
        (command,) = ready.ready_pids()
        processes.track(command, handle.supervisor_pid)
        left = run_cgroups_of(command)
        assert left
        os.kill(handle.supervisor_pid, signal.SIGKILL)
        handle.wait()
        assert wait_gone(command)
        _wait_reaped(handle.supervisor_pid)
    finally:
        ready.close()
    if backend("memory") in SCOPE_BACKENDS:
        # The run's cgroup is in a scope of its own, which systemd removes, cgroups and
        # all, once the caller has killed what was left in it: nothing for a next run.
        assert leftovers({d.name for d in left}) == []
        return
    assert [d for d in left if not d.exists()] == []  # a SIGKILLed supervisor's leftovers
    # Beside them, what tether did not make, or what something still runs in:
    if backend("memory") == "cgroup1":
        (memory,) = [h for h in find_hierarchies() if "memory" in h.controllers]
        parent = Path(memory.directory)
    else:
        parent = Path(own_cgroup()[1])
    foreign = Path(parent, "not-tether-0badcafe")
    busy = Path(parent, f"tether-{handle.supervisor_pid}-0badbeef")
    foreign.mkdir()
    busy.mkdir()
    squatter = processes.start([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        (busy / "cgroup.procs").write_text(str(squatter.pid))
        assert tether.run(["true"], memory_max="64M", record=False).ok
        assert [directory for directory in left if directory.exists()] == []
        assert foreign.exists()
        assert busy.exists()
        assert squatter.poll() is None
    finally:
        squatter.kill()
        squatter.wait()
        for directory in (foreign, busy):
            with contextlib.suppress(OSError):
                directory.rmdir()


def test_a_non_root_caller_on_cgroup_v1_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    require("memory")
    if backend("memory") != "cgroup1":
        pytest.skip("the memory controller is not bound to cgroup v1 here")
    tmp_path.chmod(0o777)
    # The checkout's own source first: tox keeps its environments in a 0700 directory,
    # whose site-packages nobody cannot read.
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path]),
    }

    def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
        setpriv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        return subprocess.run(
            [*setpriv, *argv], capture_output=True, text=True, env=env, check=False, timeout=BOUND
        )

    probe = as_nobody(sys.executable, "-c", "import tether.cli.main")
    if probe.returncode != 0:
        # e.g. a pyenv build whose libpython lies under root's 0700 home
        pytest.skip(f"tether cannot run as nobody here: {probe.stderr.strip()[-200:]}")
    marker = tmp_path / "started"
    result = as_nobody(
        *tether_argv("run", "--no-record", "--memory-max", "64M", "--", "touch", str(marker))
    )
    assert result.returncode == 125, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "cgroup v1" in result.stderr
    assert "run tether as root" in result.stderr
    assert not marker.exists()


def test_limits_auto_enforces_here() -> None:
    """``tether.ray``'s ``limits="auto"`` asks this; where anything can enforce, it is ``None``."""
    require("memory", "cpu")
    from tether.caller.request import limits_refusal

    assert limits_refusal({"memory_max": "1G", "cpu_max": 1}) is None


def test_prune_removes_stale_cgroups_of_tethers_naming_only(
    tmp_path: Path, processes: Processes
) -> None:
    (memory,) = require_v1("memory")
    gone = processes.start(["true"])
    gone.wait()
    stale = Path(memory.directory, f"tether-{gone.pid}-0badcafe")
    foreign = Path(memory.directory, f"tetherish-{gone.pid}-0badcafe")
    stale.mkdir()
    foreign.mkdir()
    try:
        result = subprocess.run(
            tether_argv("prune", str(tmp_path)), capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        assert not stale.exists()
        assert foreign.exists()
        assert "stale cgroup" in result.stderr
    finally:
        for directory in (stale, foreign):
            with contextlib.suppress(OSError):
                directory.rmdir()


def test_a_run_made_again_finds_its_cgroups_kept_and_sweeps_each_place_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spare's path (a run's cgroups made ahead, after the zygote's own first look): this
    process's cgroups are not checked again (each check reads every pid of a cgroup, a
    hierarchy's root here), and each place tether makes cgroups in is swept once, where the
    run makes its own among them."""
    require("memory", "pids")
    limits = {"memory_max": "64M", "pids_max": 64}
    first = prepare_run_cgroups(limits, warm=False, supervisor=False)
    first.discard()
    if first.deferred:
        pytest.skip("the run's cgroups here are a systemd scope's, which the supervisor asks for")
    checked: list[str] = []
    swept: list[str] = []
    real_lists, real_remove_stale = cgroup_module.lists, cgroup_module.remove_stale

    def lists(directory: str, pid: int) -> bool:
        checked.append(directory)
        return real_lists(directory, pid)

    def remove_stale(parent: str) -> int:
        swept.append(parent)
        return real_remove_stale(parent)

    for module in (cgroup_module, cgroup1_module, run_cgroups_module):
        for name, replacement in (("lists", lists), ("remove_stale", remove_stale)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, replacement)
    second = prepare_run_cgroups(limits, warm=False, supervisor=False)
    monkeypatch.undo()
    try:
        assert second.refusal is None
        assert checked == []
        assert len(swept) == len(set(swept)), swept
        places = {
            h.directory
            for h in find_hierarchies()
            if h.controllers & {"memory", "cpu", "cpuacct", "pids"}
        }
        with contextlib.suppress(CgroupUnavailable):
            places.update((own_cgroup()[1], os.path.dirname(own_cgroup()[1])))
        assert set(swept) <= places
        assert {os.path.dirname(directory) for directory in second.directories} <= set(swept)
    finally:
        second.discard()


#: Moves itself into a new cgroup in the v1 hierarchy ``sys.argv[1]`` and back.
_MOVED_V1 = """
import os, sys
from pathlib import Path
from tether.linux import cgroup1
directory = sys.argv[1]
def mine():
    return [h.directory for h in cgroup1.find_hierarchies() if h.directory.startswith(directory)]
assert mine() == [directory], mine()
checked = []
real_lists = cgroup1.lists
cgroup1.lists = lambda at, pid: checked.append(at) or real_lists(at, pid)
assert mine() == [directory] and checked == [], checked  # kept
below = Path(directory, f"moved-{os.getpid()}")
below.mkdir()
try:
    (below / "cgroup.procs").write_text(str(os.getpid()))
    try:
        moved = mine()
    finally:
        Path(directory, "cgroup.procs").write_text(str(os.getpid()))
finally:
    below.rmdir()
assert moved == [str(below)], moved
assert str(below) in checked, checked  # found again, and believed once it listed this one
assert mine() == [directory]
"""


def test_the_v1_cgroups_are_kept_only_while_the_process_stays_in_them() -> None:
    """As :func:`~tether.linux.cgroup.own_cgroup` keeps its answer, in a v1 hierarchy."""
    (pids,) = require_v1("pids")
    done = subprocess.run(
        [sys.executable, "-c", _MOVED_V1, pids.directory],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


#: The v1-alone run, as the supervisor makes it: ``sys.argv[1]`` is the bound.
_V1_ALONE = """
import sys, time
from pathlib import Path
from tether.linux import cgroup as cgroup_module
from tether.linux.cgroup1 import find_hierarchies
from tether.supervisor.command import start_command
from tether.supervisor.process_tree import ProcessTree
from tether.supervisor.launch import LaunchPlan

bound = float(sys.argv[1])
cgroup_module._cgroup2_mounts = list  # a legacy host: no cgroup2 mounted
command = start_command(
    LaunchPlan(
        argv=("sh", "-c", "sleep 60 & exec sleep 60"),
        limits={"memory_max": "64M", "pids_max": 50},
    )
)
print(command.pid, flush=True)
cgroups = command.cgroup
assert cgroups is not None
assert cgroups.v2 is None
assert cgroups.enforced_by == {"memory_max": "cgroup1", "pids_max": "cgroup1"}, cgroups.enforced_by
directories = [Path(directory) for directory in cgroups.directories]
assert len(directories) >= 2, directories  # memory, pids (and cpuacct, for the CPU time)
assert cgroups.holds(command.pid)
(memory,) = [h.directory for h in find_hierarchies() if "memory" in h.controllers]
(limit,) = [d / "memory.limit_in_bytes" for d in directories if str(d.parent) == memory]
assert limit.read_text().strip() == str(64 * 2**20)
tree = ProcessTree(leader=command.pid, pgid=command.pgid, pidfd=command.pidfd, cgroup=cgroups)
assert tree.kill_everything(lambda seconds: time.sleep(min(seconds, 0.01)), bound=bound)
tree.reap_leader(block=True)
tree.reap_adopted()
usage = cgroups.usage()
assert usage["oom_kills"] == 0, usage
assert usage["cpu_seconds"] is not None, usage  # from cpuacct, there being no cpu.stat
assert tree.release()
assert [directory for directory in directories if directory.exists()] == []
"""


def test_a_host_without_cgroup_v2_enforces_and_stops_through_v1_alone(
    processes: Processes,
) -> None:
    """A legacy host (no cgroup2 mounted): the v1 cgroups hold the tree, and go after it.

    As the supervisor does it, in a process of its own: it forks from a single thread
    (this test's process may have more, and Python 3.12 on warns of a fork there).
    """
    require_v1("memory", "pids")
    done = subprocess.run(
        [sys.executable, "-P", "-W", "error::DeprecationWarning", "-c", _V1_ALONE, str(BOUND)],
        capture_output=True,
        text=True,
        timeout=4 * BOUND,
        check=False,
    )
    for word in done.stdout.split():
        processes.track(int(word))  # the command, should the run have failed half-way
    assert done.returncode == 0, done.stderr

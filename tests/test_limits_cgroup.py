"""Limits the kernel enforces, on real processes: memory, processes, CPU.

These need a cgroup v2 in which tether can enable the ``memory``, ``pids``
and ``cpu`` controllers below its own cgroup; each test skips, saying why,
where the machine has none (a cgroup v1 machine, a cgroup that holds
processes of its own and is not the root). The refusal on such machines is
tested in ``test_limits.py``. Nothing here asserts a time: the CPU test
compares the CPU time the kernel counted with the wall-clock time, loosely.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tether
from conftest import BOUND, Processes, ReadyPipe, alive, fixture, tether_argv, validate_record
from tether.linux.cgroup import CgroupUnavailable
from tether.linux.run_cgroups import plan_backends


def require(*controllers: str) -> None:
    """Skip where nothing can enforce ``controllers`` (a non-root user on cgroup v1)."""
    try:
        plan_backends(controllers)
    except CgroupUnavailable as why:
        pytest.skip(f"nothing can enforce {', '.join(controllers)} for tether here: {why}")


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


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
    usage = data["tree_usage"]
    assert usage["oom_kills"] >= 1
    if usage["memory_peak_bytes"] is not None:  # memory.peak: Linux 5.19
        assert usage["memory_peak_bytes"] <= 64 * 2**20
        assert usage["memory_peak_bytes"] > 32 * 2**20
    shown = subprocess.run(
        tether_argv("show", str(record)), capture_output=True, text=True, check=True
    ).stdout
    assert "OOM KILLED" in shown
    assert "over its memory limit of 64.0 MiB" in shown


def test_a_fork_loop_is_stopped_at_pids_max() -> None:
    require("pids")
    outcome = tether.run(
        fixture("hog", "forks"), pids_max=20, capture_output=True, text=True, grace=1
    )
    assert isinstance(outcome.stdout, str)
    made, why = outcome.stdout.split()
    assert why == "EAGAIN"
    assert int(made) < 20
    assert outcome.ok
    data: dict[str, Any] = outcome.read_record()
    assert data["tree_usage"]["pids_max_refusals"] >= 1
    assert data["stragglers"] >= 1  # the children, stopped once the command exited


def test_a_busy_tree_under_cpu_max_gets_about_its_share() -> None:
    require("cpu")
    outcome = tether.run(fixture("hog", "cpu", "2"), cpu_max=0.25)
    assert outcome.ok
    assert outcome.cpu_seconds is not None
    assert outcome.elapsed_seconds
    share = outcome.cpu_seconds / outcome.elapsed_seconds
    # Loosely: the kernel throttles per 100 ms period; the interpreter's start is unthrottled
    # by nothing but the same limit. Far below the 2 CPUs the spinning threads would take.
    assert 0.05 < share < 0.5, share


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
    cgroup = result.stdout.strip().split("::", 1)[1]
    assert "tether-" in cgroup
    data = json.loads(record.read_text())
    assert data["limits"] == {
        "memory_max": 256 * 2**20,
        "memory_swap_max": None,
        "cpu_max": 1.5,
        "pids_max": 64,
    }
    assert data["oom_killed"] is False

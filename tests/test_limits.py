"""Resource limits: the pure parsers (hypothesis), and a refusal where no cgroup can take them.

The limits' enforcement by the kernel is tested on real processes in
``test_limits_cgroup.py``, where the machine allows it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tether
from conftest import skip_without_cgroup, tether_argv, validate_record
from tether.core.limits import (
    LimitError,
    format_size,
    limit_controllers,
    limit_files,
    parse_count,
    parse_cpus,
    parse_limits,
    parse_size,
)
from tether.core.spec import RunSpec, SpecError
from tether.linux import cgroup as cgroup_module


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


# -- parsing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1", 1),
        ("512M", 512 * 2**20),
        ("8G", 8 * 2**30),
        ("8g", 8 * 2**30),
        ("8GiB", 8 * 2**30),
        ("8GB", 8 * 2**30),
        ("1.5G", 3 * 2**29),
        (" 64k ", 64 * 1024),
        ("2T", 2 * 2**40),
        (4096, 4096),
        (1e6, 1_000_000),
    ],
)
def test_sizes_take_binary_suffixes(text: object, size: int) -> None:
    assert parse_size(text, flag="--memory-max") == size


@pytest.mark.parametrize(
    "value",
    [
        "",
        "G",
        "8X",
        "-1",
        "0",
        0,
        -5,
        "1e3",
        "nan",
        math.nan,
        math.inf,
        True,
        None,
        [1],
        "99999999E",
        2**80,
    ],
)
def test_bad_sizes_are_refused_naming_the_flag(value: object) -> None:
    with pytest.raises(LimitError, match=r"^--memory-max: "):
        parse_size(value, flag="--memory-max")


def test_swap_may_be_zero() -> None:
    assert parse_size("0", flag="memory_swap_max", allow_zero=True) == 0
    assert parse_limits({"memory_swap_max": 0}) == {"memory_swap_max": 0}


@pytest.mark.parametrize("value", ["0", 0, -1, "0.001", "abc", math.nan, "inf", True, 2**30, ""])
def test_bad_cpus_are_refused(value: object) -> None:
    with pytest.raises(LimitError, match=r"^--cpus: "):
        parse_cpus(value, flag="--cpus")


@pytest.mark.parametrize("value", ["0", 0, -1, "1.5", 1.5, "x", True, ""])
def test_bad_counts_are_refused(value: object) -> None:
    with pytest.raises(LimitError, match=r"^--pids-max: "):
        parse_count(value, flag="--pids-max")


@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.none(), st.booleans()))
def test_size_parser_returns_a_positive_size_or_refuses(value: object) -> None:
    try:
        size, message = parse_size(value, flag="f"), None
    except LimitError as error:
        size, message = None, str(error)
    if message is not None:
        assert message.startswith("f: ")
        assert "\n" not in message
        assert len(message) < 200
    else:
        assert size is not None
        assert 0 < size < 2**63


@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.none()))
@example(1e308)  # finite, and its quota's rounding overflowed
@example("1e308")
def test_cpu_parser_returns_a_quota_the_kernel_takes_or_refuses(value: object) -> None:
    try:
        cpus, message = parse_cpus(value, flag="f"), None
    except LimitError as error:
        cpus, message = 0.0, str(error)
    if message is not None:
        assert message.startswith("f: ")
        assert len(message) < 200
    else:
        quota, period = limit_files({"cpu_max": cpus})["cpu.max"].split()
        assert int(period) == 100_000
        assert int(quota) >= 1000


@given(st.integers(min_value=1, max_value=2**62), st.sampled_from(["", "K", "M", "G"]))
def test_a_formatted_size_names_its_unit(number: int, unit: str) -> None:
    assert format_size(number).split()[-1] in ("B", "KiB", "MiB", "GiB", "TiB")


def test_limits_become_cgroup_files_and_controllers() -> None:
    limits = parse_limits(
        {"memory_max": "64M", "memory_swap_max": 0, "cpu_max": "1.5", "pids_max": "512"}
    )
    assert limit_files(limits) == {
        "memory.max": str(64 * 2**20),
        "memory.oom.group": "1",
        "memory.swap.max": "0",
        "cpu.max": "150000 100000",
        "pids.max": "512",
    }
    assert limit_controllers(limits) == ("cpu", "memory", "pids")
    assert parse_limits({"memory_max": None}) == {}


def test_the_spec_carries_limits_as_plain_data_and_checks_them() -> None:
    spec = RunSpec(
        argv=("true",),
        deadline_seconds=None,
        grace_seconds=1.0,
        asked_at=0.0,
        limits={"pids_max": 5},
    )
    assert RunSpec.from_json(spec.to_json()).limits == {"pids_max": 5}
    bad = RunSpec(
        argv=("true",),
        deadline_seconds=None,
        grace_seconds=1.0,
        asked_at=0.0,
        limits={"pids_max": -1},
    )
    with pytest.raises(SpecError, match="pids_max"):
        RunSpec.from_json(bad.to_json())


# -- refusal where no cgroup can enforce them -----------------------------------------------


@pytest.fixture
def no_cgroup_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees no cgroup2 mount and no cgroup v1 hierarchy."""
    from tether.linux import run_cgroups

    monkeypatch.setattr(cgroup_module, "_cgroup2_mounts", list)
    monkeypatch.setattr(cgroup_module, "_own", {})  # nor what it found before
    monkeypatch.setattr(run_cgroups, "find_hierarchies", lambda **_: [])


@pytest.mark.usefixtures("no_cgroup_at_all")
@pytest.mark.parametrize(
    "limit", [{"memory_max": "64M"}, {"cpu_max": 0.5}, {"pids_max": 10}, {"memory_swap_max": 0}]
)
def test_limits_nothing_can_enforce_are_refused_before_anything_starts(
    tmp_path: Path, limit: dict[str, object]
) -> None:
    marker = tmp_path / "started"
    record = tmp_path / "r.json"
    remedy = "Delegate=yes tether" if os.geteuid() else "run without limits"
    pattern = rf"no cgroup2 file system.*{remedy} .*rlimits"
    with pytest.raises(tether.LaunchError, match=pattern) as refused:
        tether.run(["touch", str(marker)], record=record, **limit)  # type: ignore[arg-type]
    assert refused.value.exit_status == 125
    assert not marker.exists()
    assert not record.exists()


def test_limits_under_sweep_containment_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_CONTAINMENT", "sweep")
    marker = tmp_path / "started"
    with pytest.raises(tether.LaunchError, match=r"pids_max.*TETHER_CONTAINMENT=sweep"):
        tether.run(["touch", str(marker)], pids_max=10, record=False)
    assert not marker.exists()


def test_the_cli_refuses_limits_it_cannot_enforce_in_one_line(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    result = subprocess.run(
        tether_argv("run", "--pids-max", "10", "--", "touch", str(marker)),
        capture_output=True,
        text=True,
        env={
            "XDG_STATE_HOME": str(tmp_path),
            "TETHER_CONTAINMENT": "sweep",
            "PATH": "/usr/bin:/bin",
        },
        check=False,
    )
    assert result.returncode == 125
    assert result.stderr.count("\n") == 1
    assert "--pids-max" in result.stderr
    assert not marker.exists()
    assert not list(tmp_path.rglob("*.json"))


@pytest.mark.parametrize(
    ("flag", "value"), [("--memory-max", "lots"), ("--cpus", "0"), ("--pids-max", "-3")]
)
def test_the_cli_refuses_bad_limits_naming_the_flag(tmp_path: Path, flag: str, value: str) -> None:
    result = subprocess.run(
        tether_argv("run", flag, value, "--", "true"),
        capture_output=True,
        text=True,
        env={"XDG_STATE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert result.returncode == 125
    # A usage error, in GNU's two lines.
    assert result.stderr.startswith(f"tether run: {flag}: ")
    assert result.stderr.endswith("\nTry 'tether run --help' for more information.\n")


def test_the_supervisor_refuses_limits_the_caller_let_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the caller's check pass and the supervisor's fail, the run is launch_failed."""
    from tether.caller import request

    monkeypatch.setattr(request, "_limits", lambda values, _flags, **_: dict(values))
    monkeypatch.setenv("TETHER_CONTAINMENT", "sweep")
    marker = tmp_path / "started"
    with pytest.raises(tether.LaunchError, match="resource limits need a cgroup") as refused:
        tether.run(["touch", str(marker)], pids_max=10, record=tmp_path / "r.json")
    assert refused.value.exit_status == 125
    assert not marker.exists()


# -- evidence -------------------------------------------------------------------------------


def test_read_usage_takes_what_the_kernel_counts_and_none_for_the_rest(tmp_path: Path) -> None:
    (tmp_path / "cpu.stat").write_text(
        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n"
    )
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n")
    (tmp_path / "memory.peak").write_text("67108864\n")
    assert cgroup_module.read_usage(str(tmp_path)) == {
        "cpu_seconds": 2.5,
        "cpu_user_seconds": 2.0,
        "cpu_system_seconds": 0.5,
        "memory_peak_bytes": 64 * 2**20,
        "oom_kills": 2,
        "memory_limit_hits": 7,
        "pids_max_refusals": None,
    }
    assert set(cgroup_module.read_usage(str(tmp_path / "gone")).values()) == {None}


def test_enable_controllers_says_which_is_missing_and_why(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu hugetlb\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    cgroup_module.enable_controllers(str(tmp_path), ("cpu",))  # already enabled: nothing to do
    with pytest.raises(cgroup_module.CgroupUnavailable, match=r"no memory controller.*cgroup v1"):
        cgroup_module.enable_controllers(str(tmp_path), ("cpu", "memory"))


def test_a_run_in_a_cgroup_records_the_whole_trees_cpu_time(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    outcome = tether.run(
        ["sh", "-c", "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done"], record=record
    )
    data: dict[str, Any] = outcome.read_record()
    if data["containment"] != "cgroup":
        pytest.skip("the run had no cgroup of its own here")
    assert data["limits"] is None
    usage = data["tree_usage"]
    assert usage["cpu_seconds"] > 0
    assert usage["cpu_seconds"] == pytest.approx(
        usage["cpu_user_seconds"] + usage["cpu_system_seconds"], rel=0.2, abs=0.05
    )
    assert outcome.cpu_seconds == usage["cpu_seconds"]
    assert data["oom_killed"] is (None if usage["oom_kills"] is None else False)


def test_show_and_ls_say_the_oom_killer_ended_a_run(tmp_path: Path) -> None:
    from tether.review.files import load_run
    from tether.review.listing import render_table
    from tether.review.show import render_run

    record = tmp_path / "r.json"
    outcome = tether.run(["true"], record=record)
    data = outcome.read_record()
    data.update(
        eval_exit_code=-9,
        limits={"memory_max": 64 * 2**20, "memory_swap_max": 0, "cpu_max": 1.5, "pids_max": None},
        tree_usage={
            "cpu_seconds": 1.25,
            "cpu_user_seconds": 1.0,
            "cpu_system_seconds": 0.25,
            "memory_peak_bytes": 64 * 2**20,
            "oom_kills": 2,
            "memory_limit_hits": 40,
            "under_oom": 0,
            "pids_max_refusals": 3,
        },
        oom_killed=True,
    )
    validate_record(data)
    record.write_text(json.dumps(data))
    shown = render_run(load_run(record))
    assert shown.startswith(
        "run (no label): killed by the OOM killer at its memory limit of 64 MiB "
        "(reason completed)\n"
    )
    assert (
        "reason        killed by the OOM killer at its memory limit of 64 MiB (2 OOM kills); "
        "recorded as completed\n" in shown
    )
    assert "OOM KILLED" not in shown  # said once, first
    assert "limits        memory 64.0 MiB, swap 0 B, 1.5 CPUs" in shown
    assert (
        "whole tree    CPU 1.250s (user 1.000s, system 0.250s), peak memory 64.0 MiB, "
        "3 forks refused at pids_max" in shown
    )
    assert "killed by the OOM killer at its memory limit of 64 MiB (completed)" in render_table(
        [(record, data)]
    )


def test_limit_files_are_written_to_a_real_cgroup_before_anyone_joins() -> None:
    """The mechanism, with a file every cgroup v2 has (the limits' own need controllers)."""
    skip_without_cgroup()
    made = cgroup_module.V2Cgroup.create((), {"cgroup.max.descendants": "3"})
    try:
        assert made.pids() == []
        assert Path(made.directory, "cgroup.max.descendants").read_text() == "3\n"
    finally:
        assert made.remove()


def test_a_limit_the_kernel_refuses_leaves_no_cgroup_and_says_why() -> None:
    skip_without_cgroup()
    _path, parent = cgroup_module.own_cgroup()
    before = set(os.listdir(parent))
    with pytest.raises(cgroup_module.CgroupUnavailable, match=r"cannot write 'junk' to .*"):
        cgroup_module.V2Cgroup.create((), {"cgroup.max.descendants": "junk"})
    assert set(os.listdir(parent)) - before == set()


def test_the_trees_usage_travels_to_the_outcome() -> None:
    from tether.api.outcome import Outcome
    from tether.shared.protocol import Finished, decode, encode

    sent = Finished(
        reason="completed",
        exit_status=137,
        returncode=-9,
        tree_usage={"cpu_seconds": 1.5, "memory_peak_bytes": 67108864, "oom_kills": 1},
    )
    received = decode(encode(sent))
    assert isinstance(received, Finished)
    spec = RunSpec(argv=("x",), deadline_seconds=None, grace_seconds=1.0, asked_at=0.0)
    outcome = Outcome.from_finished(received, spec, None)
    assert (outcome.oom_killed, outcome.cpu_seconds, outcome.memory_peak_bytes) == (
        True,
        1.5,
        64 * 2**20,
    )
    with pytest.raises(tether.CommandFailed, match="OOM killer"):
        outcome.check()
    junk = decode(
        b'{"event": "finished", "reason": "completed", "exit_status": 0, '
        b'"tree_usage": {"cpu_seconds": "lots", "oom_kills": true}}\n'
    )
    assert isinstance(junk, Finished)
    assert junk.tree_usage == {}
    bare = Outcome.from_finished(junk, spec, None)
    assert (bare.oom_killed, bare.cpu_seconds, bare.memory_peak_bytes) == (None, None, None)

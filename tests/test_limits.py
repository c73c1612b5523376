"""Resource limits: the pure parsers (hypothesis), and a refusal where no cgroup can take them.

The limits' enforcement by the kernel is tested on real processes in
``test_limits_cgroup.py``, where the machine allows it.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from conftest import tether_argv
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


# -- refusal where no cgroup v2 can enforce them ---------------------------------------------


@pytest.fixture
def no_cgroup_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees no cgroup2 mount (as on a cgroup v1-only machine)."""
    monkeypatch.setattr(cgroup_module, "_cgroup2_mounts", list)


@pytest.mark.usefixtures("no_cgroup_v2")
@pytest.mark.parametrize(
    "limit", [{"memory_max": "64M"}, {"cpu_max": 0.5}, {"pids_max": 10}, {"memory_swap_max": 0}]
)
def test_limits_without_cgroup_v2_are_refused_before_anything_starts(
    tmp_path: Path, limit: dict[str, object]
) -> None:
    marker = tmp_path / "started"
    record = tmp_path / "r.json"
    with pytest.raises(tether.LaunchError, match=r"no cgroup2 file system.*rlimits") as refused:
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
    assert result.stderr.startswith(f"tether: {flag}: ")


def test_the_supervisor_refuses_limits_the_caller_let_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the caller's check pass and the supervisor's fail, the run is launch_failed."""
    from tether.caller import request

    monkeypatch.setattr(request, "_limits", lambda values, flags: dict(values))
    monkeypatch.setenv("TETHER_CONTAINMENT", "sweep")
    marker = tmp_path / "started"
    with pytest.raises(tether.LaunchError, match="resource limits need a cgroup") as refused:
        tether.run(["touch", str(marker)], pids_max=10, record=tmp_path / "r.json")
    assert refused.value.exit_status == 125
    assert not marker.exists()

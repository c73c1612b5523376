"""What a supervisor has loaded when it launches the command, and a caller when it forks one.

Each test runs a door with ``fixtures/exec_modules`` (or ``fork_modules``) on ``PYTHONPATH``:
its ``sitecustomize`` records ``sys.modules`` in the command's child right before its ``exec``
(or in ``tether run``/``tether timeout`` at the fork of the supervisor). A module the import
budget's ``launch*`` or ``fork*`` row names (docs/architecture.md, "The import budget") fails
the test. Timings are for the benchmark, never for a test.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BOUND, hooked_env, seed_door_true, tether_argv
from import_budget import kept_off


def _loaded_at_launch(argv: list[str], home: Path, pass_fds: tuple[int, ...] = ()) -> set[str]:
    """Run one door to the end; the modules its supervisor had when the command was launched."""
    snapshots = home / "modules"
    env = hooked_env(home, "exec_modules", TETHER_TEST_EXEC_MODULES=str(snapshots))
    done = subprocess.run(
        argv, env=env, pass_fds=pass_fds, capture_output=True, timeout=BOUND, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = snapshots.read_text().splitlines()
    assert len(lines) == 1, lines
    loaded = set(lines[0].split()[1:])
    # The snapshot is the supervisor's, taken at the spawn: not an empty or foreign one.
    assert {"os", "tether.supervisor.spawn", "tether.supervisor.command"} <= loaded
    return loaded


def _forbidden(loaded: set[str], path: str) -> list[str]:
    return sorted(name for name in kept_off(path) if name in loaded)


@pytest.mark.parametrize(
    ("door", "path"),
    [
        pytest.param(["run", "--", "true"], "launch", id="tether-run"),
        pytest.param(["timeout", "30", "true"], "launch-timeout", id="tether-timeout"),
    ],
)
def test_the_cli_launches_before_loading_heavy_modules(
    door: list[str], path: str, tmp_path: Path
) -> None:
    assert _forbidden(_loaded_at_launch(tether_argv(*door), tmp_path), path) == []


def test_the_seed_door_launches_before_loading_heavy_modules(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        argv = seed_door_true(read_end, tmp_path / "run.json")
        loaded = _loaded_at_launch(argv, tmp_path, pass_fds=(read_end,))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert _forbidden(loaded, "launch-seed") == []


def _loaded_at_fork(argv: list[str], home: Path, door: str = "tether.cli.run") -> set[str]:
    """Run ``tether ARGV`` to the end; the modules it had when it forked its supervisor."""
    snapshots = home / "modules"
    env = hooked_env(home, "fork_modules", TETHER_TEST_FORK_MODULES=str(snapshots))
    done = subprocess.run(
        tether_argv(*argv), env=env, capture_output=True, timeout=BOUND, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = snapshots.read_text().splitlines()
    assert len(lines) == 1, lines
    loaded = set(lines[0].split()[1:])
    # The snapshot is the CLI's, taken at its fork: not an empty or foreign one.
    assert {door, "tether.caller.start"} <= loaded
    return loaded


# The default record directory is left out: one run in 64 (and one an hour) prunes
# it first, and the pruning (tether.shared.retention) loads pathlib and datetime.
@pytest.mark.parametrize(
    "options",
    [
        pytest.param(["--no-record"], id="no-record"),
        pytest.param(["--record", "{home}/run.json"], id="record-path"),
        pytest.param(
            ["--deadline", "5m", "--grace=1s", "--label", "-x", "-v", "--record={home}/r.json"],
            id="options",
        ),
    ],
)
def test_tether_run_forks_before_loading_what_it_needs_only_after(
    options: list[str], tmp_path: Path
) -> None:
    argv = ["run", *(word.format(home=tmp_path) for word in options), "--", "true"]
    loaded = _loaded_at_fork(argv, tmp_path)
    assert _forbidden(loaded, "fork-run") == []


@pytest.mark.parametrize(
    "options",
    [
        pytest.param([], id="plain"),
        pytest.param(["-v", "--kill-after=1.5m", "-s", "INT", "--pres"], id="options"),
    ],
)
def test_tether_timeout_forks_without_getopt(options: list[str], tmp_path: Path) -> None:
    # ``json`` is loaded before the fork on purpose (docs/architecture.md, "The import budget").
    argv = ["timeout", *options, "30", "true"]
    loaded = _loaded_at_fork(argv, tmp_path, door="tether.cli.timeout")
    assert _forbidden(loaded, "fork-timeout") == []
    assert "json" in loaded

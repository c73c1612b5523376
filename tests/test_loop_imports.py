"""What a supervisor has loaded when it ends, at each door: nothing it can do without.

Each test runs a door to the end with ``fixtures/exit_modules`` on ``PYTHONPATH``: its
``sitecustomize`` records, at every ``os._exit``, the modules that process really loaded (a
deferred stand-in is not one). A module the import budget's ``after-*`` rows name
(docs/architecture.md, "The import budget") fails the test. Timings are for the benchmark.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BOUND, hooked_env, seed_door_true, tether_argv, wait_gone_since
from import_budget import kept_off


def _loaded_after_launch(
    argv: list[str], home: Path, pass_fds: tuple[int, ...] = ()
) -> tuple[set[str], set[str]]:
    """Run one door to the end: what its supervisor loaded after the launch, and in all."""
    snapshots = home / "modules"
    env = hooked_env(home, "exit_modules", TETHER_TEST_EXIT_MODULES=str(snapshots))
    done = subprocess.run(
        argv, env=env, pass_fds=pass_fds, capture_output=True, timeout=BOUND, check=False
    )
    assert done.returncode == 0, done.stderr
    # A detached supervisor notes its modules at its exit, after it told its
    # caller: wait for that supervisor (a foreground one has ended already).
    for _, _, supervisor, ticks in _lines(snapshots, "parent"):
        assert wait_gone_since(int(supervisor), int(ticks))
    lines = [line.split() for line in snapshots.read_text().splitlines()]
    launches = [set(names) for when, _, *names in lines if when == "exec"]
    ends = [set(names) for when, _, *names in lines if when == "exit"]
    supervisors = [names for names in ends if "tether.supervisor.loop" in names]
    assert len(launches) == 1, launches
    assert len(supervisors) == 1, supervisors
    at_launch, at_exit = launches[0], supervisors[0]
    # The snapshots are a supervisor's, at the spawn and after its loop ran to the end.
    assert {"tether.supervisor.spawn", "tether.supervisor.command"} <= at_launch
    assert {"tether.core.machine", "transitions", "tether.supervisor.process_tree"} <= at_exit
    return at_exit - at_launch, at_exit


def _lines(snapshots: Path, when: str) -> list[list[str]]:
    return [line.split() for line in snapshots.read_text().splitlines() if line.startswith(when)]


def _found(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if name in loaded)


def test_a_run_without_a_record_loads_nothing_it_can_do_without(tmp_path: Path) -> None:
    loaded, in_all = _loaded_after_launch(tether_argv("run", "--no-record", "--", "true"), tmp_path)
    assert "tether.supervisor.event_log" not in in_all
    assert _found(loaded, kept_off("after-no-record")) == []


@pytest.mark.parametrize(
    "door",
    [["run", "--record", "{record}", "--"], ["timeout", "--record={record}", "30"]],
    ids=["tether-run", "tether-timeout"],
)
def test_a_run_with_a_record_loads_only_what_its_event_log_needs(
    door: list[str], tmp_path: Path
) -> None:
    record = tmp_path / "run.json"
    argv = tether_argv(*(word.format(record=record) for word in door), "true")
    loaded, _ = _loaded_after_launch(argv, tmp_path)
    assert {"tether.supervisor.event_log", "structlog"} <= loaded
    assert _found(loaded, kept_off("after-record")) == []
    assert record.is_file()


def test_the_seed_door_loads_only_what_its_event_log_needs(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        argv = seed_door_true(read_end, tmp_path / "run.json")
        loaded, _ = _loaded_after_launch(argv, tmp_path, pass_fds=(read_end,))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert "structlog" in loaded
    assert _found(loaded, kept_off("after-record")) == []

"""What a supervisor has loaded when it ends, at each door: nothing it can do without.

Once the command runs, the supervisor loads its loop, the core and (for a run
with a record) the event log, and only then can it act on the command's exit:
for a command that exits at once, every module on that path is time its
caller waits (see ``docs/performance.md``). Each test runs a door to the end
with ``fixtures/exit_modules`` on ``PYTHONPATH``: its ``sitecustomize``
records, at every ``os._exit`` (how a supervisor ends), the modules that
process really loaded (a deferred stand-in is not one). A module named in
the test's list there fails the test: something on the path after the
launch imports it again. Timings are for the benchmark, never for a test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, hooked_env, seed_door_true, tether_argv, wait_gone_since

#: Never loaded by a supervisor, whatever the run: the loop, the core, the
#: record and the containment load none of these, nor does what they use.
NEVER = ("selectors", "socket", "asyncio", "ssl")

#: :mod:`inspect` and what it loads: ``transitions`` binds it without using it.
INSPECT = ("inspect", "ast", "dis")

#: :mod:`traceback` and what it loads: ``logging`` (loaded by ``transitions``) binds it
#: to format exceptions, which no logger of a supervisor without an event log does.
TRACEBACK = ("traceback", "linecache", "tokenize")

#: Not loaded by a run without a record (no event log: no structlog; no record
#: path: no ``pathlib``, no redactor). With an event log, structlog loads ``typing`` and
#: ``dataclasses`` for itself, and ``traceback``.
WITHOUT_A_LOG = (
    *NEVER,
    *INSPECT,
    *TRACEBACK,
    "typing",
    "dataclasses",
    "structlog",
    "pathlib",
    "tether.core.redaction",
)

#: Not loaded by a run with an event log: what structlog merely binds or looks
#: for (tether.supervisor.deferred). Since Python 3.12 ``dataclasses`` asks
#: :mod:`inspect` for every class's annotations, and structlog makes some.
WITH_A_LOG = (
    *NEVER,
    "structlog.stdlib",
    "structlog.threadlocal",
    "structlog.twisted",
    "uuid",
    "platform",
    *(INSPECT if sys.version_info < (3, 12) else ()),
)


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
    assert {"tether.core.machine", "transitions", "tether.supervisor.containment"} <= at_exit
    return at_exit - at_launch, at_exit


def _lines(snapshots: Path, when: str) -> list[list[str]]:
    return [line.split() for line in snapshots.read_text().splitlines() if line.startswith(when)]


def _found(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if name in loaded)


def test_a_run_without_a_record_loads_nothing_it_can_do_without(tmp_path: Path) -> None:
    loaded, in_all = _loaded_after_launch(tether_argv("run", "--no-record", "--", "true"), tmp_path)
    assert "tether.supervisor.event_log" not in in_all
    assert _found(loaded, WITHOUT_A_LOG) == []


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
    assert _found(loaded, WITH_A_LOG) == []
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
    assert _found(loaded, WITH_A_LOG) == []

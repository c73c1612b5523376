"""What a supervisor has loaded at the moment it launches the command, at each door.

The command should start as early as the interpreter allows, so the path to
its launch imports only what it needs (see ``docs/performance.md``, "what is
left before the launch"). Each test runs a door with
``fixtures/exec_modules`` on ``PYTHONPATH``: its ``sitecustomize`` records, in
the child forked to run the command and right before its ``exec``, the names
in ``sys.modules``: a copy of the supervisor's at the spawn, and what the child
loaded itself on its way to the ``exec``. A module named in
``FORBIDDEN`` there fails the test: something on the launch path imports it
again. Timings are for the benchmark, never for a test.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import BOUND, hooked_env, seed_door_true, tether_argv

#: Never loaded before the command runs, at any door. ``enum`` and ``re`` are
#: not here: ``signal`` imports ``enum`` (and it ``re``'s dependencies) in every
#: interpreter; see docs/performance.md for what else is still loaded and why.
FORBIDDEN = (
    "typing",
    "dataclasses",
    "inspect",
    "subprocess",
    "threading",
    "asyncio",
    "transitions",
    "structlog",
    "tether.supervisor.loop",
    # Loaded once the command runs: the sentry's thread starts after the spawn.
    "tether.supervisor.sentry",
    # prctl is built from ``_ctypes`` (tether.linux.prctl): ``ctypes`` itself costs milliseconds.
    "ctypes",
)


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


def _forbidden(loaded: set[str], *more: str) -> list[str]:
    return sorted(name for name in (*FORBIDDEN, *more) if name in loaded)


@pytest.mark.parametrize(
    ("door", "more"),
    [
        pytest.param(["run", "--", "true"], (), id="tether-run"),
        # ``tether timeout`` reads its options and durations by hand (tether.cli.timeout_options,
        # tether.core.gnu_durations): no getopt, no gettext, no re for ``timeout 30 true``.
        pytest.param(
            ["timeout", "30", "true"], ("argparse", "getopt", "gettext"), id="tether-timeout"
        ),
    ],
)
def test_the_cli_launches_before_loading_heavy_modules(
    door: list[str], more: tuple[str, ...], tmp_path: Path
) -> None:
    assert _forbidden(_loaded_at_launch(tether_argv(*door), tmp_path), *more) == []


def test_the_seed_door_launches_before_loading_heavy_modules(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        argv = seed_door_true(read_end, tmp_path / "run.json")
        loaded = _loaded_at_launch(argv, tmp_path, pass_fds=(read_end,))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert _forbidden(loaded, *SEED_DOOR_FORBIDDEN) == []


#: Not loaded before the seed door's launch either: it reads its options by hand
#: (``argparse`` is for ``--help``), its record's path as text (no ``pathlib``), and
#: sends no status message (no ``json``); ``datetime`` names only a default record;
#: ``re``: the cgroup module reads mountinfo and its cgroup names by hand.
SEED_DOOR_FORBIDDEN = (
    "re",
    "argparse",
    "gettext",
    "shutil",
    "pathlib",
    "urllib.parse",
    "ipaddress",
    "datetime",
    "json",
    "tether.supervisor.last_resort",
)


#: Never loaded by ``tether run`` before it forks its supervisor: what it needs
#: only after the fork, or never on the way to the launch (options read by
#: hand, socket pairs from ``_socket``, record paths as strings, no ``datetime``).
#: What it imports after the fork it imports in parallel with the supervisor.
BEFORE_THE_FORK = (
    "argparse",
    "gettext",
    "shutil",
    "locale",
    "difflib",
    "pathlib",
    "urllib.parse",
    "socket",
    "selectors",
    "datetime",
    "tether.caller.status",
    "tether.caller.fallback",
)


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
    assert _forbidden(loaded, *BEFORE_THE_FORK) == []


@pytest.mark.parametrize(
    "options",
    [
        pytest.param([], id="plain"),
        pytest.param(["-v", "--kill-after=1.5m", "-s", "INT", "--pres"], id="options"),
    ],
)
def test_tether_timeout_forks_without_getopt(options: list[str], tmp_path: Path) -> None:
    # Options and a plain duration read by hand: no getopt (nor its gettext). ``json`` (and
    # ``re`` with it) is loaded before the fork on purpose: the supervisor needs it before
    # the launch and the caller after, and a fork shares one import.
    argv = ["timeout", *options, "30", "true"]
    loaded = _loaded_at_fork(argv, tmp_path, door="tether.cli.timeout")
    assert _forbidden(loaded, *BEFORE_THE_FORK, "getopt") == []
    assert "json" in loaded

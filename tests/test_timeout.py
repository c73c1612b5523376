"""``tether timeout`` against GNU ``timeout``: same statuses, same messages, fewer holes.

Each parity case runs the real ``/usr/bin/timeout`` and ``tether timeout``
with the same arguments and compares what a script can observe.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import BOUND, Processes, ReadyPipe, alive, fixture, parent_of, tether_argv, wait_gone

GNU_TIMEOUT = shutil.which("timeout")
TRAP_TERM = ["sh", "-c", 'trap "" TERM; sleep 5']

PARITY = [
    (["0.3", "sleep", "5"], 124),
    (["5", "true"], 0),
    (["5", "sh", "-c", "exit 3"], 3),
    # GNU dies of the command's signal (a shell sees 128+N), and of its own KILL.
    (["5", "sh", "-c", "kill -TERM $$"], -15),
    (["5", "sh", "-c", "kill -INT $$"], -2),
    (["0", "sh", "-c", "exit 4"], 4),
    (["--preserve-status", "0.3", "sleep", "5"], 143),
    (["-s", "INT", "0.3", "sleep", "5"], 124),
    (["--signal=HUP", "0.3", "sleep", "5"], 124),
    (["-s", "KILL", "0.3", "sleep", "5"], -9),
    (["-k", "0.3", "2", *TRAP_TERM], -9),  # 2 s: time for the shell to set its trap
    (["5", "/nonexistent/command"], 127),
    (["5", "/etc"], 126),
    (["abc", "true"], 125),
    (["-s", "BOGUS", "1", "true"], 125),
    (["--bogus", "1", "true"], 125),
    ([], 125),
    (["5"], 125),
]


def tether_timeout(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tether_argv("timeout", "--record", str(tmp_path / "r.json"), *args),
        capture_output=True,
        text=True,
        timeout=BOUND,
    )


@pytest.mark.skipif(GNU_TIMEOUT is None, reason="GNU timeout is not installed")
@pytest.mark.parametrize(("args", "status"), PARITY, ids=[" ".join(a) or "none" for a, _ in PARITY])
def test_same_status_as_gnu_timeout(tmp_path: Path, args: list[str], status: int) -> None:
    assert GNU_TIMEOUT is not None
    gnu = subprocess.run(
        ["timeout", *args], executable=GNU_TIMEOUT, capture_output=True, text=True, timeout=BOUND
    )
    ours = tether_timeout(args, tmp_path)
    assert (gnu.returncode, ours.returncode) == (status, status), ours.stderr
    if gnu.stderr:
        # Same first line, but for GNU's typographic quotes in UTF-8 locales.
        gnu_first = gnu.stderr.splitlines()[0].replace("\u2018", "'").replace("\u2019", "'")
        # tether names itself as invoked (tether timeout), in the message and the help line.
        ours_first = (
            ours.stderr.splitlines()[0]
            .replace("'tether timeout --help'", "'timeout --help'")
            .replace("tether timeout: ", "timeout: ", 1)
        )
        assert ours_first == gnu_first


def test_verbose_names_each_signal(tmp_path: Path) -> None:
    # A deadline of 2 s: the shell must have set its trap before the TERM comes
    # (0.3 s was not always enough on a loaded machine: the shell died of it).
    result = tether_timeout(["-v", "-k", "0.3", "2", *TRAP_TERM], tmp_path)
    assert result.returncode == -9
    assert result.stderr.splitlines() == [
        "tether timeout: sending signal TERM to command 'sh'",
        "tether timeout: sending signal KILL to command 'sh'",
    ]


def test_help_and_version() -> None:
    result = subprocess.run(
        tether_argv("timeout", "--help"), capture_output=True, text=True, timeout=BOUND
    )
    assert result.returncode == 0
    assert "Usage: tether timeout [OPTION] DURATION COMMAND [ARG]..." in result.stdout
    version = subprocess.run(
        tether_argv("timeout", "--version"), capture_output=True, text=True, timeout=BOUND
    )
    assert version.returncode == 0
    assert version.stdout.startswith("timeout (tether) ")


def test_unlike_gnu_the_command_dies_with_a_killed_timeout(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    caller = processes.start(
        tether_argv(
            "timeout",
            "--record",
            str(tmp_path / "r.json"),
            "60",
            *fixture("sleeper", str(ready.path), "--children", "1"),
        )
    )
    pids = ready.ready_pids()
    processes.track(*pids)
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    processes.track(supervisor)
    caller.kill()
    assert all(wait_gone(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)

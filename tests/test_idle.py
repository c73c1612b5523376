"""The idle bound: a stalled run told apart from a slow one.

The core decides (a fake clock, no processes); the supervisor feeds it what
the tree did (real processes: a sleeper is stopped, a printer and a busy
loop are not).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether
from conftest import BOUND, read_json, tether_argv, validate_record
from tether.core.effects import Effect, Exit, SignalTree, WriteRecord
from tether.core.events import ActivitySeen, CommandExited, Launched, Tick
from tether.core.machine import Phase, RunMachine
from tether.core.reasons import Reason

TERM: list[Effect] = [SignalTree("SIGTERM"), SignalTree("SIGCONT")]


def idle_machine(*, idle: float = 5.0, deadline_at: float | None = None) -> RunMachine:
    machine = RunMachine(deadline_at=deadline_at, grace_seconds=2.0, idle_seconds=idle)
    assert machine.feed(Launched(now=100.0, pid=42)) == []
    return machine


def test_an_idle_run_is_stopped_at_its_bound_and_not_before() -> None:
    machine = idle_machine()
    assert machine.next_deadline == 105.0
    assert machine.feed(Tick(now=104.999)) == []
    assert machine.feed(Tick(now=105.0)) == TERM
    assert machine.reason is Reason.IDLE_EXCEEDED
    assert machine.phase is Phase.TERMINATING
    assert machine.next_deadline == 107.0  # the grace, as for a deadline
    effects = machine.feed(CommandExited(now=105.5, returncode=-15, others_alive=False))
    write, exit_ = effects
    assert isinstance(write, WriteRecord)
    assert write.verdict.reason is Reason.IDLE_EXCEEDED
    assert write.verdict.exit_status == 124
    assert write.verdict.idle_seconds == 5.0
    assert exit_ == Exit(124)


def test_activity_moves_the_bound_on() -> None:
    machine = idle_machine()
    assert machine.feed(ActivitySeen(now=103.0)) == []
    assert machine.next_deadline == 108.0
    assert machine.feed(Tick(now=107.0)) == []
    # Seen at the look for the bound's end: it happened before it, so it counts.
    assert machine.feed(ActivitySeen(now=108.0)) == []
    assert machine.next_deadline == 113.0
    assert machine.feed(Tick(now=113.5)) == TERM
    effects = machine.feed(CommandExited(now=114.0, returncode=-15, others_alive=False))
    assert isinstance(effects[0], WriteRecord)
    assert effects[0].verdict.idle_seconds == 5.5  # measured from the last activity


def test_the_deadline_still_comes_first_when_it_is_first() -> None:
    machine = idle_machine(idle=5.0, deadline_at=103.0)
    assert machine.next_deadline == 103.0
    assert machine.feed(ActivitySeen(now=104.0)) == TERM  # activity never hides a deadline
    assert machine.reason is Reason.DEADLINE_EXCEEDED


def test_no_idle_bound_means_no_idle_timer() -> None:
    machine = RunMachine(deadline_at=None, grace_seconds=2.0)
    machine.feed(Launched(now=0.0, pid=42))
    assert machine.next_deadline is None
    assert not machine.watches_idle
    assert machine.feed(Tick(now=1e9)) == []


@pytest.mark.parametrize("idle", [0.0, -1.0, float("nan"), float("inf")])
def test_a_bad_idle_bound_is_refused(idle: float) -> None:
    with pytest.raises(ValueError, match="idle"):
        RunMachine(deadline_at=None, grace_seconds=1.0, idle_seconds=idle)


# -- real processes ---------------------------------------------------------------------


def run_cli(
    *args: str, record: Path, mode: str = "auto"
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        tether_argv("run", "--record", str(record), *args),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
        env={**os.environ, "TETHER_CONTAINMENT": mode},
    )
    return done, time.monotonic() - started


def test_a_sleeper_is_stopped_for_idling(tmp_path: Path, mode: str) -> None:
    record = tmp_path / "r.json"
    done, took = run_cli(
        "--idle", "1s", "--grace", "2", "--", "sleep", "60", record=record, mode=mode
    )
    assert done.returncode == 124, done.stderr
    document = read_json(record)
    validate_record(document)
    assert document["reason"] == "idle_exceeded"
    assert document["containment"] == mode
    assert document["idle_seconds"] == 1.0
    measured = document["idle_measured_seconds"]
    assert isinstance(measured, float)
    assert 1.0 <= measured < 2.5
    assert document["eval_exit_code"] == -15
    assert took < 6.0  # stopped at about 1-2 s, never after the 60 s
    shown = subprocess.run(
        tether_argv("show", str(record)), capture_output=True, text=True, timeout=BOUND
    ).stdout
    assert "  reason        idle_exceeded - no output and no CPU time" in shown
    assert "  exit status   124 (idle bound passed)\n" in shown
    assert "without output or CPU time when stopped (bound 1.000s)" in shown


PRINTER = "import time\nfor i in range(10):\n    print(i, flush=True)\n    time.sleep(0.3)\n"
BUSY = "import time\nend = time.monotonic() + 3\nwhile time.monotonic() < end:\n    pass\n"


@pytest.mark.parametrize("program", [PRINTER, BUSY], ids=["printer", "busy"])
def test_a_run_that_prints_or_computes_is_not_stopped(
    tmp_path: Path, program: str, mode: str
) -> None:
    record = tmp_path / "r.json"
    done, _took = run_cli(
        "--idle", "1s", "--", sys.executable, "-c", program, record=record, mode=mode
    )
    assert done.returncode == 0, done.stderr
    document = read_json(record)
    assert document["reason"] == "completed"
    assert document["idle_seconds"] == 1.0
    assert document["idle_measured_seconds"] is None


def test_the_api_takes_idle_and_captured_output_counts(tmp_path: Path) -> None:
    outcome = tether.run(
        [sys.executable, "-c", PRINTER], idle="1s", capture_output=True, record=tmp_path / "a.json"
    )
    assert outcome.reason is Reason.COMPLETED
    assert outcome.stdout == b"".join(b"%d\n" % i for i in range(10))
    stalled = tether.run(["sleep", "60"], idle=1, grace=1, record=tmp_path / "b.json")
    assert stalled.reason is Reason.IDLE_EXCEEDED
    assert stalled.exit_status == 124


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_bad_idle_option_is_refused_before_anything_runs(tmp_path: Path, value: str) -> None:
    done, _ = run_cli("--idle", value, "--", "true", record=tmp_path / "r.json")
    assert done.returncode == 125
    assert "--idle" in done.stderr
    assert not (tmp_path / "r.json").exists()

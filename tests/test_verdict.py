"""The verdict line: ``tether run -v`` and ``str(outcome)`` say what ended the run and what
tether did."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

import tether
from conftest import BOUND, Processes, ReadyPipe, fixture, tether_argv, wait_gone
from tether.caller.verdict import verdict_line
from tether.shared.protocol import Finished

BASE: dict[str, object] = {
    "reason": "completed",
    "exit_status": 0,
    "returncode": 0,
    "deadline_seconds": None,
    "escalated_to_sigkill": False,
    "processes_stopped": 0,
    "outside_group": 0,
    "shutdown_seconds": None,
    "record": "/r.json",
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, "the command exited with status 0; record /r.json"),
        (
            {"exit_status": 137, "returncode": -9, "record": None},
            "the command was killed by SIGKILL (status 137); no record",
        ),
        (
            # A real-time signal is named as everywhere else (tether.shared.signals).
            {"exit_status": 128 + signal.SIGRTMIN + 1, "returncode": -(signal.SIGRTMIN + 1)},
            f"the command was killed by SIGRTMIN+1 (status {128 + signal.SIGRTMIN + 1}); "
            "record /r.json",
        ),
        (
            {
                "reason": "deadline_exceeded", "exit_status": 124, "returncode": -15,
                "deadline_seconds": 2.0, "processes_stopped": 3, "outside_group": 1,
                "shutdown_seconds": 0.0012,
            },
            "deadline 2s passed (status 124); stopped 3 processes (1 outside the group) in "
            "1.2 ms; record /r.json",
        ),
        (
            {
                "reason": "cancelled", "exit_status": 130, "processes_stopped": 1,
                "shutdown_seconds": 10.004, "escalated_to_sigkill": True,
            },
            "cancelled (status 130); stopped 1 process in 10.00 s, SIGKILL needed; record /r.json",
        ),
        (
            {"reason": "launch_failed", "exit_status": 127, "message": "No such file"},
            "the command could not be started: No such file (status 127); record /r.json",
        ),
        (
            {"reason": "parent_lost", "exit_status": 130, "record": None,
             "no_record_reason": "no home"},
            "the caller was lost (status 130); no record (no home)",
        ),
    ],
)  # fmt: skip
def test_the_verdict_line_says_what_ended_the_run(
    changes: dict[str, object], expected: str
) -> None:
    fields = {**BASE, **changes}
    beside = {name: fields.pop(name) for name in ("deadline_seconds", "record")}
    beside["no_record_reason"] = fields.pop("no_record_reason", None)
    told = Finished(**fields)  # type: ignore[arg-type]
    assert verdict_line(told, **beside) == expected  # type: ignore[arg-type]


def test_verbose_run_says_what_tether_stopped(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    run = processes.start(
        tether_argv(
            "run", "-v", "--record", str(record), "--",
            *fixture("tree", str(ready.path), "--group", "1", "--setsid", "1"),
        ),
        stderr=subprocess.PIPE,
    )  # fmt: skip
    processes.track(*ready.ready_pids())
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=BOUND)
    assert run.returncode == 130
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(
        r"tether: cancelled \(status 130\); stopped 4 processes \(1 outside the group\) in "
        rf"[0-9.]+ (ms|s)(, SIGKILL needed)?; record {re.escape(str(record))}",
        lines[0],
    ), lines[0]
    assert wait_gone(run.pid)


def test_str_of_an_outcome_is_its_verdict(tmp_path: Path) -> None:
    outcome = tether.run(["sleep", "30"], deadline=0.2, record=tmp_path / "r.json")
    assert re.fullmatch(
        r"deadline 0\.2s passed \(status 124\); stopped 1 process in [0-9.]+ (ms|s)"
        rf"(, SIGKILL needed)?; record {re.escape(str(tmp_path / 'r.json'))}",
        str(outcome),
    ), str(outcome)
    assert str(tether.run(["true"], record=False)) == (
        "the command exited with status 0; no record"
    )

"""``python -m tether.supervisor``: the seed interface, in the foreground.

The worker (here: the test, or ``fixtures/seed_caller.py``) makes the pipe and
keeps its write end; the supervisor gets the read end as ``--parent-fd``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    SEED_FIELDS,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    read_json,
    validate_record,
    wait_gone,
)


class Worker:
    """The test acting as the worker: it holds the lifeline's write end."""

    def __init__(self, processes: Processes, record: Path) -> None:
        self.processes = processes
        self.record = record
        self.read_end, self.write_end = os.pipe()

    def start(
        self,
        *command: str,
        deadline: str = "60",
        grace: str = "5",
        variant: str = "v1",
        leak_write_end: bool = False,
    ) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            "-m",
            "tether.supervisor",
            "--variant",
            variant,
            "--parent-fd",
            str(self.read_end),
            "--record",
            str(self.record),
            "--deadline-seconds",
            deadline,
            "--grace-seconds",
            grace,
            "--",
            *command,
        ]
        # A careless worker lets its own write end leak into the supervisor too.
        passed = (self.read_end, self.write_end) if leak_write_end else (self.read_end,)
        popen = self.processes.start(argv, pass_fds=passed)
        os.close(self.read_end)
        return popen

    def close(self) -> None:
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1


@pytest.fixture
def worker(processes: Processes, tmp_path: Path) -> Iterator[Worker]:
    made = Worker(processes, tmp_path / "records" / "run.json")
    yield made
    made.close()


@pytest.mark.parametrize("code", [0, 3])
def test_completion(worker: Worker, code: int) -> None:
    supervisor = worker.start(*fixture("exit_with", str(code)))
    assert supervisor.wait(timeout=BOUND) == code
    data = read_json(worker.record)
    validate_record(data)
    assert all(field in data for field in SEED_FIELDS)
    assert (data["reason"], data["variant"], data["eval_exit_code"]) == ("completed", "v1", code)
    assert data["supervisor_pid"] == supervisor.pid


def test_killed_by_a_signal(worker: Worker) -> None:
    supervisor = worker.start(*fixture("exit_with", "-9"))
    assert supervisor.wait(timeout=BOUND) == 137
    assert read_json(worker.record)["eval_exit_code"] == -9


def test_lifeline_closed_is_parent_lost(worker: Worker, ready: ReadyPipe) -> None:
    supervisor = worker.start(*fixture("sleeper", str(ready.path), "--children", "1"))
    pids = ready.ready_pids()
    worker.processes.track(*pids)
    worker.close()
    assert supervisor.wait(timeout=BOUND) == 130
    assert not any(alive(pid) for pid in pids)
    data = read_json(worker.record)
    assert data["reason"] == "parent_lost"
    assert data["eval_process_group"] == pids[0]


def test_a_leaked_write_end_of_the_lifeline_cannot_keep_the_command_alive(
    worker: Worker, ready: ReadyPipe
) -> None:
    """The supervisor closes its own copies of the write end: the worker's end of file counts."""
    supervisor = worker.start(*fixture("sleeper", str(ready.path)), leak_write_end=True)
    pids = ready.ready_pids()
    worker.processes.track(*pids)
    worker.close()
    assert supervisor.wait(timeout=BOUND) == 130
    assert wait_gone(pids[0])
    assert read_json(worker.record)["reason"] == "parent_lost"


def test_worker_sigkilled_stops_the_command(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "run.json"
    caller = processes.start(
        fixture("seed_caller", str(record), "--", *fixture("sleeper", str(ready.path))),
        stdout=subprocess.PIPE,
    )
    assert caller.stdout is not None
    supervisor = int(caller.stdout.readline())
    processes.track(supervisor)
    (pid,) = ready.ready_pids()
    processes.track(pid)
    caller.kill()
    assert wait_gone(pid)
    assert wait_gone(supervisor)
    data = read_json(record)
    assert (data["reason"], data["supervisor_exit_code"]) == ("parent_lost", 130)


def test_deadline(worker: Worker, ready: ReadyPipe) -> None:
    supervisor = worker.start(*fixture("sleeper", str(ready.path)), deadline="0.3")
    assert supervisor.wait(timeout=BOUND) == 124
    data = read_json(worker.record)
    assert (data["reason"], data["deadline_seconds"]) == ("deadline_exceeded", 0.3)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_supervisor_cancels(worker: Worker, ready: ReadyPipe, signum: int) -> None:
    supervisor = worker.start(*fixture("sleeper", str(ready.path)))
    worker.processes.track(*ready.ready_pids())
    supervisor.send_signal(signum)
    assert supervisor.wait(timeout=BOUND) == 130
    assert read_json(worker.record)["reason"] == "cancelled"


def test_cancel_and_kill_bytes(worker: Worker, ready: ReadyPipe) -> None:
    supervisor = worker.start(*fixture("sleeper", str(ready.path), "--note-term"), grace="60")
    (pid,) = ready.ready_pids()
    worker.processes.track(pid)
    os.write(worker.write_end, b"c")
    assert ready.line() == ["term", str(pid)]
    os.write(worker.write_end, b"k")
    assert supervisor.wait(timeout=BOUND) == 130
    data = read_json(worker.record)
    assert (data["reason"], data["escalated_to_sigkill"]) == ("cancelled", True)


def test_not_found_and_not_executable(worker: Worker, tmp_path: Path) -> None:
    assert worker.start("/nonexistent/program").wait(timeout=BOUND) == 127
    data = read_json(worker.record)
    validate_record(data)
    assert data["reason"] == "launch_failed"
    launch_error = data["launch_error"]
    assert isinstance(launch_error, dict)
    assert launch_error["errno_name"] == "ENOENT"

    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    second = Worker(worker.processes, tmp_path / "second.json")
    assert second.start(str(script)).wait(timeout=BOUND) == 126
    second.close()


def run_seed(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "tether.supervisor", *args],
        capture_output=True,
        text=True,
        timeout=BOUND,
        **kwargs,
    )


def seed_args(record: Path, fd: int, deadline: str = "10", grace: str = "1") -> list[str]:
    return [
        "--variant",
        "v",
        "--parent-fd",
        str(fd),
        "--record",
        str(record),
        "--deadline-seconds",
        deadline,
        "--grace-seconds",
        grace,
    ]


@pytest.mark.parametrize(
    ("deadline", "grace", "needle"),
    [
        ("-1", "1", "--deadline-seconds"),
        ("nan", "1", "--deadline-seconds"),
        ("inf", "1", "--deadline-seconds"),
        ("soon", "1", "--deadline-seconds"),
        ("10", "-5", "--grace-seconds"),
    ],
)
def test_bad_durations_start_nothing(
    tmp_path: Path, deadline: str, grace: str, needle: str
) -> None:
    marker = tmp_path / "started"
    read_end, write_end = os.pipe()
    try:
        result = run_seed(
            *seed_args(tmp_path / "r.json", read_end, deadline, grace),
            "--",
            "touch",
            str(marker),
            pass_fds=(read_end,),
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert result.returncode == 125
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists()
    # A usage error leaves no record: the worker's message is on stderr.
    assert not (tmp_path / "r.json").exists()


def test_bad_parent_fd_and_missing_separator_start_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    regular = tmp_path / "file"
    regular.write_text("")
    read_end, write_end = os.pipe()
    with open(regular) as handle:
        cases = [
            (seed_args(tmp_path / "r.json", 987), "not an open file descriptor", ()),
            (seed_args(tmp_path / "r.json", handle.fileno()), "not a pipe", (handle.fileno(),)),
            (seed_args(tmp_path / "r.json", write_end), "not the read end", (write_end,)),
        ]
        for args, needle, fds in cases:
            result = run_seed(*args, "--", "touch", str(marker), pass_fds=fds)
            assert result.returncode == 125, result.stderr
            assert needle in result.stderr
            assert not marker.exists()
        result = run_seed(
            *seed_args(tmp_path / "r.json", read_end), "touch", str(marker), pass_fds=(read_end,)
        )
        assert result.returncode == 125
        assert "must follow --" in result.stderr
        result = run_seed(
            *seed_args(tmp_path, read_end), "--", "touch", str(marker), pass_fds=(read_end,)
        )
        assert result.returncode == 125
        assert "directory" in result.stderr
    os.close(read_end)
    os.close(write_end)
    assert not marker.exists()

"""``tether ls`` and ``tether show`` on runs with no record yet: running, or lost.

Real processes: a ``tether run`` with a record directory whose command waits
to be stopped. While it runs, ``ls`` shows it running with its deadline left
and its pids, and ``show`` tells its story so far. Its caller stopped (so it
cannot write a fallback record) and its supervisor and command SIGKILLed by
pid, the same log is a lost run, never a running one. A finished run is
listed as before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    EVENTS_SUFFIX,
    Processes,
    ReadyPipe,
    fixture,
    start_ticks,
    tether_argv,
    wait_gone,
)
from tether.review.progress import alive_since


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(tether_argv(*args), capture_output=True, text=True, timeout=BOUND)


def launched_line(directory: Path) -> dict[str, object]:
    """The run's ``launched`` line, once the supervisor has written it (bounded).

    The command announces itself before the supervisor, which launched it
    first, has loaded its event log: nothing outside tells when the line is
    there, so its file is looked at until it is.
    """
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        for log in directory.glob(f"*{EVENTS_SUFFIX}"):
            for line in log.read_text().splitlines():
                event = json.loads(line)
                if event.get("event") == "launched":
                    return dict(event)
        time.sleep(0.01)
    pytest.fail(f"no launched line in {directory}")


def listed(directory: Path) -> list[dict[str, object]]:
    done = tether("ls", str(directory), "--json")
    assert done.returncode == 0, done.stderr
    runs: list[dict[str, object]] = json.loads(done.stdout)
    return runs


def test_a_running_run_is_listed_then_a_lost_one_is_told_apart(
    ready: ReadyPipe, processes: Processes
) -> None:
    runs = Path(os.environ["XDG_STATE_HOME"]) / "tether" / "runs"  # the default, private
    runs.mkdir(parents=True, exist_ok=True)
    caller = processes.start(
        tether_argv(
            "run",
            "--record",
            str(runs / "live.json"),
            "--label",
            "live",
            "--deadline",
            "1h",
            "--",
            *fixture("sleeper", str(ready.path)),
        )
    )
    (pid,) = ready.ready_pids()
    processes.track(pid)
    launched = launched_line(runs)
    supervisor = launched["supervisor_pid"]
    assert isinstance(supervisor, int)
    processes.track(supervisor)
    # The supervisor names itself for good: its pid with its start time, and the command.
    assert launched["supervisor_start_ticks"] == start_ticks(supervisor)
    assert launched["command"] == Path(fixture("sleeper")[0]).name

    (run,) = listed(runs)
    assert (run["state"], run["reason"], run["variant"]) == ("running", "running", "live")
    assert (run["supervisor_pid"], run["eval_pid"]) == (supervisor, pid)
    assert run["supervisor_alive"] is True
    assert run["command_alive"] is True
    left = run["deadline_left_seconds"]
    assert isinstance(left, float)
    assert 0 < left <= 3600
    assert run["record_path"] == str(runs / "live.json")
    table = tether("ls", str(runs)).stdout.splitlines()
    assert table[0].split()[:4] == ["STATE", "SINCE", "FOR", "LEFT"]
    assert table[1].startswith("running")
    assert "live" in table[1].split()
    assert str(supervisor) in table[1].split()
    assert "running" in tether("ls", str(runs), "--reason", "running").stdout
    assert "running" not in tether("ls", str(runs), "--reason", "completed").stdout
    story = tether("show", str(runs / Path(str(run["events_path"])).name))
    assert story.returncode == 0, story.stderr
    assert story.stdout.startswith("run 'live': running\n")
    assert "launched" in story.stdout
    assert story.stderr == ""  # no "the supervisor stopped before writing one"
    by_label = tether("show", "live")  # found by label though it has no record yet
    assert by_label.stdout.startswith("run 'live': running\n"), by_label.stderr

    # Lost: the caller cannot write a fallback record while stopped.
    os.kill(caller.pid, signal.SIGSTOP)
    os.kill(supervisor, signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(supervisor)
    assert wait_gone(pid)
    (run,) = listed(runs)
    assert (run["state"], run["supervisor_alive"], run["command_alive"]) == ("lost", False, False)
    assert run["deadline_left_seconds"] is None
    assert run["command"] == Path(fixture("sleeper")[0]).name  # from the launch line
    table = tether("ls", str(runs)).stdout.splitlines()
    assert table[1].startswith("lost")
    assert f"{supervisor} (gone)" in table[1]
    shown = tether("show", str(Path(str(run["events_path"]))))
    assert "no record" in shown.stdout
    assert "gone (lost)" in shown.stdout
    os.kill(caller.pid, signal.SIGKILL)
    caller.wait(timeout=BOUND)

    # A finished run is listed as before, below the runs without a record.
    assert tether("run", "--record", str(runs / "done.json"), "--", "true").returncode == 0
    progress, records = tether("ls", str(runs)).stdout.split("\n\n")
    assert progress.startswith("STATE")
    assert records.splitlines()[0].split() == [
        "WHEN", "LABEL", "COMMAND", "REASON", "EXIT", "DURATION", "ESCALATED", "RECORD",
    ]  # fmt: skip
    assert "completed" in records
    assert [r["reason"] for r in listed(runs)] == ["lost", "completed"]


def test_a_pid_counts_only_with_a_start_time_before_the_launch() -> None:
    me = os.getpid()
    assert alive_since(me, time.monotonic())
    # The same pid, said to have been launched long before this process
    # started: it is some other process's pid now, reused.
    assert not alive_since(me, time.monotonic() - 10 * 365 * 86400)
    assert not alive_since(True, time.monotonic())
    assert not alive_since(-1, time.monotonic())

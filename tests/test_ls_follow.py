"""``tether ls`` for a day of runs (what ran, -n, --since/--until, its own usage) and
``tether show --follow``, with real runs in the test's own state directory."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import BOUND, read_json, tether_argv, validate_record
from tether.core.spec import script_name
from tether.review import ReviewError, parse_count, parse_since
from tether.shared.paths import default_records_dir

PY = sys.executable


def tether(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tether_argv(*args), capture_output=True, text=True, timeout=BOUND, cwd=cwd, check=False
    )


def records() -> list[dict[str, object]]:
    directory = default_records_dir()
    return [read_json(path) for path in sorted(directory.glob("*.json"))]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "evaluate.py", "--api-key", "sk-secret"], "evaluate.py"),
        (["/usr/bin/python3", "/srv/jobs/evaluate.py"], "evaluate.py"),
        (["python3.12", "-u", "-W", "error", "-X", "dev", "run.py", "x"], "run.py"),
        (["python", "-m", "pkg.mod", "--password", "hunter22"], "pkg.mod"),
        (["python", "-mpkg.mod"], "pkg.mod"),
        (["python", "-c", "import os; print(os.environ['TOKEN'])"], "python -c"),
        (["python3", "-Ic", "print(1)"], "python3 -c"),
        (["pypy3", "--", "x.py"], "x.py"),
        (["python", "-"], "python -"),
        (["python", "-m", "not a module name"], None),
        (["python"], None),
        (["bash", "-euo", "pipefail", "/opt/run.sh", "TOKEN=abc"], "run.sh"),
        (["sh", "-c", "curl -H 'Authorization: Bearer x'"], "sh -c"),
        (["bash", "-s"], None),
        (["node", "x.js"], None),
        (["sleep", "60"], None),
        (["python", "KEY=value"], None),
    ],
)
def test_script_name_takes_the_program_never_an_argument(
    argv: list[str], expected: str | None
) -> None:
    assert script_name(argv) == expected


@given(st.lists(st.text(max_size=20), max_size=6))
def test_script_name_is_total_and_never_an_option_value(argv: list[str]) -> None:
    name = script_name(["python", *argv])
    if name is not None:
        assert "=" not in name
        assert "/" not in name.removeprefix("python ")
        # Only the word right after the options, or -c / -, ever names the run.
        assert any(
            name in (word, word.rstrip("/").rsplit("/", 1)[-1]) or word.startswith("-")
            for word in argv
        )


def test_the_record_and_ls_name_the_script_not_the_interpreter(tmp_path: Path) -> None:
    (tmp_path / "evaluate.py").write_text("import sys\n")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("")
    for argv in (
        [PY, "evaluate.py", "--token", "sekrit-value-1"],
        [PY, "-m", "pkg.mod", "--password", "sekrit-value-2"],
        [PY, "-c", "'sekrit-value-3'"],
    ):
        done = tether("run", "--", *argv, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    found = records()
    for record in found:
        validate_record(record)
        assert "sekrit" not in json.dumps(record)
    assert sorted(str(r["script"]) for r in found) == sorted(
        ["evaluate.py", "pkg.mod", f"{Path(PY).name} -c"]
    )
    listed = tether("ls")
    assert listed.returncode == 0, listed.stderr
    commands = [line.split()[3] for line in listed.stdout.splitlines()[1:]]
    assert sorted(commands) == sorted(["evaluate.py", "pkg.mod", Path(PY).name])
    assert "sekrit" not in listed.stdout


def test_ls_count_reason_since_until_with_json() -> None:
    # Six runs that hit their deadline, at once (a deadline long enough for the command to
    # reach its exec on a loaded machine: one it does not reach is a launch failure).
    stopped = [
        subprocess.Popen(
            tether_argv("run", "--deadline", "3", "--grace", "1", "--", "sleep", "30"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(6)
    ]
    for run in stopped:
        _out, err = run.communicate(timeout=BOUND)
        assert run.returncode == 124, err
    assert tether("run", "--label", "ok", "--", "true").returncode == 0
    listed = tether("ls", "-n", "5", "--reason", "deadline_exceeded", "--since", "1h", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert len(runs) == 5
    assert {run["reason"] for run in runs} == {"deadline_exceeded"}
    started = [run["started_at"] for run in runs]
    assert started == sorted(started, reverse=True)  # the newest five
    assert len(json.loads(tether("ls", "--json").stdout)) == 7
    assert json.loads(tether("ls", "-n", "0", "--json").stdout) == []
    assert json.loads(tether("ls", "--until", "1h", "--json").stdout) == []
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert len(json.loads(tether("ls", "--until", tomorrow, "--json").stdout)) == 7
    labelled = json.loads(tether("ls", "--label", "o*", "-n", "3", "--json").stdout)
    assert [run["variant"] for run in labelled] == ["ok"]
    table = tether("ls", "-n", "2").stdout.splitlines()
    assert len(table) == 3  # the header and two runs


@pytest.mark.parametrize(
    ("options", "needle"),
    [(["-n", "x"], "-n"), (["-n", "-1"], "-n"), (["--until", "tomorrow"], "--until")],
)
def test_ls_refuses_bad_values_in_one_line(options: list[str], needle: str) -> None:
    done = tether("ls", *options)
    assert done.returncode == 125
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["ls", "show", "prune"])
def test_an_unknown_option_prints_the_subcommands_usage(command: str) -> None:
    done = tether(command, "--no-such-option")
    assert done.returncode == 125
    assert done.stderr.startswith(f"usage: tether {command} "), done.stderr
    assert "--no-such-option" in done.stderr


@given(st.text(max_size=40))
def test_parse_since_is_total(text: str) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for flag in ("--since", "--until"):
        try:
            moment = parse_since(text, now=now, flag=flag)
        except ReviewError as error:
            message = str(error)
            moment = None
        if moment is None:
            assert message.startswith(flag)
        else:
            assert moment.utcoffset() is not None


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.sampled_from("smhd"))
def test_parse_since_takes_durations_before_now(amount: float, unit: str) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    seconds = amount * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    moment = parse_since(f"{amount!r}{unit}", now=now, flag="--until")
    if seconds >= (now - datetime.min.replace(tzinfo=UTC)).total_seconds():
        assert moment == datetime.min.replace(tzinfo=UTC)  # further back than year 1
        return
    assert abs((now - moment).total_seconds() - seconds) <= 1e-3 * max(1.0, seconds)


@given(st.text(max_size=25))
def test_parse_count_is_total(text: str) -> None:
    try:
        count = parse_count(text)
    except ReviewError:
        return
    assert (count >= 0 and str(count) == text.strip().lstrip("0")) or count == 0


# -- show --follow ---------------------------------------------------------------------


def _read_line(stream: object, deadline: float) -> str:
    assert hasattr(stream, "readline")
    assert hasattr(stream, "fileno")
    ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
    assert ready, "no line from the follower in time"
    line: str = stream.readline()
    return line


def _start_waiting_run(label: str) -> tuple[subprocess.Popen[bytes], int]:
    """A run whose command waits for a line on a pipe; returns it and the pipe's write end."""
    read_end, write_end = os.pipe()
    run = subprocess.Popen(
        tether_argv("run", "--label", label, "--", "sh", "-c", "read x; echo done"),
        stdin=read_end,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.close(read_end)
    return run, write_end


def _wait_for_log(label: str) -> None:
    deadline = time.monotonic() + BOUND
    directory = default_records_dir()
    while time.monotonic() < deadline:
        for log in directory.glob("*.events.jsonl") if directory.exists() else ():
            if f'"label": "{label}"' in log.read_text():
                return
        time.sleep(0.05)
    pytest.fail("the run's event log never appeared")


@pytest.mark.parametrize("as_json", [False, True])
def test_follow_prints_events_as_they_come_and_ends_with_the_run(as_json: bool) -> None:
    run, write_end = _start_waiting_run("followed")
    follower = None
    try:
        _wait_for_log("followed")
        follower = subprocess.Popen(
            tether_argv("show", "--follow", *(["--json"] if as_json else []), "followed"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + BOUND
        first = _read_line(follower.stdout, deadline)
        assert "launched" in first
        if as_json:
            assert json.loads(first)["event"] == "launched"
        # The run is still going: the follower has not ended.
        assert follower.poll() is None
        os.write(write_end, b"go\n")
        out, err = follower.communicate(timeout=BOUND)
        assert follower.returncode == 0, err
        lines = [first, *out.splitlines()]
        if as_json:
            events = [json.loads(line)["event"] for line in lines]
            assert events[0] == "launched"
            assert events[-1] == "record_written"
            assert "command_exited" in events
        else:
            assert "record_written" in lines[-1]
            assert any("command_exited" in line for line in lines)
        assert "Traceback" not in err
    finally:
        os.close(write_end)
        run.wait(timeout=BOUND)
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait()


def test_follow_a_finished_run_prints_it_whole_and_ends() -> None:
    assert tether("run", "--label", "done", "--", "true").returncode == 0
    done = tether("show", "--follow", "--json", "done")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert events[0] == "launched"
    assert events[-1] == "record_written"
    last = tether("show", "-f", "--last")
    assert last.returncode == 0
    assert "record_written" in last.stdout.splitlines()[-1]


def test_follow_a_missing_run_is_one_line() -> None:
    done = tether("show", "--follow", "no-such-run")
    assert done.returncode == 125
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_follow_stops_on_ctrl_c_without_a_traceback() -> None:
    run, write_end = _start_waiting_run("interrupted")
    try:
        _wait_for_log("interrupted")
        follower = subprocess.Popen(
            tether_argv("show", "--follow", "interrupted"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert "launched" in _read_line(follower.stdout, time.monotonic() + BOUND)
        follower.send_signal(signal.SIGINT)
        _out, err = follower.communicate(timeout=BOUND)
        assert follower.returncode in (130, -signal.SIGINT)
        assert "Traceback" not in err
        assert "KeyboardInterrupt" not in err
    finally:
        os.write(write_end, b"go\n")
        os.close(write_end)
        run.wait(timeout=BOUND)

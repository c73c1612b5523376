"""``tether run`` end to end: real callers, real commands, real signals.

Each test starts ``tether run`` as a real process (the caller), a fixture as
the command, and looks at what is left: exit statuses, the record on disk, and
``/proc`` for anything still running.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)


def run(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        tether_argv(*args), capture_output=True, text=True, timeout=BOUND, **kwargs
    )


def assert_private(record_path: Path) -> None:
    assert stat.S_IMODE(record_path.stat().st_mode) == 0o600
    leftovers = [p.name for p in record_path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.parametrize("code", [0, 3])
def test_completion_keeps_the_command_status(tmp_path: Path, code: int) -> None:
    record = tmp_path / "runs" / "r.json"
    result = run("run", "--record", str(record), "--", *fixture("exit_with", str(code)))
    assert result.returncode == code, result.stderr
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "completed"
    assert data["eval_exit_code"] == code
    assert data["supervisor_exit_code"] == code
    assert data["escalated_to_sigkill"] is False
    assert_private(record)
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700


def test_a_command_killed_by_a_signal_reports_128_plus_n(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    result = run("run", "--record", str(record), "--", *fixture("exit_with", "-15"))
    assert result.returncode == 128 + signal.SIGTERM
    data = read_json(record)
    assert data["eval_exit_code"] == -signal.SIGTERM
    assert data["reason"] == "completed"


def test_output_reaches_the_caller_and_does_not_hang_a_pipe(tmp_path: Path) -> None:
    # As in $(tether run -- echo hi): the supervisor must not hold the pipe open.
    result = run("run", "--no-record", "--", "echo", "hi")
    assert (result.returncode, result.stdout) == (0, "hi\n")


def start_run(
    processes: Processes, ready: ReadyPipe, record: Path, *options: str, command: list[str]
) -> tuple[subprocess.Popen[bytes], list[int], int]:
    caller = processes.start(
        tether_argv("run", "--record", str(record), *options, "--", *command),
        stdout=subprocess.DEVNULL,
    )
    pids = ready.ready_pids()
    processes.track(*pids)
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    processes.track(supervisor)
    return caller, pids, supervisor


def test_caller_sigkilled_stops_the_command(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    caller, pids, supervisor = start_run(
        processes, ready, record, command=fixture("sleeper", str(ready.path), "--children", "2")
    )
    caller.kill()
    assert all(wait_gone(pid) for pid in pids)
    assert wait_gone(supervisor)
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "parent_lost"
    assert data["supervisor_exit_code"] == 130
    assert data["eval_pid"] == pids[0]


def test_deadline_stops_the_command_with_124(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    caller, pids, _ = start_run(
        processes,
        ready,
        record,
        "--deadline",
        # The deadline is kept from the start, even while the supervisor loads: it
        # must leave the command (a Python program) time to announce itself, under load.
        "2",
        "--grace",
        "5",
        command=fixture("sleeper", str(ready.path), "--children", "2"),
    )
    assert caller.wait(timeout=BOUND) == 124
    assert not any(alive(pid) for pid in pids)
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "deadline_exceeded"
    assert data["escalated_to_sigkill"] is False
    assert data["deadline_seconds"] == 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_tether_run_cancels(
    tmp_path: Path, processes: Processes, ready: ReadyPipe, signum: int
) -> None:
    record = tmp_path / "r.json"
    caller, pids, _ = start_run(
        processes, ready, record, command=fixture("sleeper", str(ready.path))
    )
    caller.send_signal(signum)
    assert caller.wait(timeout=BOUND) == 130
    assert not alive(pids[0])
    assert read_json(record)["reason"] == "cancelled"


def test_term_ignored_is_killed_after_the_grace(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    # Cancelled once the command is known to ignore SIGTERM (it announced itself):
    # a deadline could fire before a slow interpreter got that far.
    record = tmp_path / "r.json"
    caller, pids, _ = start_run(
        processes,
        ready,
        record,
        "--grace",
        "0.3",
        command=fixture("sleeper", str(ready.path), "--ignore-term", "--children", "1"),
    )
    caller.send_signal(signal.SIGTERM)
    assert caller.wait(timeout=BOUND) == 130
    assert not any(alive(pid) for pid in pids)
    data = read_json(record)
    assert data["escalated_to_sigkill"] is True
    assert data["eval_exit_code"] == -signal.SIGKILL
    signals = data["signals"]
    assert isinstance(signals, list)
    assert [s["signal"] for s in signals] == ["SIGTERM", "SIGCONT", "SIGKILL"]
    # Rounded to the millisecond in the record.
    assert signals[2]["at_seconds"] - signals[0]["at_seconds"] >= 0.3 - 0.0015


def test_second_ctrl_c_kills_now(tmp_path: Path, processes: Processes, ready: ReadyPipe) -> None:
    record = tmp_path / "r.json"
    caller, pids, _ = start_run(
        processes,
        ready,
        record,
        "--grace",
        "60",
        command=fixture("sleeper", str(ready.path), "--note-term"),
    )
    caller.send_signal(signal.SIGINT)
    assert ready.line() == ["term", str(pids[0])]
    caller.send_signal(signal.SIGINT)
    assert caller.wait(timeout=BOUND) == 130
    assert not alive(pids[0])
    data = read_json(record)
    assert data["reason"] == "cancelled"
    assert data["escalated_to_sigkill"] is True


def test_default_record_location_and_no_record(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    assert run("run", "--", "true", env=env).returncode == 0
    runs = tmp_path / "state" / "tether" / "runs"
    records = list(runs.glob("*.json"))
    assert len(records) == 1
    assert (runs / records[0].name.replace(".json", ".events.jsonl")).exists()
    validate_record(read_json(records[0]))
    assert_private(records[0])
    assert stat.S_IMODE(runs.stat().st_mode) == 0o700

    assert run("run", "--no-record", "--", "true", env=env).returncode == 0
    # The record and its log; and the retention marker, hidden (tether ls skips it).
    assert sorted(path.name.startswith(".") for path in runs.iterdir()) == [False, False, True]


def test_verbose_prints_the_record_path(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    result = run("run", "-v", "--record", str(record), "--", "true")
    assert str(record) in result.stderr


def test_help_lists_every_option_with_its_default() -> None:
    result = run("run", "--help")
    assert result.returncode == 0
    for option in (
        "--deadline", "--grace", "--record", "--no-record", "--record-argv", "--label", "--name",
        "--verbose",
    ):  # fmt: skip
        assert option in result.stdout
    text = " ".join(result.stdout.split())
    assert "default: 0, no deadline" in text
    assert "default: 10s" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--deadlin", "1", "true"], "(did you mean '--deadline'?)"),
        (["run", "--"], "no command to run"),
        (["run"], "no command to run"),
        (["run", "--deadline", "-1", "--", "true"], "--deadline"),
        (["run", "--deadline", "nan", "--", "true"], "--deadline"),
        (["run", "--deadline", "inf", "--", "true"], "--deadline"),
        (["run", "--grace", "soon", "--", "true"], "--grace"),
        (["run", "--deadline", "", "--", "true"], "--deadline"),
    ],
)
def test_bad_usage_is_refused_before_anything_starts(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    marker = tmp_path / "started"
    if args[-1] == "true":
        args = [*args[:-1], "touch", str(marker)]
    result = run(*args)
    assert result.returncode == 125
    assert needle in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # usage line + one message at most
    assert not marker.exists()


def test_record_path_problems_are_refused_before_starting(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    a_file = tmp_path / "file"
    a_file.write_text("")
    for record in (tmp_path, a_file / "r.json"):
        result = run("run", "--record", str(record), "--", "touch", str(marker))
        assert result.returncode == 125
        assert result.stderr.startswith("tether: ")
        assert len(result.stderr.strip().splitlines()) == 1
        assert not marker.exists()


def test_command_not_found_is_127_with_a_launch_failed_record(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    result = run("run", "--record", str(record), "--", "/nonexistent/command")
    assert result.returncode == 127
    assert "/nonexistent/command" in result.stderr
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "launch_failed"
    assert data["supervisor_exit_code"] == 127
    assert data["eval_pid"] is None


def test_command_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    record = tmp_path / "r.json"
    result = run("run", "--record", str(record), "--", str(script))
    assert result.returncode == 126
    assert read_json(record)["reason"] == "launch_failed"


def test_the_caller_side_never_loads_the_heavy_modules() -> None:
    probe = (
        "import sys, tether, tether.cli, tether.caller.start, tether.caller.fork; "
        "print(sorted(m for m in ('transitions', 'structlog') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=BOUND, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["--deadline", "nan", "--"],
        ["--deadlin", "5m"],  # a typo is refused, never taken for the command
        ["--deadline", "5m", "--grace", "-1", "--"],
    ],
)
def test_a_refused_command_line_leaves_nothing_behind(tmp_path: Path, args: list[str]) -> None:
    """A usage error is GNU's two lines and 125: no command, no record, not even its directory."""
    record = tmp_path / "runs" / "r.json"
    marker = tmp_path / "started"
    result = run("run", "--record", str(record), "--name", "x", *args, "touch", str(marker))
    assert result.returncode == 125
    assert result.stderr.startswith("tether run: ")
    assert result.stderr.endswith("\nTry 'tether run --help' for more information.\n")
    assert len(result.stderr.strip().splitlines()) == 2
    assert not marker.exists()
    assert not record.parent.exists()


@pytest.mark.parametrize("closed", [0, 1, 2])
def test_a_closed_standard_stream_becomes_dev_null_for_the_command(
    tmp_path: Path, closed: int
) -> None:
    # A new pipe would take the closed stream's number; tether must not mistake it for stdio.
    record = tmp_path / "r.json"
    streams: dict[str, object] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
    result = subprocess.run(
        [
            "sh", "-c", f'exec {closed}>&- "$@"', "sh",
            *tether_argv("run", "--record", str(record), "--", "sh", "-c", "cat; echo out; exit 3"),
        ],
        timeout=BOUND,
        **streams,  # type: ignore[call-overload]
    )  # fmt: skip
    assert result.returncode == 3
    assert read_json(record)["reason"] == "completed"


def test_a_relative_xdg_state_home_is_ignored(tmp_path: Path) -> None:
    """The XDG specification: a relative path is invalid; records go under ~/.local/state."""
    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": "relative/state"}
    result = run("run", "-v", "--", "true", env=env, cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert list(elsewhere.iterdir()) == []
    assert list((home / ".local" / "state" / "tether" / "runs").glob("*.json"))


def test_a_usage_error_shows_control_characters_escaped(tmp_path: Path) -> None:
    result = run("run", "--bogus\x1b[2J", "--", "true")
    assert result.returncode == 125
    assert "\x1b" not in result.stderr
    assert "\\x1b[2J" in result.stderr


def test_options_end_at_the_first_word_that_is_not_one(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    result = run("run", "--record", str(record), "sh", "-c", "exit 3", "--deadline")
    assert result.returncode == 3, result.stderr
    assert read_json(record)["reason"] == "completed"
    # -- still works, and lets a command start with a dash.
    result = run("run", "--no-record", "--", "-v")
    assert result.returncode == 127


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        (
            ["--deadlin", "5m", "true"],
            "unrecognized option '--deadlin' (did you mean '--deadline'?)",
        ),
        (["--gracee", "1", "true"], "unrecognized option '--gracee' (did you mean '--grace'?)"),
        (["--zzzzzz", "true"], "unrecognized option '--zzzzzz'"),
        (["-x", "true"], "invalid option -- 'x'"),
        (["--deadline"], "option '--deadline' requires an argument"),
        (["--verbose=yes", "true"], "option '--verbose' doesn't allow an argument"),
        (["--deadline", "soon", "true"], "--deadline: invalid duration 'soon'"),
        (["--no-record", "--record", "r", "true"], "argument --record: not allowed with"),
    ],
)
def test_every_usage_error_reads_as_gnu_and_leaves_no_record(
    tmp_path: Path, args: list[str], first_line: str
) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "HOME": str(tmp_path)}
    result = run("run", *args, env=env)
    assert result.returncode == 125
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"tether run: {first_line}"), lines
    assert lines[1:] == ["Try 'tether run --help' for more information."]
    assert not state.exists()


def test_a_value_that_looks_like_an_option_is_a_value(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    result = run("run", "--record", str(record), "--name", "-x", "true")
    assert result.returncode == 0, result.stderr
    assert read_json(record)["variant"] == "-x"

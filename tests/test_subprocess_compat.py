"""``tether.run`` in ``subprocess.run``'s place: the same exceptions, caught by the same clauses.

A program written for :mod:`subprocess` (``fixtures/subprocess_program.py``)
runs once with ``subprocess.run`` and once with ``tether.run`` in its place;
the two transcripts of what came back and what was caught must be the same.
The tests after it pin what only tether adds: a ``timeout`` stops the whole
tree and leaves a record before it raises, a shorter ``deadline`` stays an
outcome, and the messages redact what looks like a secret.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from conftest import BOUND, FIXTURES, read_json, validate_record, wait_gone
from tether import Reason


def transcript(runner: str, directory: Path, state: Path) -> str:
    program = [sys.executable, str(FIXTURES / "subprocess_program.py"), runner, str(directory)]
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    done = subprocess.run(program, capture_output=True, text=True, env=env, timeout=4 * BOUND)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_program_written_for_subprocess_run_catches_the_same(tmp_path: Path) -> None:
    expected = transcript("subprocess", tmp_path, tmp_path / "state")
    seen = transcript("tether", tmp_path, tmp_path / "state")
    assert seen == expected
    caught = {
        line.split()[0]: line.split()[1] for line in seen.splitlines() if not line.startswith(" ")
    }
    assert caught == {  # every except clause of the program was reached
        "capture": "returned",
        "input": "returned",
        "bytes": "returned",
        "status": "returned",
        "check": "CalledProcessError",
        "check-ok": "returned",
        "signal": "CalledProcessError",
        "timeout": "TimeoutExpired",
        "timeout-ok": "returned",
        "not-found": "FileNotFoundError",
        "not-executable": "PermissionError",
    }


def test_a_timeout_stops_the_tree_and_writes_the_record_before_it_raises(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    with pytest.raises(tether.TimeoutExpired) as caught:
        tether.run(
            ["sh", "-c", "echo so far; sleep 60 & sleep 60"],
            timeout=0.3,
            grace=5,
            record=record,
            capture_output=True,
            text=True,
        )
    error = caught.value
    assert isinstance(error, subprocess.TimeoutExpired)
    assert isinstance(error, TimeoutError)
    assert (error.cmd, error.timeout) == (["sh", "-c", "echo so far; sleep 60 & sleep 60"], 0.3)
    assert error.stdout in (None, b"so far\n")  # bytes whatever text= says, as subprocess
    assert error.tether is None
    outcome = error.outcome
    assert outcome is not None
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    assert outcome.pid is not None
    assert outcome.supervisor_pid is not None
    assert wait_gone(outcome.pid)
    assert wait_gone(outcome.supervisor_pid)
    data = read_json(record)  # written before the exception was raised
    validate_record(data)
    assert (data["reason"], data["deadline_seconds"]) == ("deadline_exceeded", 0.3)


def test_a_shorter_deadline_is_an_outcome_and_a_longer_one_gives_way(tmp_path: Path) -> None:
    outcome = tether.run(["sleep", "60"], deadline=0.2, timeout=60, record=False)
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    with pytest.raises(tether.TimeoutExpired):
        tether.run(["sleep", "60"], deadline="1h", timeout="0.2s", record=False)
    with pytest.raises(tether.TimeoutExpired):  # as subprocess: already expired
        tether.run(["sleep", "60"], timeout=0, record=False)
    assert tether.run(["true"], timeout=60, check=True, record=False).ok


@pytest.mark.parametrize("timeout", [float("nan"), "soon", [1]])
def test_a_bad_timeout_is_refused_before_anything_starts(timeout: object) -> None:
    with pytest.raises((ValueError, TypeError), match="timeout"):
        tether.run(["true"], timeout=timeout, record=False)  # type: ignore[arg-type]


def test_run_async_takes_a_timeout_too() -> None:
    async def main() -> None:
        with pytest.raises(subprocess.TimeoutExpired) as caught:
            await tether.run_async(["sleep", "60"], timeout=0.2, record=False)
        assert isinstance(caught.value, tether.TimeoutExpired)
        assert caught.value.outcome is not None
        with pytest.raises(subprocess.CalledProcessError):
            await tether.run_async(["false"], timeout=60, check=True, record=False)

    asyncio.run(main())


def test_wait_with_a_timeout_raises_subprocess_s_exception_and_leaves_it_running() -> None:
    with tether.launch(["sleep", "60"], record=False) as job:
        with pytest.raises(tether.TimeoutExpired) as caught:
            job.wait(timeout=0)
        assert isinstance(caught.value, subprocess.TimeoutExpired)
        assert caught.value.tether is job
        assert caught.value.cmd == ["sleep", "60"]
        assert job.outcome is None
        job.kill()


def test_not_found_and_not_executable_are_both_kinds(tmp_path: Path) -> None:
    with pytest.raises(tether.CommandNotFound) as missing:
        tether.launch(["no-such-program-for-tether"], record=False)
    assert isinstance(missing.value, FileNotFoundError)
    assert isinstance(missing.value, tether.LaunchError)
    assert (missing.value.errno, missing.value.exit_status) == (errno.ENOENT, 127)
    assert missing.value.filename == "no-such-program-for-tether"
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    with pytest.raises(PermissionError) as refused:
        tether.run([str(script)], record=False)
    assert isinstance(refused.value, tether.CommandNotExecutable)
    assert refused.value.exit_status == 126


def test_a_missing_working_directory_stays_a_plain_launch_error(tmp_path: Path) -> None:
    with pytest.raises(tether.LaunchError) as caught:
        tether.run(["true"], cwd=tmp_path / "missing", record=False)
    assert caught.value.exit_status == 125


def test_the_messages_name_the_command_with_its_secrets_redacted() -> None:
    argv = ["sh", "-c", "exit 2", "--password=hunter2"]
    with pytest.raises(subprocess.CalledProcessError) as failed:
        tether.run(argv, check=True, record=False)
    # The sentence as this Python's subprocess writes it (3.15 no longer quotes the list).
    before, _, after = str(subprocess.CalledProcessError(2, [*argv[:3], "--password=?"])).partition(
        "?"
    )
    assert str(failed.value).startswith(before)
    assert str(failed.value).endswith(after)
    assert "hunter2" not in str(failed.value)
    assert failed.value.cmd == argv  # the attribute is the command itself, as in subprocess
    with pytest.raises(tether.TimeoutExpired) as late:
        tether.run(["sh", "-c", "sleep 60", "--token=hunter2"], timeout=0.1, record=False)
    assert "hunter2" not in str(late.value)
    outcome = tether.run(["sleep", "60"], deadline=0.1, record=False)
    stopped = r"ended with reason deadline_exceeded, exit status 124"
    with pytest.raises(tether.CommandFailed, match=stopped):
        outcome.check()

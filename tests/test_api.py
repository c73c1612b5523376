"""The Python API, blocking side: real commands, real supervisors, real signals.

Each test launches fixtures through ``tether.launch``/``tether.run`` from this
very process (the caller), or from a helper caller in ``fixtures/`` that the
test then SIGKILLs, and looks at what is left: outcomes, records, ``/proc``.
Every process a test learns about is tracked and killed by pid at teardown.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

import tether
from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    read_json,
    validate_record,
    wait_gone,
)
from tether import LaunchError, Outcome, Reason, Tether, TimeoutExpired


def track(processes: Processes, handle: Tether) -> Tether:
    processes.track(handle.pid, handle.supervisor_pid)
    return handle


def sleeper(ready: ReadyPipe, *options: str) -> list[str]:
    return fixture("sleeper", str(ready.path), *options)


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Default records go to a directory of the test's own."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


# -- how runs end ---------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
def test_run_reports_completion_with_the_command_status(tmp_path: Path, code: int) -> None:
    record = tmp_path / "r.json"
    outcome = tether.run(fixture("exit_with", str(code)), record=record, label="exit")
    assert outcome.reason is Reason.COMPLETED
    assert (outcome.exit_status, outcome.returncode) == (code, code)
    assert outcome.ok is (code == 0)
    assert outcome.escalated_to_sigkill is False
    assert outcome.record_path == record
    assert outcome.label == "exit"
    data = outcome.read_record()
    validate_record(data)
    assert data["reason"] == "completed"
    assert data["variant"] == "exit"
    assert data["eval_pid"] == outcome.pid
    assert data["supervisor_pid"] == outcome.supervisor_pid
    assert outcome.elapsed_seconds == data["elapsed_seconds"]
    assert outcome.started_at is not None
    assert outcome.finished_at is not None
    assert outcome.started_at <= outcome.finished_at


def test_a_command_killed_by_a_signal_reports_it_subprocess_style() -> None:
    outcome = tether.run(fixture("exit_with", "-15"), record=False)
    assert outcome.reason is Reason.COMPLETED
    assert outcome.returncode == -signal.SIGTERM
    assert outcome.exit_status == 128 + signal.SIGTERM
    assert not outcome.ok


def test_check_raises_with_the_outcome() -> None:
    with pytest.raises(tether.CommandFailed) as caught:
        tether.run(fixture("exit_with", "4"), record=False, label="four", check=True)
    assert caught.value.outcome.exit_status == 4
    assert "four" in str(caught.value)
    assert tether.run(["true"], record=False, check=True).ok


def test_deadline_stops_the_whole_tree(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    handle = track(
        processes,
        tether.launch(sleeper(ready, "--children", "2"), deadline=0.5, grace=5, record=record),
    )
    pids = ready.ready_pids()
    processes.track(*pids)
    outcome = handle.wait(timeout=BOUND)
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    assert outcome.exit_status == 124
    assert outcome.escalated_to_sigkill is False
    assert not any(alive(pid) for pid in pids)
    assert outcome.elapsed_seconds is not None
    assert outcome.elapsed_seconds >= 0.5
    assert read_json(record)["deadline_seconds"] == 0.5


def test_durations_may_be_strings_or_timedeltas(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    outcome = tether.run(["sleep", "5"], deadline="0.2s", grace="1m", record=record)
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    data = read_json(record)
    assert (data["deadline_seconds"], data["grace_seconds"]) == (0.2, 60.0)
    outcome = tether.run(["sleep", "5"], deadline=timedelta(milliseconds=200), record=record)
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    assert read_json(record)["grace_seconds"] == 10.0


def test_cancel_is_graceful(processes: Processes, ready: ReadyPipe) -> None:
    handle = track(processes, tether.launch(sleeper(ready), record=False))
    (pid,) = ready.ready_pids()
    assert handle.outcome is None
    handle.cancel()
    outcome = handle.wait(timeout=BOUND)
    assert outcome.reason is Reason.CANCELLED
    assert outcome.exit_status == 130
    assert outcome.returncode == -signal.SIGTERM
    assert outcome.escalated_to_sigkill is False
    assert not alive(pid)
    handle.cancel()  # harmless once over
    handle.kill()


def test_cancel_escalates_after_the_grace(processes: Processes, ready: ReadyPipe) -> None:
    handle = track(processes, tether.launch(sleeper(ready, "--ignore-term"), grace=0.3))
    (pid,) = ready.ready_pids()
    handle.cancel()
    outcome = handle.wait(timeout=BOUND)
    assert outcome.reason is Reason.CANCELLED
    assert outcome.escalated_to_sigkill is True
    assert outcome.returncode == -signal.SIGKILL
    assert not alive(pid)


def test_kill_does_not_wait_for_the_grace(processes: Processes, ready: ReadyPipe) -> None:
    handle = track(processes, tether.launch(sleeper(ready, "--ignore-term"), grace=60))
    (pid,) = ready.ready_pids()
    handle.kill()
    outcome = handle.wait(timeout=BOUND)  # far less than the 60 s grace
    assert outcome.reason is Reason.CANCELLED
    assert outcome.escalated_to_sigkill is True
    assert not alive(pid)


def test_a_lost_supervisor_is_reported_and_recorded(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    handle = track(processes, tether.launch(sleeper(ready), record=record))
    (pid,) = ready.ready_pids()
    os.kill(handle.supervisor_pid, signal.SIGKILL)
    outcome = handle.wait(timeout=BOUND)
    assert outcome.reason is Reason.SUPERVISOR_LOST
    assert outcome.exit_status == 125
    assert outcome.returncode is None
    assert outcome.message is not None
    assert "supervisor" in outcome.message
    assert wait_gone(pid)  # the parent-death signal, the backstop
    data = outcome.read_record()
    validate_record(data)
    assert data["reason"] == "supervisor_lost"
    assert data["eval_pid"] == pid


# -- launching ------------------------------------------------------------------


def test_launch_returns_once_the_command_runs(processes: Processes, ready: ReadyPipe) -> None:
    handle = track(processes, tether.launch(sleeper(ready), record=False))
    assert handle.pid == ready.ready_pids()[0]
    assert alive(handle.pid)
    assert alive(handle.supervisor_pid)
    assert handle.record_path is None
    handle.kill()
    handle.wait(timeout=BOUND)


@pytest.mark.parametrize(
    ("argv", "number", "status"),
    [
        (["/nonexistent/tether-test-command"], errno.ENOENT, 127),
        (["tether-no-such-command-anywhere"], errno.ENOENT, 127),
        (["NOT-EXECUTABLE"], errno.EACCES, 126),
    ],
)
def test_launch_error_says_why_and_leaves_nothing_behind(
    tmp_path: Path, argv: list[str], number: int, status: int
) -> None:
    if argv == ["NOT-EXECUTABLE"]:
        script = tmp_path / "script"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o644)  # no execute bit for anyone, so root is refused too
        argv = [str(script)]
    before = open_fds()
    record = tmp_path / "r.json"
    with pytest.raises(LaunchError) as caught:
        tether.launch(argv, record=record)
    error = caught.value
    assert isinstance(error, OSError)
    assert error.errno == number
    assert error.exit_status == status
    assert error.record_path == record
    assert os.strerror(number) in str(error)
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "launch_failed"
    supervisor = data["supervisor_pid"]
    assert isinstance(supervisor, int)
    assert wait_gone(supervisor)
    assert open_fds() == before


def test_launch_error_without_a_record() -> None:
    with pytest.raises(LaunchError) as caught:
        tether.launch(["/nonexistent/x"], record=False)
    assert caught.value.errno == errno.ENOENT
    assert caught.value.strerror == os.strerror(errno.ENOENT)
    assert caught.value.record_path is None
    copy = pickle.loads(pickle.dumps(caught.value))  # it can cross a process boundary
    assert (str(copy), copy.errno, copy.exit_status) == (str(caught.value), errno.ENOENT, 127)


def test_a_missing_working_directory_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as caught:
        tether.launch(["true"], cwd=tmp_path / "missing", record=False)
    assert caught.value.errno == errno.ENOENT
    assert caught.value.exit_status == 125


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"deadline": -1}, "deadline"),
        ({"deadline": math.nan}, "deadline"),
        ({"deadline": math.inf}, "deadline"),
        ({"deadline": "soon"}, "deadline"),
        ({"deadline": ""}, "deadline"),
        ({"grace": -0.5}, "grace"),
        ({"grace": math.nan}, "grace"),
        ({"grace": "inf"}, "grace"),
    ],
)
def test_bad_durations_are_refused_before_anything_starts(
    tmp_path: Path, options: dict[str, object], needle: str
) -> None:
    marker = tmp_path / "started"
    record = tmp_path / "r.json"
    with pytest.raises(ValueError, match=needle):
        tether.launch(["touch", str(marker)], record=record, **options)  # type: ignore[arg-type]
    assert not marker.exists()
    assert not record.exists()


@pytest.mark.parametrize(
    ("argv", "options", "error"),
    [
        ("sleep 1", {}, TypeError),
        ([], {}, ValueError),
        ([b"true"], {}, TypeError),
        (["true"], {"deadline": True}, TypeError),
        (["true"], {"env": {"A": 1}}, TypeError),
        (["true"], {"stdout": subprocess.STDOUT}, ValueError),  # STDOUT is for stderr only
        (["true"], {"input": b"x"}, TypeError),  # run()'s, not launch()'s
        (["true"], {"label": 3}, TypeError),
        (["true"], {"stdout": 9999}, ValueError),  # not an open descriptor: no /dev/null guess
        (["true"], {"stderr": io.StringIO()}, TypeError),  # no descriptor behind it
        (["true"], {"deadlin": 5}, TypeError),  # a misspelt option is not silently ignored
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    argv: object, options: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        tether.launch(argv, record=False, **options)  # type: ignore[arg-type]


def test_an_unusable_record_path_is_refused_before_starting(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    a_file = tmp_path / "file"
    a_file.write_text("")
    for record in (tmp_path, a_file / "r.json"):
        with pytest.raises(LaunchError) as caught:
            tether.launch(["touch", str(marker)], record=record)
        assert caught.value.exit_status == 125
        assert "record" in str(caught.value)
    assert not marker.exists()


def test_records_go_to_the_default_directory_unless_told_otherwise(state_home: Path) -> None:
    outcome = tether.run(["true"])
    runs = state_home / "tether" / "runs"
    assert outcome.record_path is not None
    assert outcome.record_path.parent == runs
    validate_record(outcome.read_record())
    assert tether.run(["true"], record=True).record_path is not None
    nothing = tether.run(["true"], record=False)
    assert nothing.record_path is None
    with pytest.raises(ValueError, match="record=False"):
        nothing.read_record()
    assert len(list(runs.glob("*.json"))) == 2


def test_stdio_env_and_cwd_reach_the_command(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = "import os, sys; print(os.environ['TETHER_TEST'], os.getcwd()); sys.exit(7)"
    with out.open("w") as stream:
        outcome = tether.run(
            [sys.executable, "-c", script],
            env={**os.environ, "TETHER_TEST": "hello"},
            cwd=tmp_path,
            stdout=stream,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            record=False,
        )
    assert outcome.returncode == 7
    assert out.read_text() == f"hello {tmp_path}\n"


def test_running_out_of_descriptors_is_a_launch_error_that_leaks_nothing() -> None:
    """A launch that cannot get its pipes raises LaunchError (125) and closes what it opened."""
    script = (
        "import os, resource, tether\n"
        "tether.run(['true'], record=False)\n"
        "def fds(): return sorted(os.listdir('/proc/self/fd'))\n"
        "for spare in range(1, 24):\n"
        "    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "    before = fds()\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (len(before) + spare, hard))\n"
        "    try:\n"
        "        outcome = tether.run(['true'], record=False)\n"
        "    except tether.LaunchError as error:\n"
        "        print('refused', error.exit_status, error.errno)\n"
        "    else:\n"
        "        print('ran', outcome.reason.value)\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))\n"
        "    assert fds() == before, (spare, before, fds())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "refused 125 24" in lines  # EMFILE, in one line, no bare OSError
    assert lines[-1] == "ran completed"  # and with enough descriptors it works


def test_no_descriptor_leaks_across_many_runs(processes: Processes, ready: ReadyPipe) -> None:
    tether.run(["true"], record=False)  # the first run imports what later runs reuse
    before = open_fds()
    for _ in range(5):
        tether.run(["true"], record=False)
    with tether.launch(sleeper(ready), record=False) as handle:
        track(processes, handle)
        ready.ready_pids()
    assert open_fds() == before


# -- the handle -----------------------------------------------------------------


def test_context_manager_cancels_and_waits(processes: Processes, ready: ReadyPipe) -> None:
    with tether.launch(sleeper(ready, "--children", "1"), record=False) as handle:
        track(processes, handle)
        pids = ready.ready_pids()
        processes.track(*pids)
    outcome = handle.outcome
    assert outcome is not None
    assert outcome.reason is Reason.CANCELLED
    assert not any(alive(pid) for pid in pids)


def test_context_manager_keeps_a_finished_outcome() -> None:
    with tether.launch(["true"], record=False) as handle:
        outcome = handle.wait(timeout=BOUND)
    assert handle.outcome is outcome
    assert outcome.reason is Reason.COMPLETED


def test_an_exception_in_the_block_cancels_the_command(
    processes: Processes, ready: ReadyPipe
) -> None:
    launched: list[Tether] = []

    def fail_inside() -> None:
        with tether.launch(sleeper(ready), record=False) as handle:
            launched.append(track(processes, handle))
            ready.ready_pids()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail_inside()
    outcome = launched[0].outcome
    assert outcome is not None
    assert outcome.reason is Reason.CANCELLED


def test_wait_timeout_raises_and_leaves_the_command_running(
    processes: Processes, ready: ReadyPipe
) -> None:
    with tether.launch(sleeper(ready), record=False) as handle:
        track(processes, handle)
        ready.ready_pids()
        started = time.monotonic()
        with pytest.raises(TimeoutExpired) as caught:
            handle.wait(timeout=0.2)
        assert time.monotonic() - started >= 0.2
        assert isinstance(caught.value, TimeoutError)
        assert caught.value.timeout == 0.2
        assert caught.value.tether is handle
        with pytest.raises(TimeoutExpired):
            handle.wait(timeout=0)
        assert alive(handle.pid)
        assert handle.outcome is None
    with pytest.raises(ValueError, match="timeout"):
        handle.wait(timeout=-1)


def test_repr_is_readable(processes: Processes, ready: ReadyPipe) -> None:
    handle = track(processes, tether.launch(sleeper(ready), label="night-eval", record=False))
    ready.ready_pids()
    text = repr(handle)
    assert text.startswith("<Tether 'python")
    assert "label='night-eval'" in text
    assert f"pid={handle.pid}" in text
    assert f"supervisor_pid={handle.supervisor_pid}" in text
    assert text.endswith("running>")
    handle.cancel()
    handle.wait(timeout=BOUND)
    assert repr(handle).endswith("cancelled, exit status 130>")


def test_outcome_repr_keeps_argv_out(tmp_path: Path) -> None:
    outcome = tether.run(["echo", "hunter2"], stdout=subprocess.DEVNULL, record=False)
    assert outcome.argv == ("echo", "hunter2")
    assert "hunter2" not in repr(outcome)
    assert "COMPLETED" in repr(outcome)
    assert isinstance(outcome, Outcome)


def test_many_threads_wait_for_one_command(processes: Processes, ready: ReadyPipe) -> None:
    handle = track(processes, tether.launch(sleeper(ready), record=False))
    ready.ready_pids()
    results: list[Outcome | str] = []
    lock = threading.Lock()
    everyone_waits = threading.Barrier(9)

    def waiter(timeout: float | None) -> None:
        everyone_waits.wait()
        try:
            outcome: Outcome | str = handle.wait(timeout=timeout)
        except TimeoutExpired:
            outcome = "timeout"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=waiter, args=(None,)) for _ in range(6)]
    threads += [threading.Thread(target=waiter, args=(0.1,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    everyone_waits.wait()
    threads[-1].join(BOUND)
    threads[-2].join(BOUND)  # the short waits gave up, handing the pipe on
    assert results == ["timeout", "timeout"]
    handle.cancel()
    for thread in threads:
        thread.join(BOUND)
    outcomes = [r for r in results if isinstance(r, Outcome)]
    assert len(outcomes) == 6
    assert all(o is outcomes[0] for o in outcomes)
    assert outcomes[0].reason is Reason.CANCELLED


def test_fifty_threads_launch_at_once_in_this_process(tmp_path: Path) -> None:
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        outcome = tether.run(["true"], record=tmp_path / f"{index}.json")
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * BOUND)
    assert len(outcomes) == 50
    assert {o.reason for o in outcomes} == {Reason.COMPLETED}
    assert len({o.supervisor_pid for o in outcomes}) == 50


def test_ctrl_c_while_waiting_cancels_and_a_second_one_kills(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    caller = processes.start(
        fixture("api_interrupted", str(record), "60", "--", *sleeper(ready, "--note-term")),
        stdout=subprocess.PIPE,
    )
    (pid,) = ready.ready_pids()
    processes.track(pid)
    announced, supervisor = map(int, read_line(caller.stdout, BOUND).split())
    assert announced == pid
    processes.track(supervisor)
    caller.send_signal(signal.SIGINT)
    assert ready.line() == ["term", str(pid)]  # a graceful cancel, then a wait for the grace
    assert alive(pid)
    caller.send_signal(signal.SIGINT)  # a second Ctrl-C: SIGKILL now
    assert read_line(caller.stdout, BOUND) == "interrupted\n"
    assert caller.wait(BOUND) == 1
    assert wait_gone(supervisor)  # gone once the record is written
    assert not alive(pid)
    data = read_json(record)
    assert data["reason"] == "cancelled"
    assert data["escalated_to_sigkill"] is True


# -- when the caller dies -------------------------------------------------------


def read_line(stream: object, timeout: float) -> str:
    """One line from a child's stdout pipe, within ``timeout`` seconds."""
    assert hasattr(stream, "fileno")
    assert hasattr(stream, "readline")
    readable, _, _ = select.select([stream], [], [], timeout)
    if not readable:
        pytest.fail(f"the caller announced nothing within {timeout}s")
    line = stream.readline()
    assert isinstance(line, bytes)
    return line.decode()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_fifty_commands_stop_when_their_caller_is_killed(
    tmp_path: Path, processes: Processes, mode: str
) -> None:
    caller = processes.start(
        fixture("api_many", mode, "50", str(tmp_path), "--", "sleep", "600"),
        stdout=subprocess.PIPE,
    )
    # Fifty supervisors starting on a small machine take a while: a generous bound.
    listing = json.loads(read_line(caller.stdout, 120))
    assert len(listing) == 50
    for entry in listing:
        processes.track(entry["pid"], entry["supervisor_pid"])
    assert all(alive(entry["pid"]) for entry in listing)

    caller.kill()
    caller.wait(BOUND)
    for entry in listing:  # a supervisor is gone only after writing its record
        assert wait_gone(entry["supervisor_pid"], 60)
        assert not alive(entry["pid"])
    reasons = {read_json(Path(entry["record"]))["reason"] for entry in listing}
    assert reasons == {"parent_lost"}
    assert len(list(tmp_path.glob("*.json"))) == 50


def test_a_forked_worker_does_not_keep_the_command_alive(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"
    caller = processes.start(
        fixture("api_fork", str(record), "--", *sleeper(ready)), stdout=subprocess.PIPE
    )
    line = json.loads(read_line(caller.stdout, BOUND))
    processes.track(line["pid"], line["supervisor_pid"], line["worker_pid"])
    assert ready.ready_pids() == [line["pid"]]

    caller.kill()
    caller.wait(BOUND)
    assert wait_gone(line["supervisor_pid"])
    assert not alive(line["pid"])
    assert alive(line["worker_pid"])  # the worker outlived its parent, and did not matter
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "parent_lost"


# -- nothing global in the caller -----------------------------------------------


def probe(body: str) -> dict[str, object]:
    """Run ``body`` in a fresh interpreter; return what it left in sys.modules and signals."""
    script = f"""
import json, signal, sys
def handlers():
    return {{int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()
            if signal.getsignal(s) is not None}}
before = handlers()
{body}
heavy = sorted(m for m in ("transitions", "structlog", "asyncio", "logging") if m in sys.modules)
root = sys.modules["logging"].getLogger().handlers if "logging" in sys.modules else []
print(json.dumps({{
    "heavy": heavy,
    "handlers_changed": handlers() != before,
    "wakeup_fd": signal.set_wakeup_fd(-1),
    "root_handlers": len(root),
}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND, check=True
    )
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def test_import_tether_is_cheap() -> None:
    assert probe("import tether") == {
        "heavy": [],
        "handlers_changed": False,
        "wakeup_fd": -1,
        "root_handlers": 0,
    }


def test_a_launch_touches_nothing_global() -> None:
    body = (
        "import tether\n"
        "tether.run(['true'], record=False)\n"
        "with tether.launch(['sleep', '5'], record=False) as t: pass\n"
        "assert t.outcome.reason == 'cancelled'\n"
    )
    assert probe(body) == {
        "heavy": [],
        "handlers_changed": False,
        "wakeup_fd": -1,
        "root_handlers": 0,
    }


def test_names_are_exported_lazily_but_visibly() -> None:
    for name in tether.__all__:
        assert getattr(tether, name) is not None
    assert {"launch", "run", "launch_async", "run_async", "Tether"} <= set(dir(tether))
    with pytest.raises(AttributeError):
        _ = tether.no_such_name  # type: ignore[attr-defined]
    from tether import launch

    assert launch is tether.launch


def test_a_deadline_of_years_is_waited_for_in_pieces_poll_can_take() -> None:
    """``poll()`` takes at most 2**31-1 ms; a longer deadline (GNU-valid) must not overflow it."""
    assert tether.run(["true"], deadline=2**32, record=False).reason is tether.Reason.COMPLETED
    with tether.launch(["true"], deadline=2**32, record=False) as job:
        assert job.wait(timeout=2**32).exit_status == 0

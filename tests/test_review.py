"""``tether show`` and ``tether ls``: real records from real runs, and files that went wrong.

The real runs are made once for the module by ``tether run`` itself (a command
that completes, one stopped at its deadline and escalated to SIGKILL, one that
cannot be found, one whose caller is SIGKILLed), so the review tools are tested
on exactly what tether writes. The edge cases — a record whose log is gone, a
log whose record never came, a last line cut in half, files that are not
tether's at all — are made by hand from those files or from a template record
that validates against the schema.
"""

from __future__ import annotations

import copy
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    fixture,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.review import Filters, ReviewError, parse_reasons, parse_since

KINDS = ("completed", "deadline", "launch_failed", "caller_lost")


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``tether ARGS``, piped (so never on a terminal), and return what it did."""
    environ = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    return subprocess.run(
        tether_argv(*args),
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=environ if env is None else env,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 125, result
    assert result.stdout == ""
    assert result.stderr.startswith("tether: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


# -- real runs ------------------------------------------------------------------------


def _caller_lost(processes: Processes, ready: ReadyPipe, record: Path) -> None:
    # Announced only once SIGTERM is ignored and the child exists: the stop escalates.
    caller = processes.start(
        tether_argv(
            "run", "--name", "orphaned", "--grace", "0.3", "--record", str(record), "--",
            *fixture("sleeper", str(ready.path), "--ignore-term", "--children", "1"),
        ),
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    pids = ready.ready_pids()
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    processes.track(*pids, supervisor)
    caller.kill()
    assert all(wait_gone(pid) for pid in pids)
    assert wait_gone(supervisor)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """One record per kind of ending, all in one directory, made by ``tether run``."""
    directory = tmp_path_factory.mktemp("runs")
    records = {kind: directory / f"{kind}.json" for kind in KINDS}
    processes = Processes()
    ready = ReadyPipe(tmp_path_factory.mktemp("fifo") / "ready.fifo")
    try:
        ok = tether(
            "run", "--name", "eval-ok", "--record", str(records["completed"]), "--",
            *fixture("exit_with", "0"),
        )  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        # Whenever SIGTERM comes (even before the command is fully started, on a
        # loaded machine), it ends this run: no timing in what the tests check.
        late = tether(
            "run", "--name", "eval-slow", "--deadline", "0.3", "--grace", "5",
            "--record", str(records["deadline"]), "--", "sh", "-c", "sleep 30 & wait",
        )  # fmt: skip
        assert late.returncode == 124, late.stderr
        missing = tether(
            "run", "--record", str(records["launch_failed"]), "--", "/nonexistent/command"
        )
        assert missing.returncode == 127
        _caller_lost(processes, ready, records["caller_lost"])
        for record in records.values():
            validate_record(read_json(record))
        yield records
    finally:
        ready.close()
        assert processes.cleanup() == []


def log_of(record: Path) -> Path:
    return record.with_name(record.stem + ".events.jsonl")


def timeline_times(output: str) -> list[float]:
    return [float(match) for match in re.findall(r"^ +([+-]\d+\.\d{3})  ", output, re.MULTILINE)]


# -- show on real runs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "needles"),
    [
        ("completed", ["'eval-ok'", "completed", "0 (the command's own)", "exited with status 0"]),
        ("deadline", ["deadline_exceeded", "124 (deadline passed)", "SIGTERM at", "signal_sent"]),
        ("launch_failed", ["launch_failed", "never started", "ENOENT", "127 (the command was not"]),
        (
            "caller_lost",
            ["parent_lost", "130 (stopped", "lifeline_closed", "the caller is gone",
             "yes: SIGKILL after the grace", "SIGKILL at", "killed by SIGKILL", "1 stopped"],
        ),
    ],
)  # fmt: skip
def test_show_tells_the_verdict_and_the_timeline(
    runs: dict[str, Path], kind: str, needles: list[str]
) -> None:
    result = tether("show", str(runs[kind]))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    for needle in [*needles, "timeline", "record_written", str(log_of(runs[kind]))]:
        assert needle in result.stdout, (needle, result.stdout)
    assert "\x1b[" not in result.stdout  # piped: no colour
    # Times count from the caller's asking (``started_mono``), like the record's.
    times = timeline_times(result.stdout)
    assert all(later >= 0 for later in times)
    assert times == sorted(times)


def test_the_timeline_has_one_line_per_event_in_order(runs: dict[str, Path]) -> None:
    result = tether("show", "--all", str(runs["deadline"]))
    events = [json.loads(line) for line in log_of(runs["deadline"]).read_text().splitlines()]
    shown = re.findall(r"^ +[+-]\d+\.\d{3}  (\w+)", result.stdout, re.MULTILINE)
    assert shown == [event["event"] for event in events]
    assert shown[0] == "launched"
    assert shown[-1] == "record_written"


def test_show_accepts_the_log_in_place_of_the_record(runs: dict[str, Path]) -> None:
    for kind in KINDS:
        by_record = tether("show", str(runs[kind]))
        by_log = tether("show", str(log_of(runs[kind])))
        assert by_log.returncode == 0
        assert by_log.stdout == by_record.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_show_json_is_the_record_and_the_events(runs: dict[str, Path], kind: str) -> None:
    result = tether("show", "--json", str(runs[kind]))
    assert result.returncode == 0
    document = json.loads(result.stdout)
    assert document["record"] == read_json(runs[kind])
    lines = log_of(runs[kind]).read_text().splitlines()
    assert document["events"] == [json.loads(line) for line in lines]
    assert document["events"][0]["event"] in ("launched", "launch_failed")
    assert document["warnings"] == []


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run ``tether ARGS`` with stdout on a pseudo-terminal; return what it printed there."""
    main, secondary = pty.openpty()
    with subprocess.Popen(
        tether_argv(*args), stdout=secondary, stderr=subprocess.DEVNULL, env=env
    ) as process:
        os.close(secondary)
        chunks: list[bytes] = []
        end = time.monotonic() + BOUND
        while time.monotonic() < end:
            readable, _, _ = select.select([main], [], [], end - time.monotonic())
            if not readable:
                break
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(main)
        assert process.wait(timeout=BOUND) == 0
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_only_and_never_with_no_color(runs: dict[str, Path]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env["TERM"] = "xterm"
    for args in (["show", str(runs["deadline"])], ["ls", str(runs["deadline"].parent)]):
        assert "\x1b[" in _on_a_terminal(args, env)
        assert "\x1b[" not in _on_a_terminal(args, {**env, "NO_COLOR": "1"})
        assert "\x1b[" not in _on_a_terminal(args, {**env, "TERM": "dumb"})
        assert "\x1b[" not in tether(*args, env=env).stdout


# -- show on files that went wrong -------------------------------------------------------


def test_a_record_whose_log_is_missing(runs: dict[str, Path], tmp_path: Path) -> None:
    record = Path(shutil.copy(runs["completed"], tmp_path / "alone.json"))
    result = tether("show", str(record))
    assert result.returncode == 0
    assert "completed" in result.stdout
    assert f"no event log at {tmp_path / 'alone.events.jsonl'}" in result.stdout
    assert "launched" not in result.stdout
    document = json.loads(tether("show", "--json", str(record)).stdout)
    assert document["events"] == []
    assert document["record"]["reason"] == "completed"


def _died_supervisor_log(runs: dict[str, Path], tmp_path: Path) -> Path:
    """The caller-lost run's log as a SIGKILLed supervisor leaves it: only its first lines."""
    lines = log_of(runs["caller_lost"]).read_text().splitlines(keepends=True)
    log = tmp_path / "died.events.jsonl"
    log.write_text("".join(lines[:2]))
    return log


def test_a_log_whose_record_is_missing(runs: dict[str, Path], tmp_path: Path) -> None:
    log = _died_supervisor_log(runs, tmp_path)
    result = tether("show", str(log))
    assert result.returncode == 0
    assert "no record" in result.stdout
    assert "'orphaned'" in result.stdout  # the label, from the launch line
    assert "not seen to exit" in result.stdout
    assert "watching" in result.stdout  # the last state it logged
    assert "launched" in result.stdout
    assert len(result.stderr.splitlines()) == 1
    assert "the supervisor stopped before writing one" in result.stderr
    document = json.loads(tether("show", "--json", str(log)).stdout)
    assert document["record"] is None
    assert [event["event"] for event in document["events"]] == ["launched", "step"]


def test_a_last_line_cut_short(runs: dict[str, Path], tmp_path: Path) -> None:
    record = Path(shutil.copy(runs["deadline"], tmp_path / "cut.json"))
    data = log_of(runs["deadline"]).read_bytes()
    log_of(record).write_bytes(data[: len(data) - 30])  # half of the last line
    result = tether("show", str(record))
    assert result.returncode == 0
    assert "deadline_exceeded" in result.stdout
    assert "command_exited" in result.stdout
    assert "record_written" not in result.stdout
    assert len(result.stderr.splitlines()) == 1
    assert "cut short" in result.stderr
    count = len(data.splitlines())
    document = json.loads(tether("show", "--json", str(record)).stdout)
    assert len(document["events"]) == count - 1
    assert any("cut short" in warning for warning in document["warnings"])


def test_a_garbled_line_in_the_middle_is_skipped(runs: dict[str, Path], tmp_path: Path) -> None:
    record = Path(shutil.copy(runs["completed"], tmp_path / "garbled.json"))
    lines = log_of(runs["completed"]).read_bytes().splitlines(keepends=True)
    log_of(record).write_bytes(lines[0] + b"\x00\xff not json\n" + b"".join(lines[1:]))
    result = tether("show", str(record))
    assert result.returncode == 0
    assert "line 2 is not a tether event" in result.stderr
    assert "record_written" in result.stdout


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "make",
    [
        lambda d: _write(d / "notes.txt", b"hello\n"),
        lambda d: _write(d / "x.json", b'{"a": 1}'),
        lambda d: _write(d / "x.json", b"[1, 2]"),
        lambda d: _write(d / "x.json", b""),
        lambda d: _write(d / "x.json", bytes(range(256)) * 8),
        lambda d: _write(d / "x.json", b'{"schema_version": "tether.record.v9"}'),
        lambda d: _write(d / "x.events.jsonl", b"not an event\n{}\n"),
        lambda d: d,
        lambda d: d / "missing.json",
        lambda d: _fifo(d / "fifo.json"),
        lambda d: Path("/dev/zero"),
    ],
    ids=["text", "json", "array", "empty", "binary", "v9", "bad-log", "dir", "missing",
         "fifo", "device"],
)  # fmt: skip
def test_show_refuses_what_is_not_tethers_in_one_line(tmp_path: Path, make: object) -> None:
    assert callable(make)
    assert_one_line_error(tether("show", str(make(tmp_path))))


def test_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    record = craft(tmp_path, "evil.json", variant="x\x1b]0;pwned\x07\x1b[2J\nfake line")
    log_of(record).write_text(
        json.dumps({"ts": "t", "mono": 1.0, "event": "launched\x1b[31m", "pid": "\x1b[2J"}) + "\n"
    )
    for args in (["show", str(record)], ["ls", str(tmp_path)]):
        result = tether(*args)
        assert result.returncode == 0
        assert "\x1b" not in result.stdout
        assert "\x07" not in result.stdout
        assert "fake line" not in result.stdout.splitlines()


# -- ls ------------------------------------------------------------------------------------

TEMPLATE: dict[str, object] = {
    "schema_version": "tether.record.v1",
    "variant": "eval-1",
    "reason": "completed",
    "started_at": "2024-05-01T12:00:00.000000+00:00",
    "finished_at": "2024-05-01T12:00:01.500000+00:00",
    "elapsed_seconds": 1.5,
    "deadline_seconds": 0.0,
    "grace_seconds": 10.0,
    "supervisor_pid": 100,
    "eval_pid": 101,
    "eval_process_group": 101,
    "eval_exit_code": 0,
    "supervisor_exit_code": 0,
    "escalated_to_sigkill": False,
    "shutdown_seconds": None,
    "tether_version": "0.1.0",
    "hostname": "host",
    "containment": "sweep",
    "signals": [],
    "descendants_stopped": 0,
    "stragglers": 0,
    "unkillable": False,
    "rusage": {"user_seconds": 0.1, "system_seconds": 0.0, "max_rss_kib": 1000},
    "launch_error": None,
    "tether_error": None,
}


def craft(directory: Path, name: str, **fields: object) -> Path:
    """Write a hand-made record (the template with ``fields`` changed); return its path."""
    record = {**copy.deepcopy(TEMPLATE), **fields}
    path = directory / name
    path.write_text(json.dumps(record))
    return path


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat()


def test_the_template_is_a_valid_record() -> None:
    validate_record(copy.deepcopy(TEMPLATE))


def table(output: str) -> list[list[str]]:
    return [re.split(r"  +", line.strip()) for line in output.splitlines()]


def test_ls_lists_real_runs_newest_first(runs: dict[str, Path]) -> None:
    result = tether("ls", str(runs["completed"].parent))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    rows = table(result.stdout)
    assert rows[0] == [
        "WHEN", "LABEL", "COMMAND", "REASON", "EXIT", "DURATION", "ESCALATED", "RECORD"
    ]  # fmt: skip
    body = rows[1:]
    # Made in KINDS order, so newest first is the reverse.
    assert [row[-1] for row in body] == [f"{kind}.json" for kind in reversed(KINDS)]
    by_name = {row[-1]: row for row in body}
    # ``sh -c ...``: what ran is inline code (never the code itself).
    assert by_name["deadline.json"][1:5] == ["eval-slow", "sh -c", "deadline_exceeded", "124"]
    # ``python exit_with.py``: the script, not the interpreter.
    assert by_name["completed.json"][1:5] == ["eval-ok", "exit_with.py", "completed", "0"]
    assert by_name["launch_failed.json"][1:5] == ["-", "command", "launch_failed", "127"]
    lost = by_name["caller_lost.json"]
    assert (lost[1], lost[3:5], lost[6]) == ("orphaned", ["parent_lost", "130"], "yes")
    assert by_name["completed.json"][6] == "no"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", body[0][0])
    # Aligned: every column starts at the same offset on every line.
    starts = {
        line.index(" completed") for line in result.stdout.splitlines()[1:] if " completed" in line
    }
    assert len(starts) == 1


def test_ls_json_is_an_array_of_records(runs: dict[str, Path]) -> None:
    result = tether("ls", "--json", str(runs["completed"].parent))
    assert result.returncode == 0
    listed = json.loads(result.stdout)
    assert [Path(item.pop("record_path")) for item in listed] == [runs[k] for k in reversed(KINDS)]
    for item in listed:
        validate_record(item)


def test_ls_filters(tmp_path: Path) -> None:
    craft(tmp_path, "old.json", variant="eval-old", started_at=ago(days=3))
    craft(tmp_path, "late.json", variant="eval-late", reason="deadline_exceeded",
          supervisor_exit_code=124, escalated_to_sigkill=True, started_at=ago(hours=2))  # fmt: skip
    craft(tmp_path, "lost.json", variant="batch-lost", reason="parent_lost",
          supervisor_exit_code=130, started_at=ago(minutes=10))  # fmt: skip
    craft(tmp_path, "bare.json", variant=None, started_at=ago(minutes=1))

    def names(*options: str) -> list[str]:
        result = tether("ls", "--json", *options, str(tmp_path))
        assert result.returncode == 0, result.stderr
        return [Path(item["record_path"]).stem for item in json.loads(result.stdout)]

    assert names() == ["bare", "lost", "late", "old"]
    assert names("--reason", "deadline_exceeded") == ["late"]
    assert names("--reason", "deadline_exceeded,parent_lost") == ["lost", "late"]
    assert names("--reason", "parent_lost", "--reason", "completed") == ["bare", "lost", "old"]
    assert names("--since", "1h") == ["bare", "lost"]
    assert names("--since", "1d") == ["bare", "lost", "late"]
    assert names("--since", "90m", "--reason", "parent_lost") == ["lost"]
    today = (datetime.now(UTC) - timedelta(days=2)).date().isoformat()
    assert names("--since", today) == ["bare", "lost", "late"]
    assert names("--since", (datetime.now(UTC) + timedelta(days=1)).isoformat()) == []
    assert names("--label", "eval-*") == ["late", "old"]
    assert names("--label", "batch-lost") == ["lost"]
    table_result = tether("ls", "--reason", "completed", "--label", "nothing", str(tmp_path))
    assert table_result.returncode == 0
    assert table_result.stdout == ""
    assert "no runs match" in table_result.stderr


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--reason", "killed"], "deadline_exceeded"),
        (["--reason", "completed,nope"], "'nope'"),
        (["--since", "yesterday"], "--since"),
        (["--since=-1h"], "--since"),
    ],
)
def test_ls_refuses_bad_filters(tmp_path: Path, options: list[str], needle: str) -> None:
    result = tether("ls", *options, str(tmp_path))
    assert_one_line_error(result)
    assert needle in result.stderr


def test_ls_skips_what_is_not_a_record_one_line_each(tmp_path: Path) -> None:
    craft(tmp_path, "good.json")
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "broken.json").write_text('{"schema_version": "tether.record.v1"')
    (tmp_path / "other.json").write_text('{"name": "not ours"}')
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "good.events.jsonl").write_text("")  # a record's log: not listed, not reported
    (tmp_path / ".good.json.123.abcdef.tmp").write_text("{")  # a temporary file: ignored
    (tmp_path / "subdir").mkdir()
    result = tether("ls", str(tmp_path))
    assert result.returncode == 0
    assert [row[-1] for row in table(result.stdout)[1:]] == ["good.json"]
    skipped = sorted(result.stderr.splitlines())
    assert len(skipped) == 4, result.stderr
    for line, name in zip(skipped, ["broken", "fifo", "notes", "other"], strict=True):
        assert line.startswith(f"tether: skipped {tmp_path / name}")
    assert "Traceback" not in result.stderr


def test_ls_lists_a_log_whose_record_is_missing_as_a_lost_run(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    _died_supervisor_log(runs, tmp_path)
    result = tether("ls", str(tmp_path))
    assert result.returncode == 0
    assert result.stdout.splitlines()[1].startswith("lost")
    assert result.stdout.splitlines()[1].endswith("died.events.jsonl")
    (lost,) = json.loads(tether("ls", "--json", str(tmp_path)).stdout)
    assert (lost["state"], lost["supervisor_alive"]) == ("lost", False)
    assert lost["events_path"] == str(tmp_path / "died.events.jsonl")


def test_ls_points_at_a_log_it_cannot_tell_anything_from(tmp_path: Path) -> None:
    (tmp_path / "x.events.jsonl").write_text('{"event": "step", "mono": 1}\n')
    result = tether("ls", str(tmp_path))
    assert result.returncode == 0
    assert "x.events.jsonl: an event log without its record" in result.stderr
    assert json.loads(tether("ls", "--json", str(tmp_path)).stdout) == []


def test_ls_an_empty_directory(tmp_path: Path) -> None:
    result = tether("ls", str(tmp_path))
    assert (result.returncode, result.stdout) == (0, "")
    assert result.stderr == f"tether: no runs are recorded in {tmp_path}\n"
    assert tether("ls", "--json", str(tmp_path)).stdout.strip() == "[]"


def test_ls_a_missing_directory(tmp_path: Path) -> None:
    assert_one_line_error(tether("ls", str(tmp_path / "nowhere")))
    assert_one_line_error(tether("ls", str(craft(tmp_path, "r.json"))))


def test_ls_defaults_to_where_tether_run_writes(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("NO_COLOR", None)
    before = tether("ls", env=env)
    assert (before.returncode, before.stdout) == (0, "")
    assert "no runs recorded yet" in before.stderr
    assert tether("ls", "--json", env=env).stdout.strip() == "[]"
    ran = subprocess.run(
        tether_argv("run", "--name", "here", "--", "true"), env=env, timeout=BOUND, check=False
    )
    assert ran.returncode == 0
    after = tether("ls", env=env)
    assert after.returncode == 0, after.stderr
    rows = table(after.stdout)[1:]
    assert [row[1:5] for row in rows] == [["here", "true", "completed", "0"]]
    shown = tether("show", str(tmp_path / "state" / "tether" / "runs" / rows[0][-1]), env=env)
    assert "'here'" in shown.stdout


def test_ls_reads_hundreds_of_records(tmp_path: Path) -> None:
    start = datetime(2024, 5, 1, tzinfo=UTC)
    for number in range(500):
        moment = (start + timedelta(minutes=number)).isoformat()
        craft(tmp_path, f"r{number:03d}.json", variant=f"run-{number}", started_at=moment)
    result = tether("ls", str(tmp_path))
    assert result.returncode == 0
    rows = table(result.stdout)[1:]
    assert len(rows) == 500
    assert rows[0][1] == "run-499"
    assert rows[-1][1] == "run-0"


def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    for number in range(300):
        craft(tmp_path, f"r{number:03d}.json")
    with subprocess.Popen(
        tether_argv("ls", "--json", str(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        process.stdout.read(100)
        process.stdout.close()
        errors = process.stderr.read()
        status = process.wait(timeout=BOUND)
    assert b"Traceback" not in errors
    # 141 when the write fails with EPIPE; 0 when the kernel takes a partial write and
    # Python stops there quietly: either way, no complaint.
    assert status in (0, 128 + signal.SIGPIPE)


def test_review_never_loads_the_supervisors_modules(runs: dict[str, Path]) -> None:
    probe = (
        "import contextlib, io, sys\n"
        "from tether.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['show', sys.argv[1]]); main(['ls', sys.argv[2]])\n"
        "print(sorted(m for m in ('transitions', 'structlog') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, str(runs["deadline"]), str(runs["deadline"].parent)],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
    )
    assert result.stdout.strip() == "[]"


def test_help_names_every_option() -> None:
    for command, options in (
        ("show", ["--json", "--all"]),
        ("ls", ["--reason", "--since", "--label", "--json"]),
    ):
        result = tether(command, "--help")
        assert result.returncode == 0
        for option in options:
            assert option in result.stdout
    usage = tether("show")
    assert usage.returncode == 125


# -- the pieces, directly -------------------------------------------------------------------


def test_parse_since() -> None:
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_since("90m", now=now) == now - timedelta(minutes=90)
    assert parse_since("2d", now=now) == now - timedelta(days=2)
    assert parse_since("2024-04-30T10:00:00+00:00", now=now) == datetime(
        2024, 4, 30, 10, tzinfo=UTC
    )
    local = parse_since("2024-04-30", now=now)
    assert local.utcoffset() is not None
    assert local.replace(tzinfo=None) == datetime(2024, 4, 30)
    for bad in ("", "soon", "-1h", "nan", "2024-13-01"):
        with pytest.raises(ReviewError):
            parse_since(bad, now=now)


def test_parse_reasons() -> None:
    assert parse_reasons([]) is None
    both = frozenset({"completed", "parent_lost"})
    assert parse_reasons(["completed, parent_lost", "completed"]) == both
    with pytest.raises(ReviewError, match="supervisor_lost"):
        parse_reasons(["killed"])


def test_filters_leave_records_without_a_label_or_time_out() -> None:
    assert not Filters(label="*").admit({"variant": None})
    assert not Filters(since=datetime(2024, 1, 1, tzinfo=UTC)).admit({"started_at": "garbage"})
    assert Filters().admit({})


def _line(event: str, mono: float, **fields: object) -> str:
    return json.dumps({"ts": "2024-05-01T12:00:00.000000Z", "mono": mono, "event": event, **fields})


def test_the_timeline_hides_only_steps_that_changed_nothing(tmp_path: Path) -> None:
    record = craft(tmp_path, "r.json")
    lines = [
        _line("launched", 100.0, pid=101, pgid=101, supervisor_pid=100, label=None),
        _line("step", 100.1, input="Launched", state_before="launching", state_after="watching",
              effects=[]),
        _line("step", 100.5, input="Tick", state_before="watching", state_after="watching",
              effects=[]),
        _line("future_event", 100.7, detail="new", count=3),
        _line("command_exited", 101.5, pid=101, returncode=0, others_alive=0, extra_field=1),
    ]  # fmt: skip
    log_of(record).write_text("\n".join(lines) + "\n")
    result = tether("show", str(record))
    assert result.returncode == 0
    assert "+0.500" not in result.stdout
    assert "1 step that changed nothing hidden" in result.stdout
    assert re.search(r"\+0\.700  future_event +detail=\"new\" count=3", result.stdout)
    assert "exited with status 0" in result.stdout
    assert "extra_field=1" in result.stdout
    shown = tether("show", "--all", str(record))
    assert "+0.500" in shown.stdout
    assert "watching (no change) on Tick" in shown.stdout


def test_the_timeline_counts_from_the_request_when_the_log_says_when(tmp_path: Path) -> None:
    record = craft(tmp_path, "r.json")
    log_of(record).write_text(
        _line("launched", 100.25, started_mono=100.0, pid=101, pgid=101, supervisor_pid=100)
        + "\n"
        + _line("signal_sent", 100.5, signal="SIGTERM", processes=1)
        + "\n"
    )
    result = tether("show", str(record))
    assert "seconds since the run was asked for" in result.stdout
    assert timeline_times(result.stdout) == [0.25, 0.5]
    assert "started_mono" not in result.stdout


@pytest.mark.parametrize(
    ("signals", "needle"),
    [
        ([("SIGTERM", 1.0), ("SIGCONT", 1.0), ("SIGKILL", 6.0)], "SIGKILL after the grace"),
        ([("SIGTERM", 1.0), ("SIGCONT", 1.0), ("SIGKILL", 2.0)], "before the grace was over"),
        ([("SIGKILL", 1.0)], "SIGKILL at once"),
    ],
)
def test_show_says_why_sigkill_was_sent(
    tmp_path: Path, signals: list[tuple[str, float]], needle: str
) -> None:
    record = craft(
        tmp_path,
        "r.json",
        reason="cancelled",
        supervisor_exit_code=130,
        eval_exit_code=-9,
        grace_seconds=5.0,
        escalated_to_sigkill=True,
        shutdown_seconds=0.1,
        signals=[{"signal": n, "at_seconds": at, "processes": 1} for n, at in signals],
    )
    validate_record(read_json(record))
    result = tether("show", str(record))
    assert needle in result.stdout
    assert "killed by SIGKILL (-9)" in result.stdout


def test_show_says_when_the_evidence_or_the_pidfds_fell_short(tmp_path: Path) -> None:
    record = craft(tmp_path, "short.json", event_log_lines_dropped=3, signals_without_pidfd=2)
    validate_record(read_json(record))
    result = tether("show", str(record))
    assert result.returncode == 0, result.stderr
    assert "incomplete: 3 lines could not be written" in result.stdout
    assert "2 signals sent by pid, without a pidfd" in result.stdout
    plain = tether("show", str(craft(tmp_path, "plain.json")))
    assert "incomplete" not in plain.stdout
    assert "pidfd" not in plain.stdout


def test_the_launch_lines_name_the_command_and_keep_their_bookkeeping_out(tmp_path: Path) -> None:
    record = craft(tmp_path, "r.json")
    launch = {"supervisor_pid": 100, "supervisor_start_ticks": 4242, "command": "make"}
    log_of(record).write_text(
        _line("launched", 100.25, started_mono=100.0, pid=101, pgid=101, label="eval", **launch)
        + "\n"
        + _line("launch_failed", 100.5, started_mono=100.0, errno=2, error="not found",
                stage="exec", label=None, deadline_seconds=0, grace_seconds=10.0, **launch)
        + "\n"
        + _line("signals_caught_up", 100.75, processes=2,
                signals=["SIGTERM", "SIGCONT"])
        + "\n"
    )  # fmt: skip
    result = tether("show", str(record))
    assert "command make pid 101 (group 101) under supervisor pid 100" in result.stdout
    assert "label 'eval'" in result.stdout
    assert "command make: not found (errno 2, at exec; supervisor pid 100)" in result.stdout
    assert "SIGTERM, SIGCONT to 2 processes a walk had missed" in result.stdout
    for bookkeeping in ("supervisor_start_ticks", "deadline_seconds", "grace_seconds", "label="):
        assert bookkeeping not in result.stdout

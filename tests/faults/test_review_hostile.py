"""``tether show`` and ``tether ls`` on hostile files: the real command, one crafted file each.

An adversarial review broke the review tools with files no tether writes but
anyone can drop into a records directory: a record nested 100 000 levels deep,
NaN where a number belongs, a start time of year 1 read west of Greenwich, a
FIFO or a link to ``/dev/zero`` among the records, a string where a number
belongs, an event log whose one line is 100 MB long. Each case here runs the
real ``tether`` program on such a file and checks what an operator would see:
the documented status, one line per complaint starting ``tether: ``, no
traceback, and no raw control character on either stream.

Every subprocess gets ``HOME`` and ``XDG_STATE_HOME`` inside the test's own
directory, and a bounded wait. Where memory matters, the command runs under
an address-space limit (``RLIMIT_AS``) far below what reading a hostile file
whole would take.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import BOUND, tether_argv
from test_review import TEMPLATE
from tether.shared.record_file import read_record

#: The address space a review command may use, far below a hostile file's size
#: (about 20 MiB are Python's own).
MEMORY_LIMIT = 256 << 20

WEST = "America/Los_Angeles"
EAST = "Asia/Tokyo"


def tether(
    home: Path,
    *args: str,
    tz: str = "UTC",
    extra_env: dict[str, str] | None = None,
    limit_memory: bool = False,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``tether ARGS`` piped, with ``home`` as its home; return what it did, as bytes."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "PYTHONIOENCODING")}
    env.update(HOME=str(home), XDG_STATE_HOME=str(home / "state"), TZ=tz, **(extra_env or {}))
    return subprocess.run(
        tether_argv(*args),
        capture_output=True,
        timeout=BOUND,
        env=env,
        cwd=cwd,
        preexec_fn=_limit_memory if limit_memory else None,
        check=False,
    )


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def text_of(stream: bytes) -> str:
    """``stream`` as text, after checking it is clean: UTF-8, no traceback, no control
    character but the newline."""
    text = stream.decode("utf-8")  # nothing undecodable reaches the terminal either
    assert "Traceback" not in text, text
    raw = sorted({char for char in text if not char.isprintable() and char != "\n"})
    assert not raw, (raw, text[:2000])
    return text


def lines_of(stream: bytes) -> list[str]:
    return text_of(stream).splitlines()


def assert_refused(result: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    """The documented refusal: status 125, nothing on stdout, one line on stderr."""
    errors = lines_of(result.stderr)
    assert result.returncode == 125, (result.returncode, errors)
    assert text_of(result.stdout) == ""
    assert len(errors) == 1, errors
    assert errors[0].startswith("tether: "), errors
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def assert_shown(result: subprocess.CompletedProcess[bytes]) -> tuple[str, list[str]]:
    """Status 0 and clean streams; return stdout and the warning lines."""
    warnings = lines_of(result.stderr)
    assert result.returncode == 0, (result.returncode, warnings)
    assert all(line.startswith("tether: ") for line in warnings), warnings
    return text_of(result.stdout), warnings


def record_text(**fields: object) -> str:
    return json.dumps({**copy.deepcopy(TEMPLATE), **fields})


def put(path: Path, data: str | bytes) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def listed(stdout: str) -> list[str]:
    """The RECORD column of an ``ls`` table."""
    return [line.split("  ")[-1].strip() for line in stdout.splitlines()[1:]]


# -- 1. nesting ------------------------------------------------------------------------


def nested(depth: int) -> str:
    """A record whose ``x`` nests so that the whole document is ``depth`` levels deep."""
    inner = depth - 1  # the record itself is the first level
    return '{"schema_version": "tether.record.v1", "x": ' + "[" * inner + "]" * inner + "}"


@pytest.mark.parametrize("depth", [33, 990, 1_100, 100_000])
def test_a_record_nested_too_deeply_is_refused_in_one_line(tmp_path: Path, depth: int) -> None:
    record = put(tmp_path / "deep.json", nested(depth))
    assert_refused(tether(tmp_path, "show", str(record)), str(record), "nested deeper than 32")
    assert_refused(tether(tmp_path, "show", "--json", str(record)), "nested deeper than 32")
    put(tmp_path / "good.json", record_text())
    stdout, warnings = assert_shown(tether(tmp_path, "ls", str(tmp_path)))
    assert listed(stdout) == ["good.json"]
    assert warnings == [
        f"tether: skipped {record}: not a tether record (nested deeper than 32 levels)"
    ]
    assert (
        json.loads(text_of(tether(tmp_path, "ls", "--json", str(tmp_path)).stdout))[0]["variant"]
        == TEMPLATE["variant"]
    )


def test_a_record_nested_to_the_limit_is_shown(tmp_path: Path) -> None:
    record = put(tmp_path / "deep.json", nested(32))
    stdout, _ = assert_shown(tether(tmp_path, "show", str(record)))
    assert "x=" not in stdout  # the verdict names known fields only
    document = json.loads(text_of(tether(tmp_path, "show", "--json", str(record)).stdout))
    assert document["record"]["x"] == json.loads(nested(32))["x"]


def test_a_deep_log_line_is_skipped_and_named(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    put(
        tmp_path / "run.events.jsonl",
        '{"ts": "2024-05-01T12:00:00Z", "mono": 1.0, "event": "launched", "pid": 7}\n'
        + '{"event": "step", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
        + '{"ts": "2024-05-01T12:00:01Z", "mono": 2.0, "event": "tree_emptied"}\n',
    )  # fmt: skip
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(record)))
    assert "launched" in stdout
    assert "tree_emptied" in stdout
    assert warnings == [
        f"tether: {tmp_path / 'run.events.jsonl'}: line 2 is not a tether event "
        "(nested deeper than 32 levels); skipped"
    ]


# -- 2. numbers JSON does not have -------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "named"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "too large")],
)
def test_a_record_with_a_non_finite_number_is_refused(
    tmp_path: Path, number: str, named: str
) -> None:
    text = record_text(elapsed_seconds="PLACE").replace('"PLACE"', number)
    record = put(tmp_path / "nan.json", text)
    for args in (["show"], ["show", "--json"]):
        assert_refused(tether(tmp_path, *args, str(record)), str(record), named)
    stdout, warnings = assert_shown(tether(tmp_path, "ls", str(tmp_path)))
    assert stdout == ""
    assert warnings[0].startswith(f"tether: skipped {record}: not a tether record (holds")
    assert named in warnings[0]
    assert warnings[1:] == [f"tether: no runs are recorded in {tmp_path}"]


def test_a_log_line_with_nan_is_skipped_and_named(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    put(
        tmp_path / "run.events.jsonl",
        '{"mono": 1.0, "event": "launched", "pid": 7}\n'
        '{"mono": NaN, "event": "step"}\n'
        '{"mono": 2.0, "event": "signal_sent", "signal": "SIGTERM", "processes": -Infinity}\n',
    )
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(record)))
    assert "launched" in stdout
    assert [w.split(": line ")[1] for w in warnings] == [
        "2 is not a tether event (holds NaN, which JSON does not allow); skipped",
        "3 is not a tether event (holds -Infinity, which JSON does not allow); skipped",
    ]
    document = json.loads(text_of(tether(tmp_path, "show", "--json", str(record)).stdout))
    assert [event["event"] for event in document["events"]] == ["launched"]


# -- 3. times no local zone can show -------------------------------------------------------

EDGE_TIMES = [
    ("0001-01-01T00:00:00+00:00", WEST),
    ("0001-01-01T00:00:00+14:00", "UTC"),
    ("9999-12-31T23:59:59-12:00", EAST),
    ("9999-12-31T23:59:59+00:00", EAST),
]


@pytest.mark.parametrize(("moment", "tz"), EDGE_TIMES)
def test_a_time_out_of_the_local_zones_range_is_shown_raw(
    tmp_path: Path, moment: str, tz: str
) -> None:
    record = put(tmp_path / "edge.json", record_text(started_at=moment, finished_at=moment))
    put(tmp_path / "edge.events.jsonl", json.dumps({"ts": moment, "mono": 1, "event": "x"}) + "\n")
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(record), tz=tz))
    assert f"started       {moment}" in stdout
    assert f"finished      {moment}" in stdout
    assert warnings == []
    assert_shown(tether(tmp_path, "show", "--json", str(record), tz=tz))
    # A log without its record shows the time of its last line, raw.
    orphan = put(tmp_path / "orphan.events.jsonl", json.dumps({"ts": moment, "event": "x"}) + "\n")
    stdout, _ = assert_shown(tether(tmp_path, "show", str(orphan), tz=tz))
    assert f"x at {moment}" in stdout


def test_ls_sorts_and_filters_times_at_the_ends_of_the_calendar(tmp_path: Path) -> None:
    for number, (moment, _) in enumerate(EDGE_TIMES):
        put(tmp_path / f"edge{number}.json", record_text(started_at=moment))
    put(tmp_path / "now.json", record_text(started_at="2024-05-01T12:00:00+00:00"))
    put(tmp_path / "never.json", record_text(started_at=["not", "a", "time"]))
    # edge2 is 10000-01-01T11:59:59Z and edge1 is 0000-12-31T10:00:00Z, in UTC.
    newest_first = ["edge2.json", "edge3.json", "now.json", "edge0.json", "edge1.json"]
    for tz in (WEST, EAST, "UTC"):
        stdout, warnings = assert_shown(tether(tmp_path, "ls", str(tmp_path), tz=tz))
        assert listed(stdout) == [*newest_first, "never.json"]
        assert warnings == []
        stdout, _ = assert_shown(tether(tmp_path, "ls", "--since", "1d", str(tmp_path), tz=tz))
        assert listed(stdout) == ["edge2.json", "edge3.json"]
        for since in ("0001-01-01", "999999999d", "0001-01-01T00:00:00+12:00"):
            stdout, _ = assert_shown(tether(tmp_path, "ls", "--since", since, str(tmp_path), tz=tz))
            assert listed(stdout) == newest_first[:4]
        stdout, _ = assert_shown(
            tether(tmp_path, "ls", "--json", "--since", "9999-12-31", str(tmp_path), tz=tz)
        )
        names = [Path(item["record_path"]).name for item in json.loads(stdout)]
        assert names == ["edge2.json", "edge3.json"]


@pytest.mark.parametrize("since", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00"])
def test_since_at_the_ends_of_the_calendar_is_no_error(tmp_path: Path, since: str) -> None:
    put(tmp_path / "now.json", record_text(started_at="2024-05-01T12:00:00+00:00"))
    for tz in (WEST, EAST):
        assert_shown(tether(tmp_path, "ls", "--since", since, str(tmp_path), tz=tz))


# -- 4. a directory of things that are not records -----------------------------------------


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    # A socket's path must fit in 108 bytes: bind it by its name, from its directory.
    here = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(path.name)
    finally:
        os.chdir(here)


def _huge(path: Path) -> None:
    with path.open("wb") as file:
        file.truncate(1 << 40)  # a terabyte of nothing: sparse, costs no disk


HOSTILE_ENTRIES: dict[str, Callable[[Path], object]] = {
    "fifo.json": _fifo,
    "socket.json": _socket,
    "zero.json": lambda p: p.symlink_to("/dev/zero"),
    "null.json": lambda p: p.symlink_to("/dev/null"),
    "tty.json": lambda p: p.symlink_to("/dev/tty"),
    "huge.json": _huge,
    "loop.json": lambda p: p.symlink_to(p.name),
    "dangling.json": lambda p: p.symlink_to("nowhere"),
    "nul.json": lambda p: p.write_bytes(b"\x00" * 100),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_ENTRIES))
def test_show_refuses_what_is_no_file_to_read(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    HOSTILE_ENTRIES[name](path)
    assert_refused(tether(tmp_path, "show", str(path), limit_memory=True), name)


def test_ls_skips_each_bad_entry_in_one_line_and_lists_the_rest(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    put(runs / "good.json", record_text())
    for name, make in HOSTILE_ENTRIES.items():
        make(runs / name)
    (runs / "directory.json").mkdir()  # a directory is not entered, nor reported
    result = tether(tmp_path, "ls", str(runs), limit_memory=True)
    stdout, warnings = assert_shown(result)
    assert listed(stdout) == ["good.json"]
    skipped = sorted(line.removeprefix(f"tether: skipped {runs}/") for line in warnings)
    assert [line.split(":")[0] for line in skipped] == sorted(HOSTILE_ENTRIES)
    by_name = {line.split(":")[0]: line for line in skipped}
    assert "not a regular file" in by_name["fifo.json"]
    assert "not a regular file" in by_name["zero.json"]
    assert "larger than" in by_name["huge.json"]
    assert "symbolic links" in by_name["loop.json"]
    stdout, _ = assert_shown(tether(tmp_path, "ls", "--json", str(runs), limit_memory=True))
    assert [Path(item["record_path"]).name for item in json.loads(stdout)] == ["good.json"]


CONTROL_NAME = "evil\x1b]0;pwned\x07\x1b[2J\r\n.json"
UNDECODABLE_NAME = os.fsdecode(b"bad\xff\xfe.json")


@pytest.mark.parametrize("name", [CONTROL_NAME, UNDECODABLE_NAME])
def test_names_are_printed_escaped(tmp_path: Path, name: str) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    put(runs / name, record_text(variant="named"))
    put(runs / ("broken-" + name), "{")
    put(runs / ("orphan-" + name.replace(".json", ".events.jsonl")), '{"event": "launched"}\n')
    stdout, warnings = assert_shown(tether(tmp_path, "ls", str(runs)))
    assert len(stdout.splitlines()) == 2
    assert "named" in stdout
    assert len(warnings) == 2
    assert any("skipped" in line and "broken-" in line for line in warnings)
    assert any("orphan-" in line and "without its record" in line for line in warnings)
    assert_shown(tether(tmp_path, "ls", "--json", str(runs)))
    stdout, _ = assert_shown(tether(tmp_path, "show", str(runs / name)))
    assert "'named'" in stdout
    assert_refused(tether(tmp_path, "show", str(runs / ("broken-" + name))), "not JSON")
    assert_refused(tether(tmp_path, "show", str(runs / ("missing-" + name))), "no such file")
    assert_refused(tether(tmp_path, "ls", str(runs / ("missing-" + name))))


def test_an_unreadable_record_is_skipped(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    put(tmp_path / "good.json", record_text())
    secret = put(tmp_path / "secret.json", record_text())
    secret.chmod(0)
    stdout, warnings = assert_shown(tether(tmp_path, "ls", str(tmp_path)))
    assert listed(stdout) == ["good.json"]
    assert warnings == [f"tether: skipped {secret}: Permission denied"]
    assert_refused(tether(tmp_path, "show", str(secret)), "Permission denied")


def test_ls_reads_many_files_within_bounded_memory(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for number in range(300):
        put(runs / f"r{number:03d}.json", record_text(variant=f"run-{number}"))
        _huge(runs / f"h{number:03d}.json")
        (runs / f"z{number:03d}.json").symlink_to("/dev/zero")
    stdout, warnings = assert_shown(tether(tmp_path, "ls", str(runs), limit_memory=True))
    assert len(listed(stdout)) == 300
    assert len(warnings) == 600


# -- 5. fields of any type -------------------------------------------------------------------

ODD_VALUES: list[object] = [
    "a string",
    "",
    "\x1b[2J\x07\r\u202e\ud800",
    [1, [2, {"3": None}]],
    {"a": {"b": []}},
    10**600,
    -(10**600),
    2**64,
    True,
    False,
    None,
    -1.5,
    1e308,
    -1e308,
    0,
    "x" * 20_000,
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: repr(v)[:20])
def test_every_field_of_the_wrong_type_still_shows(tmp_path: Path, value: object) -> None:
    fields = {name: value for name in TEMPLATE if name != "schema_version"}
    record = put(tmp_path / "odd.json", record_text(**fields))
    put(
        tmp_path / "odd.events.jsonl",
        "".join(
            json.dumps({"ts": value, "mono": value, "event": name, **dict.fromkeys(
                ("pid", "pgid", "label", "returncode", "others_alive", "processes", "signal",
                 "effects", "state_before", "state_after", "input", "path", "error",
                 "started_mono", "deadline_seconds", "grace_seconds", "request"), value)})
            + "\n"
            for name in ("launched", "launch_failed", "step", "signal_sent", "signal_received",
                         "lifeline_closed", "lifeline_request", "command_exited",
                         "tree_emptied", "record_written", "record_failed", "other")
        ),
    )  # fmt: skip
    for args in (["show"], ["show", "--all"], ["show", "--json"]):
        stdout, warnings = assert_shown(tether(tmp_path, *args, str(record), tz=WEST))
        assert warnings == []
        assert stdout
    stdout, _ = assert_shown(tether(tmp_path, "ls", str(tmp_path), tz=WEST))
    assert listed(stdout) == ["odd.json"]
    assert all(len(line) < 1_000 for line in stdout.splitlines())  # cells are cut
    for args in (["--json"], ["--reason", "completed"], ["--since", "1d"], ["--label", "*"]):
        assert_shown(tether(tmp_path, "ls", *args, str(tmp_path), tz=WEST))


@pytest.mark.parametrize("digits", [641, 4_300, 5_001, 100_000])
def test_an_integer_too_long_is_refused_in_one_line(tmp_path: Path, digits: int) -> None:
    text = record_text(eval_pid="PLACE").replace('"PLACE"', "9" * digits)
    record = put(tmp_path / "big.json", text)
    assert_refused(tether(tmp_path, "show", str(record)), "integer of more than 640 digits")
    _, warnings = assert_shown(tether(tmp_path, "ls", str(tmp_path)))
    assert "integer of more than 640 digits" in warnings[0]


def test_a_record_that_is_not_an_object_or_has_no_version(tmp_path: Path) -> None:
    for text in ("[]", '"x"', "1", "null", '{"schema_version": ' + "[" * 20 + "]" * 20 + "}"):
        record = put(tmp_path / "odd.json", text)
        assert_refused(tether(tmp_path, "show", str(record)), "not a tether record")
    long_version = put(tmp_path / "v.json", json.dumps({"schema_version": "x" * 100_000}))
    line = assert_refused(tether(tmp_path, "show", str(long_version)))
    assert len(line) < 300


def test_text_the_locale_cannot_encode_is_escaped(tmp_path: Path) -> None:
    record = put(tmp_path / "r.json", record_text(variant="評価-ü"))
    for args in (["show"], ["ls"]):
        target = str(record) if args == ["show"] else str(tmp_path)
        stdout, _ = assert_shown(
            tether(tmp_path, *args, target, extra_env={"PYTHONIOENCODING": "ascii"})
        )
        assert "\\u8a55\\u4fa1-\\xfc" in stdout


# -- 6. event logs -----------------------------------------------------------------------------


def test_an_event_log_with_every_kind_of_bad_line(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    good = b'{"ts": "2024-05-01T12:00:00Z", "mono": 1.0, "event": "launched", "pid": 7}\n'
    lines = [
        good,
        b'{"event": "step", "n": ' + b"9" * 5_000 + b"}\n",
        bytes(range(256)).replace(b"\n", b"") + b"\n",
        b'\xff\xfe{"event": "x"}\n',
        b'{"event": "step", "pad": "' + b"a" * (2 << 20) + b'"}\n',
        b"[1, 2]\n",
        b'{"no_event": 1}\n',
        good.replace(b"launched", b"tree_emptied"),
    ]
    put(tmp_path / "run.events.jsonl", b"".join(lines))
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(record), limit_memory=True))
    assert "launched" in stdout
    assert "tree_emptied" in stdout
    reasons = [line.split(" is not a tether event ")[1] for line in warnings]
    assert reasons == [
        "(holds an integer of more than 640 digits); skipped",
        "(not JSON); skipped",
        "(not JSON); skipped",
        "(longer than 1 MiB); skipped",
        "(not a JSON object); skipped",
        '(no "event" name); skipped',
    ]


def test_a_giant_last_line_without_a_newline(tmp_path: Path) -> None:
    """100 MB on one line, as a runaway writer might leave it: skipped without being held."""
    record = put(tmp_path / "run.json", record_text())
    log = tmp_path / "run.events.jsonl"
    with log.open("wb") as file:
        file.write(b'{"mono": 1.0, "event": "launched", "pid": 7}\n{"event": "step", "pad": "')
        file.truncate(100 * 1000 * 1000)  # the rest of the line: sparse, costs no disk
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(record), limit_memory=True))
    assert "launched" in stdout
    assert warnings == [f"tether: {log}: longer than 64 MiB; only the start is shown"]
    with log.open("r+b") as file:
        file.truncate(50 * 1000 * 1000)
    _, warnings = assert_shown(tether(tmp_path, "show", str(record), limit_memory=True))
    assert warnings == [f"tether: {log}: line 2 is not a tether event (longer than 1 MiB); skipped"]
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(log), limit_memory=True))
    assert "launched" in stdout


def test_a_log_of_nothing_but_bad_lines(tmp_path: Path) -> None:
    log = put(tmp_path / "run.events.jsonl", b"x\n" * 1_000_000)
    assert_refused(tether(tmp_path, "show", str(log), limit_memory=True), "not a tether event log")


def test_many_bad_lines_are_counted_not_listed(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    put(tmp_path / "run.events.jsonl", '{"event": "launched"}\n' + "garbage\n" * 500)
    _, warnings = assert_shown(tether(tmp_path, "show", str(record)))
    assert len(warnings) == 11
    assert warnings[-1].endswith("490 more lines that are not tether events; skipped")


def test_a_log_too_long_to_read_whole(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    line = '{"mono": 1.0, "event": "step", "state_before": "a", "state_after": "a"}\n'
    put(tmp_path / "run.events.jsonl", line * 150_000)
    stdout, warnings = assert_shown(
        tether(tmp_path, "show", "--json", str(record), limit_memory=True)
    )
    log = tmp_path / "run.events.jsonl"
    assert warnings == [f"tether: {log}: longer than 100000 lines; only the start is shown"]
    assert len(json.loads(stdout)["events"]) == 100_000


def test_a_log_packed_with_values_is_cut_within_bounded_memory(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    line = b'{"event": "step", "x": [' + b"{}," * 300_000 + b"{}]}\n"
    put(tmp_path / "run.events.jsonl", line * 20)
    _, warnings = assert_shown(tether(tmp_path, "show", str(record), limit_memory=True))
    assert warnings[-1].endswith("holds more than 1000000 values; only the start is shown")


def test_a_log_that_names_a_record_elsewhere(tmp_path: Path) -> None:
    """``record_written`` may point anywhere: at a device, at a huge file, at itself."""
    _huge(tmp_path / "huge")
    for target in ("/dev/zero", str(tmp_path / "huge"), str(tmp_path / "x.events.jsonl")):
        log = put(
            tmp_path / "x.events.jsonl",
            json.dumps({"event": "launched"}) + "\n"
            + json.dumps({"event": "record_written", "path": target}) + "\n",
        )  # fmt: skip
        stdout, _ = assert_shown(tether(tmp_path, "show", str(log), limit_memory=True))
        assert "no record" in stdout


def test_a_fifo_as_the_event_log_does_not_block(tmp_path: Path) -> None:
    record = put(tmp_path / "run.json", record_text())
    os.mkfifo(tmp_path / "run.events.jsonl")
    stdout, warnings = assert_shown(tether(tmp_path, "show", str(record)))
    assert "not a regular file, not an event log" in stdout
    assert warnings == []


# -- the safety nets, in-process -----------------------------------------------------------


def test_a_file_removed_while_ls_reads_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.review import listing, scan

    put(tmp_path / "good.json", record_text())
    gone = put(tmp_path / "gone.json", record_text())

    def removed_first(path: Path) -> dict[str, object]:
        if path == gone:
            gone.unlink()  # between the directory listing and the read
        return read_record(path)

    monkeypatch.setattr(listing, "read_record", removed_first)
    found = scan(tmp_path)
    assert [path.name for path, _ in found.records] == ["good.json"]
    assert found.skipped == [f"{gone}: No such file or directory"]


def test_a_bug_reading_one_file_costs_that_file_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.review import listing, scan

    put(tmp_path / "good.json", record_text())
    bad = put(tmp_path / "bad.json", record_text())

    def buggy(path: Path) -> dict[str, object]:
        if path == bad:
            raise RuntimeError("a bug\nwith two lines")
        return read_record(path)

    monkeypatch.setattr(listing, "read_record", buggy)
    found = scan(tmp_path)
    assert [path.name for path, _ in found.records] == ["good.json"]
    assert found.skipped == [
        f"{bad}: unexpected error, please report it: RuntimeError: 'a bug\\nwith two lines'"
    ]


@pytest.mark.parametrize("command", ["show", "ls"])
def test_a_bug_in_show_or_ls_is_one_line_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    import tether.review
    from tether.cli.main import main

    def buggy(*_args: object, **_kwargs: object) -> str:
        raise ValueError("rendering \x1b[2J went wrong")

    monkeypatch.setattr(tether.review, "render_run", buggy)
    monkeypatch.setattr(tether.review, "render_table", buggy)
    record = put(tmp_path / "r.json", record_text())
    with pytest.raises(SystemExit) as exit_:
        main([command, str(record if command == "show" else tmp_path)])
    assert exit_.value.code == 125
    captured = capsys.readouterr()
    assert captured.err == (
        f"tether: {command}: unexpected error, please report it: "
        "ValueError: 'rendering \\x1b[2J went wrong'\n"
    )

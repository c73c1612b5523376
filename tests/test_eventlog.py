"""The event log: private file, one flushed JSON object a line, redacted, no global state."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import structlog
from structlog.typing import EventDict

from tether.core.redaction import REDACTED, Redactor, secret_values_from
from tether.shared.paths import events_path_for
from tether.supervisor.event_log import INCOMPLETE_EVENT, EventLog
from tether.supervisor.evidence import NullEventLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.supervisor.evidence import EventSink

SECRET_ENV = {"SERVICE_TOKEN": "env-secret-0451"}
SECRET_ARGV = ["deploy", "--password", "argv-secret-1138"]


def read_lines(path: Path) -> list[dict[str, object]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "run.events.jsonl"


@pytest.fixture
def log(log_path: Path) -> Iterator[EventLog]:
    with EventLog.open(log_path, Redactor(secret_values_from(SECRET_ENV, SECRET_ARGV))) as opened:
        yield opened


@pytest.fixture
def umask_zero() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("record", "events"),
    [
        ("runs/abc.json", "runs/abc.events.jsonl"),
        (
            "/var/lib/tether/2024-01-01T00-00-00-123.json",
            "/var/lib/tether/2024-01-01T00-00-00-123.events.jsonl",
        ),
        ("runs/abc", "runs/abc.events.jsonl"),
    ],
)
def test_events_path_sits_beside_the_record(record: str, events: str) -> None:
    assert events_path_for(Path(record)) == Path(events)


def test_one_json_object_per_line_with_time_and_event_first(log: EventLog, log_path: Path) -> None:
    log.emit("launched", pid=4242, pgid=4242, state_before="launching", state_after="watching")
    log.emit("signal_sent", signal="SIGTERM", count=3, mono=12.5)
    first, second = read_lines(log_path)
    assert list(first)[:3] == ["ts", "mono", "event"]
    assert first["event"] == "launched"
    assert {k: first[k] for k in ("pid", "pgid", "state_before", "state_after")} == {
        "pid": 4242,
        "pgid": 4242,
        "state_before": "launching",
        "state_after": "watching",
    }
    assert list(first)[3:] == ["pid", "pgid", "state_before", "state_after"]
    assert second == {
        **second,
        "event": "signal_sent",
        "signal": "SIGTERM",
        "count": 3,
        "mono": 12.5,
    }
    assert isinstance(first["ts"], str)
    assert first["ts"].endswith("Z")
    assert datetime.fromisoformat(first["ts"]).utcoffset() is not None
    assert len(first["ts"].split(".")[1]) == len("123456Z")
    assert isinstance(first["mono"], float)


def test_lines_reach_the_os_before_emit_returns(log: EventLog, log_path: Path) -> None:
    with log_path.open(encoding="utf-8") as reader:
        log.emit("launched", pid=1)
        assert json.loads(reader.readline())["event"] == "launched"
        log.emit("exited", returncode=0)
        assert json.loads(reader.readline())["event"] == "exited"


def test_a_sigkilled_writer_leaves_its_lines(log_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from tether.supervisor.event_log import EventLog
        from tether.core.redaction import Redactor
        log = EventLog.open(Path({str(log_path)!r}), Redactor())
        log.emit("launched", pid=1)
        log.emit("about_to_die")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], check=False, timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert [line["event"] for line in read_lines(log_path)] == ["launched", "about_to_die"]


def test_secrets_never_reach_the_file(log: EventLog, log_path: Path) -> None:
    log.emit(
        "launch_failed",
        message="exec deploy --password argv-secret-1138 failed with env-secret-0451",
        argv=SECRET_ARGV,
        env={"SERVICE_TOKEN": "whatever", "HOME": "/root"},
        auth={"user": "bob"},
        pid=7,
    )
    log.close()
    raw = log_path.read_bytes()
    assert b"argv-secret-1138" not in raw
    assert b"env-secret-0451" not in raw
    (line,) = read_lines(log_path)
    assert line["auth"] == REDACTED
    assert line["env"] == {"SERVICE_TOKEN": REDACTED, "HOME": "/root"}
    assert line["argv"] == ["deploy", "--password", REDACTED]
    assert line["pid"] == 7


def test_file_is_private_whatever_the_umask(log_path: Path, umask_zero: None) -> None:
    EventLog.open(log_path, Redactor()).close()
    assert file_mode(log_path) == 0o600


def test_an_earlier_log_is_replaced_not_appended_to(log_path: Path) -> None:
    """A reused record path gets a log of this run only, made private."""
    log_path.write_text('{"event": "earlier"}\n', encoding="utf-8")
    log_path.chmod(0o644)
    with EventLog.open(log_path, Redactor()) as log:
        log.emit("later")
    assert [line["event"] for line in read_lines(log_path)] == ["later"]
    assert file_mode(log_path) == 0o600


def test_a_hard_link_at_the_name_is_unlinked_never_truncated(
    tmp_path: Path, log_path: Path
) -> None:
    other = tmp_path / "other-file"
    other.write_text("precious\n", encoding="utf-8")
    os.link(other, log_path)
    with EventLog.open(log_path, Redactor()) as log:
        log.emit("launched", pid=1)
    assert other.read_text(encoding="utf-8") == "precious\n"
    assert os.stat(other).st_nlink == 1
    assert [line["event"] for line in read_lines(log_path)] == ["launched"]


def test_refuses_to_follow_a_symlink(tmp_path: Path, log_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("", encoding="utf-8")
    log_path.symlink_to(target)
    with pytest.raises(OSError, match="it is a symbolic link"):
        EventLog.open(log_path, Redactor())
    assert target.read_text(encoding="utf-8") == ""
    assert log_path.is_symlink()


@pytest.mark.timeout(10)
def test_a_fifo_at_the_name_is_refused_without_blocking(log_path: Path) -> None:
    os.mkfifo(log_path)
    with pytest.raises(OSError, match="it is a FIFO"):
        EventLog.open(log_path, Redactor())
    assert stat.S_ISFIFO(os.lstat(log_path).st_mode)


def test_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="not a regular file"):
        EventLog.open(Path(os.devnull), Redactor())


def test_close_twice_and_emit_after_close(log: EventLog) -> None:
    log.close()
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.emit("late")


def test_structlog_global_configuration_is_untouched(log_path: Path) -> None:
    before = structlog.get_config()
    configured_before = structlog.is_configured()
    with EventLog.open(log_path, Redactor()) as log:
        log.emit("launched", pid=1)
    assert structlog.get_config() == before
    assert structlog.is_configured() == configured_before


def test_a_host_configuration_cannot_silence_or_reshape_the_log(log_path: Path) -> None:
    """A caller that configured structlog globally (level filter, processors) changes nothing."""
    saved = structlog.get_config()
    was_configured = structlog.is_configured()

    def explode(logger: object, method_name: str, event_dict: EventDict) -> EventDict:
        raise AssertionError("the host's processors ran")

    try:
        structlog.configure(
            processors=[explode],
            wrapper_class=structlog.make_filtering_bound_logger(50),
            cache_logger_on_first_use=True,
        )
        with EventLog.open(log_path, Redactor()) as log:
            log.emit("launched", pid=1)
    finally:
        if was_configured:
            structlog.configure(**saved)
        else:
            structlog.reset_defaults()
    assert [line["event"] for line in read_lines(log_path)] == ["launched"]


def test_null_event_log_writes_nothing(tmp_path: Path) -> None:
    log = NullEventLog()
    log.emit("launched", pid=1, token="x")
    log.close()
    log.close()
    assert list(tmp_path.iterdir()) == []


def test_both_logs_are_event_sinks(log_path: Path) -> None:
    sinks: list[EventSink] = [NullEventLog(), EventLog.open(log_path, Redactor())]
    for sink in sinks:
        sink.emit("step", state_before="watching", state_after="terminating")
        sink.close()
    assert len(read_lines(log_path)) == 1


# -- a log that cannot be written never costs the run -----------------------------


def test_a_full_disk_drops_lines_and_never_raises(log_path: Path) -> None:
    """``/dev/full`` answers every write with ENOSPC, as a full file system does."""
    log = EventLog(log_path, os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC), Redactor())
    log.emit("launched", pid=1)
    log.emit("step", state_before="launching", state_after="watching")
    assert log.lines_dropped == 2
    assert log.problem == "No space left on device"
    log.close()  # the closing note cannot be written either: no exception
    log.close()


def test_a_closed_descriptor_drops_lines(log_path: Path) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    log = EventLog(log_path, fd, Redactor())
    os.close(fd)
    log.emit("launched", pid=1)
    assert log.lines_dropped == 1
    assert log.problem == "Bad file descriptor"
    log.close()


def test_a_line_cut_short_is_cut_off_and_the_log_says_it_is_incomplete(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills in the middle of a line, then has room again."""
    real_write = os.write
    calls: list[int] = []

    def filling_write(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 2:  # the second line: half of it, then no space
            return real_write(fd, bytes(data)[: len(data) // 2])
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    log = EventLog.open(log_path, Redactor())
    monkeypatch.setattr(os, "write", filling_write)
    log.emit("launched", pid=1)
    log.emit("step", state_before="launching", state_after="watching")
    log.emit("command_exited", pid=1, returncode=0)
    log.close()
    lines = read_lines(log_path)  # every line whole: the half line is gone
    assert [line["event"] for line in lines] == ["launched", "command_exited", INCOMPLETE_EVENT]
    assert lines[-1]["lines_dropped"] == 1
    assert lines[-1]["error"] == "No space left on device"


def test_a_field_that_cannot_be_rendered_costs_its_line_only(log_path: Path) -> None:
    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no words for it")

    with EventLog.open(log_path, Redactor()) as log:
        log.emit("odd", value=Unprintable())
        log.emit("launched", pid=1)
        assert log.lines_dropped == 1
    assert [line["event"] for line in read_lines(log_path)] == ["launched", INCOMPLETE_EVENT]

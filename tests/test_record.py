"""The record layer, on a real file system: private, atomic, refusing what it must.

Every test writes into ``tmp_path``; nothing is mocked except, where a test
needs a failure halfway through a write, one system call.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import SEED_FIELDS, read_json
from tether import __version__
from tether.core.effects import Verdict
from tether.core.reasons import Reason
from tether.core.redaction import Redactor
from tether.core.spec import RunSpec
from tether.shared.record_document import (
    CONTAINMENTS,
    ResourceUsage,
    RunFacts,
    SignalSent,
    build_document,
    build_lost_document,
    record_keys,
)
from tether.shared.record_file import (
    RECORD_SCHEMA_VERSION,
    RecordError,
    check_record_path,
    ensure_private_directory,
    read_record,
    record_schema,
)
from tether.shared.record_file import write_record as write_redacted_record

STARTED_AT = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
FINISHED_AT = STARTED_AT + timedelta(seconds=12.5)

running_as_root = os.geteuid() == 0


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def leftovers(directory: Path) -> list[str]:
    """Temporary files a write may have left behind."""
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def schema_properties() -> dict[str, Any]:
    properties: dict[str, Any] = record_schema()["properties"]  # type: ignore[assignment]
    return properties


def validate(document: dict[str, object]) -> None:
    jsonschema.Draft202012Validator(record_schema()).validate(document)


def write_record(path: Path, document: dict[str, object]) -> None:
    write_redacted_record(path, document, redactor=Redactor(own_keys=record_keys()))


def spec(**changes: Any) -> RunSpec:
    values: dict[str, Any] = {
        "argv": ("sleep", "60"),
        "label": "variant-a",
        "deadline_seconds": 30.0,
        "grace_seconds": 5.0,
        "asked_at": 1000.0,
    }
    values.update(changes)
    return RunSpec(**values)


def facts(**changes: Any) -> RunFacts:
    values: dict[str, Any] = {
        "spec": spec(),
        "started_at": STARTED_AT,
        "started_monotonic": 1000.0,
        "finished_at": FINISHED_AT,
        "returncode": -9,
        "supervisor_pid": 4242,
        "command_pid": 4243,
        "command_pgid": 4243,
        "hostname": "build-7",
        "containment": "sweep",
        "signals": (
            SignalSent(signal="SIGTERM", at_seconds=30.0004, processes=3),
            SignalSent(signal="SIGCONT", at_seconds=30.0006, processes=3),
            SignalSent(signal="SIGKILL", at_seconds=35.001, processes=1),
        ),
        "descendants_stopped": 2,
        "stragglers": 0,
        "rusage": ResourceUsage(user_seconds=1.25, system_seconds=0.0625, max_rss_kib=10240),
    }
    values.update(changes)
    return RunFacts(**values)


def deadline_verdict() -> Verdict:
    return Verdict(
        reason=Reason.DEADLINE_EXCEEDED,
        exit_status=124,
        returncode=-9,
        escalated_to_sigkill=True,
        stop_started_at=1030.0,
        finished_at=1035.0123456,
    )


def launch_failed_verdict(errno: int | None, message: str | None) -> Verdict:
    return Verdict(
        reason=Reason.LAUNCH_FAILED,
        exit_status=127,
        returncode=None,
        escalated_to_sigkill=False,
        stop_started_at=None,
        finished_at=1000.002,
        launch_errno=errno,
        launch_error=message,
    )


def a_document() -> dict[str, object]:
    return build_document(deadline_verdict(), facts())


# -- the schema -----------------------------------------------------------------


def test_schema_is_valid_draft_2020_12() -> None:
    schema = record_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def walk_object_schemas(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (sub)schema that declares properties."""
    found = [schema] if "properties" in schema else []
    for child in schema.get("properties", {}).values():
        found += walk_object_schemas(child)
    if "items" in schema:
        found += walk_object_schemas(schema["items"])
    return found


def test_schema_is_closed_fully_required_and_documented() -> None:
    schema = record_schema()
    assert schema["description"]
    for sub in walk_object_schemas(schema):
        assert sub["additionalProperties"] is False
        for name, prop in sub["properties"].items():
            assert prop.get("description"), f"{name} has no description"
            # A field added after the first release is optional, and says since when.
            added = prop["description"].startswith("Added in tether ")
            assert (name in sub["required"]) is not added, name


def test_schema_reasons_are_exactly_tethers() -> None:
    properties = schema_properties()
    assert properties["reason"]["enum"] == [reason.value for reason in Reason]
    assert properties["schema_version"]["const"] == RECORD_SCHEMA_VERSION
    assert set(properties["containment"]["enum"]) == CONTAINMENTS | {"unknown"}


# -- building -------------------------------------------------------------------


def test_document_keeps_every_seed_field_and_validates() -> None:
    document = a_document()
    validate(document)
    assert set(SEED_FIELDS) <= set(document)
    assert set(document) == set(schema_properties())


def test_document_values_mean_what_the_seed_meant() -> None:
    document = a_document()
    assert document["schema_version"] == "tether.record.v1"
    assert document["variant"] == "variant-a"
    assert document["reason"] == "deadline_exceeded"
    assert document["started_at"] == "2024-05-01T12:00:00.123456+00:00"
    assert document["finished_at"] == "2024-05-01T12:00:12.623456+00:00"
    assert document["elapsed_seconds"] == 35.012
    assert document["deadline_seconds"] == 30.0
    assert document["grace_seconds"] == 5.0
    assert document["supervisor_pid"] == 4242
    assert document["eval_pid"] == 4243
    assert document["eval_process_group"] == 4243
    assert document["eval_exit_code"] == -9
    assert document["supervisor_exit_code"] == 124
    assert document["escalated_to_sigkill"] is True
    assert document["shutdown_seconds"] == 5.012


def test_document_adds_what_an_operator_needs() -> None:
    document = a_document()
    assert document["tether_version"] == __version__
    assert document["hostname"] == "build-7"
    assert document["containment"] == "sweep"
    assert document["signals"] == [
        {"signal": "SIGTERM", "at_seconds": 30.0, "processes": 3},
        {"signal": "SIGCONT", "at_seconds": 30.001, "processes": 3},
        {"signal": "SIGKILL", "at_seconds": 35.001, "processes": 1},
    ]
    assert document["descendants_stopped"] == 2
    assert document["stragglers"] == 0
    assert document["unkillable"] is False
    assert document["rusage"] == {
        "user_seconds": 1.25,
        "system_seconds": 0.062,
        "max_rss_kib": 10240,
    }
    assert document["launch_error"] is None
    assert document["tether_error"] is None


def test_completed_run_without_stop_has_no_shutdown() -> None:
    verdict = Verdict(
        reason=Reason.COMPLETED,
        exit_status=3,
        returncode=3,
        escalated_to_sigkill=False,
        stop_started_at=None,
        finished_at=1000.5,
    )
    document = build_document(
        verdict, facts(signals=(), rusage=None, spec=spec(label=None), returncode=3)
    )
    validate(document)
    assert document["shutdown_seconds"] is None
    assert document["signals"] == []
    assert document["variant"] is None
    assert document["supervisor_exit_code"] == 3


def test_times_are_utc_whatever_zone_they_came_in() -> None:
    elsewhere = STARTED_AT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    document = build_document(deadline_verdict(), facts(started_at=elsewhere))
    assert document["started_at"] == "2024-05-01T12:00:00.123456+00:00"
    naive = build_document(deadline_verdict(), facts(finished_at=FINISHED_AT.replace(tzinfo=None)))
    assert naive["finished_at"] == "2024-05-01T12:00:12.623456+00:00"


def test_launch_error_names_the_errno() -> None:
    verdict = launch_failed_verdict(2, "No such file or directory")
    document = build_document(
        verdict,
        facts(command_pid=None, command_pgid=None, signals=(), rusage=None, returncode=None),
    )
    validate(document)
    assert document["launch_error"] == {
        "errno": 2,
        "errno_name": "ENOENT",
        "message": "No such file or directory",
    }
    assert document["eval_pid"] is None
    assert document["eval_exit_code"] is None


def test_launch_error_without_errno() -> None:
    document = build_document(
        launch_failed_verdict(None, "the command is empty"), facts(returncode=None)
    )
    validate(document)
    assert document["launch_error"] == {
        "errno": None,
        "errno_name": None,
        "message": "the command is empty",
    }


def test_no_argv_or_environment_in_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing reaches the record but what build_document names; a leaky message is cleaned.

    ``str(OSError)`` quotes the file name (argv[0]); if the adapter passes that
    form, only the ``strerror`` part is kept.
    """
    monkeypatch.setenv("TETHER_TEST_API_TOKEN", "s3cr3t-token-value")
    verdict = launch_failed_verdict(13, "[Errno 13] Permission denied: '/opt/s3cr3t-argv-word/run'")
    path = tmp_path / "run.json"
    write_record(path, build_document(verdict, facts()))
    text = path.read_text()
    assert "s3cr3t" not in text
    assert json.loads(text)["launch_error"]["message"] == "Permission denied"


def test_supervisor_lost_document_validates() -> None:
    document = build_lost_document(
        spec(label="variant-b", deadline_seconds=None, limits={"pids_max": 64}),
        started_at=STARTED_AT,
        finished_at=FINISHED_AT,
        elapsed_seconds=12.50049,
        supervisor_pid=999,
        command_pid=1000,
        command_pgid=1000,
        message="the supervisor ended without reporting\nhow the run ended",
        hostname="build-7",
    )
    validate(document)
    assert set(SEED_FIELDS) <= set(document)
    assert document["reason"] == "supervisor_lost"
    assert document["supervisor_exit_code"] == 125
    assert document["containment"] == "unknown"
    assert document["elapsed_seconds"] == 12.5
    assert document["descendants_stopped"] is None
    assert document["stragglers"] is document["signals_without_pidfd"] is None
    assert document["limits"] is document["limits_enforced_by"] is document["oom_killed"] is None
    assert document["shutdown_seconds"] is None
    assert document["tether_error"] == "the supervisor ended without reporting how the run ended"


def test_supervisor_lost_document_with_little_known() -> None:
    document = build_lost_document(
        spec(label=None, grace_seconds=float("inf")),
        started_at=STARTED_AT,
        finished_at=FINISHED_AT,
        elapsed_seconds=0.01,
        supervisor_pid=None,
        command_pid=None,
        command_pgid=None,
        message="lost",
    )
    validate(document)
    assert document["hostname"] == os.uname().nodename
    assert document["eval_pid"] is None
    assert document["grace_seconds"] is None  # never escalate
    assert document["deadline_seconds"] == 30.0


def test_the_record_keys_are_read_from_the_schema() -> None:
    """Redaction keeps these as they are; none of them may look like a secret's key."""
    keys = record_keys()
    assert set(SEED_FIELDS) <= keys
    assert {"signal", "at_seconds", "user_seconds", "errno_name"} <= keys
    from tether.core.redaction import is_secret_key

    assert not any(is_secret_key(key) for key in keys)


def test_a_secret_spelling_a_field_name_does_not_break_the_record(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_redacted_record(
        path,
        a_document(),
        redactor=Redactor(["signals", "hostname", "build-7"], own_keys=record_keys()),
    )
    record = read_json(path)
    validate(record)
    assert record["hostname"] == "[redacted]"
    assert record["signals"] == a_document()["signals"]


# -- writing --------------------------------------------------------------------


def test_record_is_private_and_its_new_directories_too(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "run.json"
    write_record(path, a_document())
    assert mode_of(path) == 0o600
    assert mode_of(tmp_path / "a") == 0o700
    assert mode_of(tmp_path / "a" / "b") == 0o700
    assert stat.S_ISREG(os.lstat(path).st_mode)


def test_private_modes_do_not_depend_on_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        write_record(tmp_path / "d" / "run.json", a_document())
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "d") == 0o700
    assert mode_of(tmp_path / "d" / "run.json") == 0o600


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    write_record(shared / "run.json", a_document())
    assert mode_of(shared) == 0o755


def test_record_is_sorted_indented_json_with_a_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    document = a_document()
    write_record(path, document)
    text = path.read_text()
    assert text == json.dumps(document, sort_keys=True, indent=2) + "\n"
    assert read_record(path) == document
    assert leftovers(tmp_path) == []


def test_an_existing_record_is_replaced_and_made_private(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("old")
    path.chmod(0o644)
    write_record(path, a_document())
    assert read_record(path)["reason"] == "deadline_exceeded"
    assert mode_of(path) == 0o600


def test_unserialisable_document_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with pytest.raises(RecordError, match="not serialisable as JSON") as caught:
        write_record(path, {"schema_version": RECORD_SCHEMA_VERSION, "bad": float("inf")})
    assert str(tmp_path) in str(caught.value)
    assert os.listdir(tmp_path) == []


def test_nan_is_refused_because_jq_cannot_read_it(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="not serialisable"):
        write_record(tmp_path / "run.json", {"elapsed_seconds": float("nan")})
    assert os.listdir(tmp_path) == []


def test_a_failure_halfway_removes_the_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync fails after the temporary file was created and written."""
    seen: list[str] = []

    def failing_fsync(fd: int) -> None:
        seen.extend(leftovers(tmp_path))
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    path = tmp_path / "run.json"
    with pytest.raises(RecordError) as caught:
        write_record(path, a_document())
    assert len(seen) == 1  # the temporary file existed when fsync was called...
    assert seen[0].startswith(".run.json.")
    assert leftovers(tmp_path) == []  # ...and is gone now
    assert not path.exists()
    message = str(caught.value)
    assert message == f"cannot write the record: {path}: Input/output error"
    assert "\n" not in message
    assert caught.value.errno == 5


def test_an_interrupt_halfway_removes_the_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_record(tmp_path / "run.json", a_document())
    assert os.listdir(tmp_path) == []


def test_a_directory_at_the_record_path_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.mkdir()
    with pytest.raises(RecordError) as caught:
        write_record(path, a_document())
    assert str(caught.value) == f"cannot write the record: {path} is a directory"
    assert leftovers(tmp_path) == []
    assert path.is_dir()


def test_a_symlink_at_the_record_path_is_refused_not_followed(tmp_path: Path) -> None:
    """The chosen semantics: refuse, leave both the link and its target alone."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    link = tmp_path / "run.json"
    link.symlink_to(target)
    with pytest.raises(RecordError, match="is a symbolic link"):
        write_record(link, a_document())
    with pytest.raises(RecordError, match="is a symbolic link"):
        check_record_path(link)
    assert link.is_symlink()
    assert target.read_text() == "precious"
    assert leftovers(tmp_path) == []


def test_a_dangling_symlink_is_refused_too(tmp_path: Path) -> None:
    link = tmp_path / "run.json"
    link.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(RecordError, match="is a symbolic link"):
        write_record(link, a_document())
    assert not (tmp_path / "nowhere.json").exists()


def test_a_fifo_at_the_record_path_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(RecordError, match="is not a regular file"):
        check_record_path(fifo)
    with pytest.raises(RecordError, match="is not a regular file"):
        write_record(fifo, a_document())
    with pytest.raises(RecordError, match="not a regular file"):
        read_record(fifo)  # and reading it does not block


def test_a_very_long_record_name_still_gets_a_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / ("r" * 250)
    write_record(path, a_document())
    assert read_record(path)["schema_version"] == RECORD_SCHEMA_VERSION


# -- checking before the run ------------------------------------------------------


def test_check_creates_the_directory_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "records" / "run.json"
    check_record_path(path)
    assert mode_of(path.parent) == 0o700
    assert os.listdir(path.parent) == []


def test_check_accepts_an_existing_record(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text("{}")
    check_record_path(path)


def test_check_when_the_directory_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / "sub" / "run.json"
    with pytest.raises(RecordError) as caught:
        check_record_path(path)
    assert str(caught.value) == (
        f"cannot create the record directory {path.parent}: {blocker} is not a directory"
    )


def test_check_when_the_path_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(RecordError) as caught:
        check_record_path(tmp_path)
    assert str(caught.value) == f"cannot write the record: {tmp_path} is a directory"


@pytest.mark.skipif(running_as_root, reason="root may write into a 0500 directory")
def test_check_when_the_directory_is_not_writable(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(RecordError) as caught:
            check_record_path(locked / "run.json")
        assert str(caught.value) == (f"cannot write the record: directory {locked} is not writable")
        with pytest.raises(RecordError, match="Permission denied"):
            write_record(locked / "run.json", a_document())
    finally:
        locked.chmod(0o700)


def test_ensure_private_directory_refuses_a_file(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(RecordError, match="is not a directory") as caught:
        ensure_private_directory(file)
    assert isinstance(caught.value, OSError)
    assert caught.value.path == file


def test_messages_stay_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "odd\nname"
    path.mkdir()
    with pytest.raises(RecordError) as caught:
        check_record_path(path)
    assert "\n" not in str(caught.value)
    assert "odd\\nname" in str(caught.value)


# -- reading --------------------------------------------------------------------


def test_read_refuses_what_is_not_a_record(tmp_path: Path) -> None:
    cases = {
        "text": ("hello", "not a tether record (not JSON)"),
        "list": ("[1, 2]", "not a tether record (not a JSON object)"),
        "seed": (
            '{"schema_version": "techtree.eval-supervision.v1"}',
            "not a tether record (schema_version is 'techtree.eval-supervision.v1', "
            "not 'tether.record.v1')",
        ),
        "none": ("{}", "not a tether record (schema_version is None"),
        "future": ('{"schema_version": "tether.record.v2"}', "'tether.record.v2' is not supported"),
        "binary": (b"\xff\xfe".decode("latin-1"), "not a tether record (not JSON)"),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / name
        path.write_text(content, encoding="latin-1")
        with pytest.raises(RecordError) as caught:
            read_record(path)
        assert str(caught.value).startswith(f"cannot read the record: {path}: ")
        assert expected in str(caught.value), name


def test_read_a_missing_file_or_a_directory(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="No such file or directory"):
        read_record(tmp_path / "missing.json")
    with pytest.raises(RecordError, match="it is a directory"):
        read_record(tmp_path)


def test_read_refuses_a_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_bytes(b" " * (2 << 20))
    with pytest.raises(RecordError, match="larger than"):
        read_record(path)


# -- cost of importing it ---------------------------------------------------------


def test_importing_the_record_layer_stays_cheap() -> None:
    code = (
        "import sys, tether.shared.record_document; "
        "heavy = sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('structlog', 'transitions') or m == 'importlib.resources'); "
        "print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"

"""What ``tether.ray`` does without a Ray cluster: map resources to limits, write gathered
records into one directory safely, and ``tether ls`` over records from many hosts.

These run in every test environment (Ray need not be installed: ``tether.ray``
imports it only to talk to a cluster).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

import tether
import tether.ray
from conftest import BOUND, tether_argv
from tether.ray import NodeRecord, RayRun, mapped_limits
from tether.ray.gather import Gathered


def one_run(tmp_path: Path, label: str = "case") -> RayRun:
    """A real run's RayRun, as a task on a node would return it (outside Ray: no node)."""
    return tether.ray.run(
        ["sh", "-c", "echo hi"], record=str(tmp_path / "node" / f"{label}.json"),
        label=label, events=True,
    )  # fmt: skip


def test_resources_map_to_limits() -> None:
    assert mapped_limits({"CPU": 2.0, "memory": 2.5 * 2**30, "GPU": 1.0}) == {
        "cpu_max": 2.0,
        "memory_max": int(2.5 * 2**30),
    }
    assert mapped_limits({"CPU": 0.0}) == {}  # a zero-CPU task (an actor's default) is no limit
    assert mapped_limits({}) == {}


def test_outside_ray_nothing_is_mapped_and_output_is_captured(tmp_path: Path) -> None:
    result = one_run(tmp_path)
    assert result.ok
    assert result.outcome.stdout == b"hi\n"
    assert (result.limits, result.limits_skipped, result.node_id) == ({}, None, None)
    assert result.record is not None
    assert result.record["variant"] == "case"
    assert result.events is not None
    assert b"\n" in result.events
    assert all(json.loads(line) for line in result.events.splitlines())


def test_an_unknown_limit_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="limits must be"):
        tether.ray.run(["true"], limits="sometimes", record=False)  # type: ignore[arg-type]


def test_write_records_writes_records_and_event_logs_privately(tmp_path: Path) -> None:
    runs = [one_run(tmp_path, f"case-{n}") for n in range(3)]
    target = tmp_path / "gathered"
    written = tether.ray.write_records(runs, target)
    assert [p.name for p in written] == ["case-0.json", "case-1.json", "case-2.json"]
    for path, run in zip(written, runs, strict=True):
        assert json.loads(path.read_text()) == run.record
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.with_name(path.stem + ".events.jsonl").read_bytes() == run.events
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


def test_a_taken_name_gets_a_new_one_and_hostile_names_never_climb(tmp_path: Path) -> None:
    run = one_run(tmp_path)
    assert run.record is not None
    other = {**run.record, "variant": "another"}
    target = tmp_path / "gathered"
    (target / "sub").mkdir(parents=True)
    hostile = [
        NodeRecord("h", None, "case.json", other),  # same name, different record
        NodeRecord("h", None, "../escape.json", run.record),
        NodeRecord("h", None, "/etc/passwd.json", run.record),
        NodeRecord("h", None, "sub", run.record),
        NodeRecord("h", None, ".hidden.json", run.record),
        NodeRecord("h", None, "x.events.jsonl", run.record),
    ]
    written = tether.ray.write_records([run, *hostile], target)
    assert len(written) == 7
    assert {p.parent for p in written} == {target}
    assert written[0].name == "case.json"
    assert written[1].name != "case.json"
    assert json.loads(written[1].read_text())["variant"] == "another"
    assert not (tmp_path / "escape.json").exists()


def test_what_is_not_a_record_is_passed_over(tmp_path: Path) -> None:
    run = one_run(tmp_path)
    target = tmp_path / "gathered"
    junk: list[Gathered] = [
        dataclasses.replace(run, record=None),
        NodeRecord("h", None, "a.json", {"schema_version": "something.else"}),
        NodeRecord("h", None, "b.json", ["not", "a", "dict"]),  # type: ignore[arg-type]
    ]
    assert tether.ray.write_records(junk, target) == []


def test_a_symlink_where_a_record_goes_is_not_followed(tmp_path: Path) -> None:
    run = one_run(tmp_path)
    target = tmp_path / "gathered"
    target.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (target / "case.json").symlink_to(victim)
    written = tether.ray.write_records([run], target)
    assert written[0].name != "case.json"  # the name was taken (by the link): a new one
    assert victim.read_text() == "untouched"


def test_the_driver_secrets_are_redacted_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = one_run(tmp_path)
    assert run.record is not None
    leaked = {**run.record, "variant": "token hunter2-secret-value"}
    monkeypatch.setenv("DRIVER_API_TOKEN", "hunter2-secret-value")
    (written,) = tether.ray.write_records([NodeRecord("h", None, "r.json", leaked)], tmp_path / "g")
    assert "hunter2" not in written.read_text()


def ls(directory: Path) -> str:
    done = subprocess.run(
        tether_argv("ls", str(directory)), capture_output=True, text=True, timeout=BOUND
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ls_shows_hosts_only_when_there_are_several(tmp_path: Path) -> None:
    runs = [one_run(tmp_path, f"case-{n}") for n in range(2)]
    one_host = tmp_path / "one"
    tether.ray.write_records(runs, one_host)
    assert "HOST" not in ls(one_host)

    many = tmp_path / "many"
    for name, host in (("node-a.json", "node-a"), ("node-b.json", "node-b")):
        assert runs[0].record is not None
        record = {**runs[0].record, "hostname": host}
        tether.ray.write_records([NodeRecord(host, None, name, record)], many)
    table = ls(many).splitlines()
    assert table[0].split()[-2:] == ["HOST", "RECORD"]
    assert sorted(line.split()[-2:] for line in table[1:]) == [
        ["node-a", "node-a.json"],
        ["node-b", "node-b.json"],
    ]


def test_the_gathered_names_stay_on_one_line_in_ls(tmp_path: Path) -> None:
    run = one_run(tmp_path)
    assert run.record is not None
    record = {**run.record, "hostname": "evil\n\x1b[31mhost"}
    target = tmp_path / "g"
    tether.ray.write_records([run, NodeRecord("x", None, "evil.json", record)], target)
    table = ls(target)
    assert len(table.splitlines()) == 3
    assert "\x1b" not in table
    assert os.uname().nodename in table


def test_a_node_without_records_or_a_home_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.ray.gather import _records_here

    assert _records_here(str(tmp_path / "missing"), None, None, False) == []
    monkeypatch.setenv("HOME", "relative")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    assert _records_here(None, None, None, False) == []


def test_a_node_reads_its_records_filtered(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from tether.ray.gather import _records_here

    for label in ("case-1", "case-2", "other"):
        tether.run(["true"], record=str(tmp_path / f"{label}.json"), label=label)
    (tmp_path / "junk.json").write_text("not json")
    (tmp_path / "fifo.json").unlink(missing_ok=True)
    os.mkfifo(tmp_path / "fifo.json")
    found = _records_here(str(tmp_path), "case-*", None, True)
    assert sorted(f.record_name for f in found) == ["case-1.json", "case-2.json"]
    assert all(f.events for f in found)
    assert all(f.hostname == os.uname().nodename for f in found)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert _records_here(str(tmp_path), None, later, False) == []


def test_gathered_event_logs_are_redacted_with_the_driver_secrets_as_records_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the node, the value is no secret (no variable names it there): a
    # command named by it is kept in the record and the event log as it is.
    token = "tok-5e7c0ffee-driver-only"
    monkeypatch.delenv("MY_API_TOKEN", raising=False)
    run = tether.ray.run(
        ["sh", "-c", f"echo {token}; exit 3"],
        record=str(tmp_path / "node" / "leaky.json"),
        record_argv=True,
        events=True,
    )
    assert run.record is not None
    assert run.events is not None
    assert token in json.dumps(run.record)
    events = run.events + (
        json.dumps({"event": "note", "detail": {"nested": f"x {token} y"}}).encode()
        + b"\n{not json "
        + token.encode()
        + b"\n"
    )
    gathered = NodeRecord("node-a", None, "leaky.json", run.record, events)
    # On the driver, it is one: every file write_records() writes, and all that
    # tether show prints of them, must be without it.
    monkeypatch.setenv("MY_API_TOKEN", token)
    target = tmp_path / "gathered"
    (written,) = tether.ray.write_records([gathered], target)
    files = sorted(target.iterdir())
    assert {path.name for path in files} == {"leaky.json", "leaky.events.jsonl"}
    for path in files:
        assert token not in path.read_text(), path.name
    log = [
        json.loads(line) for line in (target / "leaky.events.jsonl").read_text().splitlines()[:-1]
    ]
    assert log[-1] == {"event": "note", "detail": {"nested": "x [redacted] y"}}
    for args in (["show", str(written)], ["show", "--json", str(written)]):
        shown = subprocess.run(
            tether_argv(*args), capture_output=True, text=True, timeout=BOUND, check=False
        )
        assert shown.returncode == 0, shown.stderr
        assert token not in shown.stdout + shown.stderr
        assert "[redacted]" in shown.stdout

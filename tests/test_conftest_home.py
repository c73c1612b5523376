"""The tests' own guard: no test touches the real home, and the check that says so can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, ours, snapshot_changes, state_snapshot, tether_argv


def test_every_test_has_a_home_of_its_own(private_home: Path) -> None:
    assert os.environ["HOME"] == str(private_home)
    assert os.environ["XDG_STATE_HOME"] == str(private_home / ".local" / "state")
    assert not str(private_home).startswith(os.path.expanduser("~root") + "/.local")


def test_a_child_process_inherits_the_private_home(private_home: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['HOME'], os.path.expanduser('~'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=15,
    ).stdout.split()
    assert shown == [str(private_home), str(private_home)]


def test_a_default_record_lands_in_the_private_home(private_home: Path) -> None:
    done = subprocess.run(
        tether_argv("run", "-v", "--", "true"), capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    records = list((private_home / ".local" / "state" / "tether" / "runs").glob("*.json"))
    assert len(records) == 1


def test_the_snapshot_sees_a_file_added_changed_or_removed(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.json").write_text("{}")
    before = state_snapshot(tmp_path)
    (tmp_path / "runs" / "b.json").write_text("{}")
    (tmp_path / "runs" / "a.json").write_text('{"x": 1}')
    assert snapshot_changes(before, state_snapshot(tmp_path)) == [
        "added runs/b.json",
        "changed runs/a.json",
    ]
    (tmp_path / "runs" / "b.json").unlink()
    (tmp_path / "runs" / "a.json").unlink()
    assert snapshot_changes(before, state_snapshot(tmp_path)) == ["removed runs/a.json"]
    assert state_snapshot(tmp_path / "missing") == {}


def test_a_run_is_ours_when_it_ran_from_this_checkout_or_the_sessions_temporary_files(
    tmp_path: Path,
) -> None:
    places = (ROOT, tmp_path / "base")
    for name, cwd in (
        ("a", str(ROOT / "tests")),
        ("b", str(tmp_path / "base" / "t0")),
        ("c", "/work/elsewhere"),
        ("d", None),
    ):
        record = {"schema_version": "tether.record.v1", "cwd": cwd}
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
        (tmp_path / f"{name}.events.jsonl").write_text("{}\n")
    (tmp_path / "e.events.jsonl").write_text("{}\n")
    judged = {
        name: ours(tmp_path, name, places)
        for name in (
            "a.json",
            "a.events.jsonl",
            "b.json",
            "c.json",
            "c.events.jsonl",
            "d.json",
            "e.events.jsonl",
        )
    }
    assert judged == {
        "a.json": True,
        "a.events.jsonl": True,
        "b.json": True,
        "c.json": False,
        "c.events.jsonl": False,
        "d.json": False,
        "e.events.jsonl": False,
    }

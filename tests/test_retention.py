"""Retention: the default directory keeps a bounded number of runs and days, pruned safely."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import BOUND, tether_argv
from tether.shared.paths import is_record_name, maybe_prune
from tether.shared.retention import (
    DEFAULT_KEEP_DAYS,
    DEFAULT_KEEP_RUNS,
    MARKER,
    Retention,
    prune,
    retention_from,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RECORD = {"schema_version": "tether.record.v1", "reason": "completed"}


def make_run(directory: Path, age: timedelta, number: int = 0, *, log: bool = True) -> str:
    """A finished run (record and event log) that started ``age`` before NOW."""
    started = NOW - age
    name = f"{started.strftime('%Y%m%dT%H%M%S.%fZ')}-{number:08x}.json"
    (directory / name).write_text(json.dumps(RECORD))
    stamp = started.timestamp()
    os.utime(directory / name, (stamp, stamp))
    if log:
        (directory / name.replace(".json", ".events.jsonl")).write_text("{}\n")
    return name


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    directory = tmp_path / "runs"
    directory.mkdir()
    return directory


def test_many_runs_are_cut_to_the_newest_n(runs: Path) -> None:
    names = [make_run(runs, timedelta(minutes=n), n) for n in range(1200)]
    pruned = prune(runs, Retention(runs=1000, seconds=None), now=NOW.timestamp())
    assert len(pruned.records) == 200
    assert pruned.files == 400
    left = sorted(path.name for path in runs.glob("*.json"))
    assert left == sorted(names[:1000])  # the newest thousand
    assert len(list(runs.glob("*.events.jsonl"))) == 1000
    assert (runs / MARKER).exists()


def test_runs_older_than_the_days_kept_go(runs: Path) -> None:
    young = make_run(runs, timedelta(days=29), 1)
    old = make_run(runs, timedelta(days=31), 2)
    dry = prune(runs, Retention(runs=None, seconds=30 * 86400), dry_run=True, now=NOW.timestamp())
    assert (dry.records, dry.files) == ((old,), 2)
    assert (runs / old).exists()
    pruned = prune(runs, Retention(runs=None, seconds=30 * 86400), now=NOW.timestamp())
    assert pruned.records == (old,)
    assert sorted(p.name for p in runs.iterdir()) == sorted(
        [young, young.replace(".json", ".events.jsonl"), MARKER]
    )


def test_a_run_that_started_long_ago_but_just_ended_is_kept(runs: Path) -> None:
    name = make_run(runs, timedelta(days=40))
    os.utime(runs / name)  # written now
    assert prune(runs, Retention(runs=None, seconds=86400), now=NOW.timestamp()).records == ()


def test_pruning_never_touches_what_is_not_a_finished_tether_run(
    runs: Path, tmp_path: Path
) -> None:
    old = timedelta(days=400)
    target = tmp_path / "precious.json"
    target.write_text(json.dumps(RECORD))
    link_name = make_run(runs, old, 1, log=False)
    (runs / link_name).unlink()
    (runs / link_name).symlink_to(target)  # a link with a record's name: never followed
    not_a_record = make_run(runs, old, 2)
    (runs / not_a_record).write_text("my notes")  # a record's name, not a record
    in_progress = make_run(runs, old, 3)
    (runs / in_progress).unlink()  # only the event log: a run still going
    stranger = runs / "notes.json"
    stranger.write_text(json.dumps(RECORD))
    os.utime(stranger, (0, 0))
    directory = make_run(runs, old, 4, log=False)
    (runs / directory).unlink()
    (runs / directory).mkdir()
    doomed = make_run(runs, old, 5)
    before = {p.name for p in runs.iterdir()}
    pruned = prune(runs, Retention(runs=0 or None, seconds=1), now=NOW.timestamp())
    assert pruned.records == (doomed,)
    after = {p.name for p in runs.iterdir()}
    assert before - after == {doomed, doomed.replace(".json", ".events.jsonl")}
    assert target.read_text() == json.dumps(RECORD)


def test_a_directory_that_is_a_link_is_not_pruned(runs: Path, tmp_path: Path) -> None:
    make_run(runs, timedelta(days=400))
    link = tmp_path / "link"
    link.symlink_to(runs)
    with pytest.raises(OSError, match=r"Not a directory|symbolic links"):
        prune(link, Retention(runs=None, seconds=1), now=NOW.timestamp())
    maybe_prune(link)  # never raises
    assert len(list(runs.iterdir())) == 2


def test_retention_from_the_environment() -> None:
    assert retention_from({}) == (Retention(DEFAULT_KEEP_RUNS, DEFAULT_KEEP_DAYS * 86400), [])
    assert retention_from({"TETHER_KEEP_RUNS": "5", "TETHER_KEEP_DAYS": "1.5"}) == (
        Retention(5, 1.5 * 86400),
        [],
    )
    assert retention_from({"TETHER_KEEP_RUNS": "0", "TETHER_KEEP_DAYS": "0"}) == (
        Retention(None, None),
        [],
    )
    retention, problems = retention_from({"TETHER_KEEP_RUNS": "-1", "TETHER_KEEP_DAYS": "nan"})
    assert retention == Retention()
    assert len(problems) == 2


def test_tether_run_prunes_the_default_directory(private_home: Path) -> None:
    runs = private_home / ".local" / "state" / "tether" / "runs"
    runs.mkdir(parents=True)
    for number in range(30):
        make_run(runs, timedelta(days=1), number)
    env = {**os.environ, "TETHER_KEEP_RUNS": "10"}
    done = subprocess.run(tether_argv("run", "--", "true"), env=env, timeout=BOUND, check=False)
    assert done.returncode == 0
    # No marker yet: the first run in a directory always prunes it.
    assert len(list(runs.glob("*.json"))) <= 11
    assert (runs / MARKER).exists()


def test_tether_prune_by_hand(private_home: Path) -> None:
    runs = private_home / ".local" / "state" / "tether" / "runs"
    runs.mkdir(parents=True)
    now = datetime.now(UTC)
    old = [make_run(runs, (NOW - now) + timedelta(days=3), n) for n in range(3)]
    new = [make_run(runs, (NOW - now) + timedelta(minutes=1), 10 + n) for n in range(3)]

    def tether_prune(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            tether_argv("prune", *args), capture_output=True, text=True, timeout=BOUND, check=False
        )

    dry = tether_prune("--older-than", "2d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.split() == sorted(old)
    assert len(list(runs.glob("*.json"))) == 6
    done = tether_prune("--older-than", "2d")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in runs.glob("*.json")) == sorted(new)
    assert "removed 3 runs (6 files)" in done.stderr
    kept = tether_prune("--keep", "1")
    assert kept.returncode == 0
    assert [p.name for p in runs.glob("*.json")] == [max(new)]
    for bad in (["--keep", "-1"], ["--older-than", "soon"]):
        refused = tether_prune(*bad)
        assert refused.returncode == 125
        assert len(refused.stderr.splitlines()) <= 2


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("20260601T120000.000000Z-0123abcd.json", True),
        ("20260601T120000.000000Z-0123ABCD.json", False),
        ("20260601T120000.000000Z-0123abcd.events.jsonl", False),
        ("20260601T120000.000000Z-0123abcd.json.tmp", False),
        ("2026060xT120000.000000Z-0123abcd.json", False),
        ("notes.json", False),
        ("20260601T120000.000000Z_0123abcd.json", False),
        ("٢0260601T120000.000000Z-0123abcd.json", False),
    ],
)
def test_only_names_tether_gives_are_record_names(name: str, expected: bool) -> None:
    assert is_record_name(name) is expected


def test_a_fresh_name_is_a_record_name() -> None:
    from tether.shared.paths import new_record_name

    assert all(is_record_name(new_record_name()) for _ in range(100))


def test_a_fresh_name_starts_with_the_utc_time_to_the_microsecond() -> None:
    from tether.shared.paths import new_record_name

    before = datetime.now(UTC)
    name = new_record_name()
    after = datetime.now(UTC)
    stamp = datetime.strptime(name[:23], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
    assert before - timedelta(microseconds=1) <= stamp <= after

"""Finding a run: ``tether show`` by path, by the name ``tether ls`` prints, by label, or --last."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import BOUND, tether_argv


def tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tether_argv(*args), cwd=cwd, capture_output=True, text=True, timeout=BOUND, check=False
    )


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory that is not the records directory."""
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    return directory


@pytest.fixture
def three_runs(private_home: Path, elsewhere: Path) -> list[str]:
    """Three runs in the default directory: labelled a, b, a; their record names, oldest first."""
    for label, code in (("a", "1"), ("b", "2"), ("a", "3")):
        done = tether("run", "--label", label, "--", "sh", "-c", f"exit {code}", cwd=elsewhere)
        assert done.returncode == int(code), done.stderr
    runs = private_home / ".local" / "state" / "tether" / "runs"
    return sorted(path.name for path in runs.glob("*.json"))


def exit_line(output: str) -> str:
    return next(line.split()[2] for line in output.splitlines() if "exit status" in line)


def test_a_name_from_ls_resolves_from_any_directory(three_runs: list[str], elsewhere: Path) -> None:
    listed = tether("ls", cwd=elsewhere)
    names = [line.split()[-1] for line in listed.stdout.splitlines()[1:]]
    assert names == list(reversed(three_runs))
    for name, code in zip(three_runs, ("1", "2", "3"), strict=True):
        shown = tether("show", name, cwd=elsewhere)
        assert shown.returncode == 0, shown.stderr
        assert exit_line(shown.stdout) == code
    stem = three_runs[0].removesuffix(".json")
    assert exit_line(tether("show", stem, cwd=elsewhere).stdout) == "1"
    log = tether("show", f"{stem}.events.jsonl", cwd=elsewhere)
    assert log.returncode == 0
    assert exit_line(log.stdout) == "1"


def test_a_label_shows_the_newest_run_with_it(three_runs: list[str], elsewhere: Path) -> None:
    shown = tether("show", "a", cwd=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert exit_line(shown.stdout) == "3"
    assert shown.stderr.splitlines() == [
        "tether: 2 runs are labelled 'a'; showing the newest (tether ls --label a lists them all)"
    ]
    only = tether("show", "b", cwd=elsewhere)
    assert (exit_line(only.stdout), only.stderr) == ("2", "")


def test_last_is_the_newest_run(three_runs: list[str], elsewhere: Path) -> None:
    shown = tether("show", "--last", cwd=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert exit_line(shown.stdout) == "3"
    assert three_runs[-1] in shown.stdout


def test_a_file_in_the_working_directory_comes_first(
    three_runs: list[str], elsewhere: Path
) -> None:
    (elsewhere / "a").write_text("not a record")
    shown = tether("show", "a", cwd=elsewhere)
    assert shown.returncode == 125
    assert len(shown.stderr.splitlines()) == 1


def test_nothing_found_is_one_line(three_runs: list[str], elsewhere: Path) -> None:
    for target in ("nobody-has-this", "../runs", ".."):
        shown = tether("show", target, cwd=elsewhere)
        assert shown.returncode == 125
        assert len(shown.stderr.splitlines()) == 1, shown.stderr
        assert "Traceback" not in shown.stderr


def test_last_without_runs_and_usage_errors(private_home: Path, elsewhere: Path) -> None:
    empty = tether("show", "--last", cwd=elsewhere)
    assert (empty.returncode, empty.stderr.count("\n")) == (125, 1)
    assert "no runs recorded" in empty.stderr
    for args in (("show",), ("show", "--last", "x")):
        refused = tether(*args, cwd=elsewhere)
        assert refused.returncode == 125
        assert "give one RUN" in refused.stderr

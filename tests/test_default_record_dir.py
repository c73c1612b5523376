"""A default record location that cannot fail a run.

Nobody named the default directory, so when it cannot be made or written (no
home, ``HOME=/nonexistent``, the user ``nobody`` under root's ``HOME``) the run
goes ahead without a record: one warning line, an outcome that says why, and
nothing created outside an existing home. A path the caller named is still
refused before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, tether_argv

SETPRIV = shutil.which("setpriv")
NOBODY = 65534

needs_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or SETPRIV is None,
    reason="needs root and setpriv, to run a child as the user nobody",
)

API_TWICE = (
    "import json, tether\n"
    "outcomes = [tether.run(['sh', '-c', 'exit 3']) for _ in range(2)]\n"
    "print(json.dumps([[str(o.record_path), o.no_record_reason, o.exit_status]"
    " for o in outcomes]))\n"
)


def as_nobody(argv: list[str]) -> list[str]:
    """``argv`` run as the user ``nobody`` (only able to read this checkout, not write)."""
    assert SETPRIV is not None
    return [
        SETPRIV,
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        # Only to reach this interpreter and checkout wherever they are installed.
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        *argv,
    ]


def without_xdg(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "XDG_STATE_HOME"}
    env.update(extra)
    return env


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=BOUND, check=False
    )


def warning_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "running without a record" in line]


@pytest.fixture
def missing_home(tmp_path: Path) -> Path:
    return tmp_path / "nonexistent"


def test_a_missing_home_runs_the_command_without_a_record(
    tmp_path: Path, missing_home: Path
) -> None:
    result = run(
        tether_argv("run", "--", "sh", "-c", "echo ran; exit 3"),
        without_xdg(HOME=str(missing_home)),
        tmp_path,
    )
    assert result.returncode == 3
    assert result.stdout == "ran\n"
    assert result.stderr.splitlines() == [
        "tether: running without a record: no default directory for records: the home "
        f"directory {str(missing_home)!r} does not exist"
    ]
    assert not missing_home.exists()
    assert sorted(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.path.lexists("/nonexistent"), reason="/nonexistent exists on this machine")
def test_home_nonexistent_literally_creates_nothing(tmp_path: Path) -> None:
    """``HOME=/nonexistent`` as root: tether used to create ``/nonexistent/.local/state``."""
    try:
        result = run(tether_argv("run", "--", "true"), without_xdg(HOME="/nonexistent"), tmp_path)
        assert result.returncode == 0, result.stderr
        assert len(warning_lines(result.stderr)) == 1
        assert not os.path.lexists("/nonexistent")
    finally:
        if os.path.isdir("/nonexistent"):  # a failure must not leave it for the next run
            shutil.rmtree("/nonexistent")


def test_the_api_runs_without_a_record_and_warns_once_per_process(
    tmp_path: Path, missing_home: Path
) -> None:
    result = run([sys.executable, "-c", API_TWICE], without_xdg(HOME=str(missing_home)), tmp_path)
    assert result.returncode == 0, result.stderr
    outcomes = json.loads(result.stdout)
    for record_path, why, status in outcomes:
        assert record_path == "None"
        assert "does not exist" in why
        assert status == 3
    assert len(warning_lines(result.stderr)) == 1, result.stderr
    assert not missing_home.exists()


def test_read_record_says_why_there_is_none(
    monkeypatch: pytest.MonkeyPatch, missing_home: Path
) -> None:
    import tether

    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(missing_home))
    outcome = tether.run(["true"])
    assert outcome.record_path is None
    assert outcome.no_record_reason is not None
    with pytest.raises(ValueError, match="does not exist"):
        outcome.read_record()


def test_an_explicit_record_that_cannot_be_written_is_still_refused(
    tmp_path: Path, missing_home: Path
) -> None:
    marker = tmp_path / "ran"
    blocked = tmp_path / "file"
    blocked.write_text("")
    result = run(
        tether_argv("run", "--record", str(blocked / "r.json"), "--", "touch", str(marker)),
        without_xdg(HOME=str(missing_home)),
        tmp_path,
    )
    assert result.returncode == 125
    assert len(result.stderr.splitlines()) == 1
    assert not marker.exists()


def test_the_api_refuses_an_explicit_record_and_record_true(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, missing_home: Path
) -> None:
    import tether

    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(missing_home))
    blocked = tmp_path / "file"
    blocked.write_text("")
    marker = tmp_path / "ran"
    for record in (str(blocked / "r.json"), True):
        with pytest.raises(tether.LaunchError) as raised:
            tether.run(["touch", str(marker)], record=record)
        assert raised.value.exit_status == 125
    assert not marker.exists()
    assert not missing_home.exists()


def test_timeout_runs_with_a_missing_home(tmp_path: Path, missing_home: Path) -> None:
    result = run(
        tether_argv("timeout", "5", "sh", "-c", "exit 4"),
        without_xdg(HOME=str(missing_home)),
        tmp_path,
    )
    assert result.returncode == 4
    assert len(result.stderr.splitlines()) <= 1
    assert not missing_home.exists()


@needs_nobody
def test_nobody_under_roots_home_runs_the_command_without_a_record(
    tmp_path: Path, private_home: Path
) -> None:
    """``sudo -u nobody`` keeps root's ``HOME``, where ``nobody`` cannot write."""
    os.chmod(tmp_path, 0o755)
    result = run(
        as_nobody(tether_argv("run", "-v", "--", "sh", "-c", "id -u; exit 5")),
        without_xdg(HOME=str(private_home)),
        tmp_path,
    )
    assert result.returncode == 5, result.stderr
    assert result.stdout == f"{NOBODY}\n"
    assert warning_lines(result.stderr) == [
        "tether: running without a record: cannot create the record directory "
        f"{private_home}/.local: Permission denied"
    ]
    assert not (private_home / ".local").exists()


@needs_nobody
def test_nobody_with_its_own_home_nonexistent_through_the_api(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    missing = tmp_path / "nonexistent"
    result = run(
        as_nobody([sys.executable, "-c", API_TWICE]), without_xdg(HOME=str(missing)), tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert [entry[0] for entry in json.loads(result.stdout)] == ["None", "None"]
    assert len(warning_lines(result.stderr)) == 1
    assert not missing.exists()


@needs_nobody
def test_nobody_is_refused_an_explicit_record_it_cannot_write(
    tmp_path: Path, private_home: Path
) -> None:
    os.chmod(tmp_path, 0o755)
    marker = tmp_path / "ran"
    result = run(
        as_nobody(
            tether_argv(
                "run", "--record", str(private_home / "r.json"), "--", "sh", "-c", f": > {marker}"
            )
        ),
        without_xdg(HOME=str(private_home)),
        tmp_path,
    )
    assert result.returncode == 125
    assert "not writable" in result.stderr
    assert not marker.exists()

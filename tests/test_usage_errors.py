"""A usage error leaves no record at any door; a command that cannot run does.

Checked against the default directory, the one a refused command line would
have filled (15 of 43 runs in one afternoon's ``tether ls`` were typos). The
seed door's own case is in ``test_seed_door.py`` (its record path is given).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import tether
from conftest import BOUND, tether_argv


def runs_dir(home: Path) -> Path:
    return home / ".local" / "state" / "tether" / "runs"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--deadline", "soon", "--", "true"],
        ["run", "--bogus", "--", "true"],
        ["run", "--"],
        ["run", "--deadlin", "5", "true"],
        ["timeout", "soon", "true"],
        ["timeout", "--bogus", "5", "true"],
        ["timeout", "5"],
        ["timeout"],
    ],
)
def test_a_usage_error_at_the_command_line_leaves_no_record(
    private_home: Path, args: list[str]
) -> None:
    result = subprocess.run(tether_argv(*args), capture_output=True, text=True, timeout=BOUND)
    assert result.returncode == 125, result.stderr
    assert not runs_dir(private_home).exists()


@pytest.mark.parametrize(
    ("argv", "options"),
    [([], {}), (["true"], {"deadline": "soon"}), (["true"], {"grace": -1}), (["true"], {"x": 1})],
)
def test_a_usage_error_in_the_api_leaves_no_record(
    private_home: Path, argv: list[str], options: dict[str, object]
) -> None:
    with pytest.raises((TypeError, ValueError)):
        tether.run(argv, **options)  # type: ignore[arg-type]
    assert not runs_dir(private_home).exists()


@pytest.mark.parametrize("door", ["run", "timeout", "api"])
def test_a_command_that_cannot_be_found_still_leaves_its_record(
    private_home: Path, door: str
) -> None:
    missing = "/no/such/command/anywhere"
    if door == "api":
        with pytest.raises(tether.LaunchError):
            tether.run([missing])
    else:
        args = ["run", "--", missing] if door == "run" else ["timeout", "5", missing]
        result = subprocess.run(tether_argv(*args), capture_output=True, text=True, timeout=BOUND)
        assert result.returncode == 127
    records = list(runs_dir(private_home).glob("*[0-9a-f].json"))
    if door == "timeout":  # it keeps a record only where --record says, as for a usage error
        assert records == []
        kept = private_home / "timeout.json"
        args = ["timeout", f"--record={kept}", "5", missing]
        result = subprocess.run(tether_argv(*args), capture_output=True, text=True, timeout=BOUND)
        assert result.returncode == 127
        records = [kept]
    assert len(records) == 1
    assert '"launch_failed"' in records[0].read_text()

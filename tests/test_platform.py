"""Elsewhere than Linux, every door that starts a command refuses, in one clear line.

tether's promises stand on pidfds, the child subreaper flag, ``/proc`` and
``PR_SET_PDEATHSIG``. Rather than keep fewer of them quietly, it says so and
starts nothing. The platform is faked in-process: the refusal happens before
anything Linux-specific is touched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tether
from tether.cli import main as cli
from tether.cli import seed as supervisor


@pytest.fixture
def elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")


@pytest.mark.usefixtures("elsewhere")
def test_the_api_raises_a_launch_error(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with pytest.raises(tether.LaunchError, match="Linux only") as error:
        tether.launch(["touch", str(marker)], record=False)
    assert error.value.exit_status == 125
    assert not marker.exists()


@pytest.mark.usefixtures("elsewhere")
def test_tether_run_exits_125(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "started"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--no-record", "--", "touch", str(marker)])
    assert exit_.value.code == 125
    assert "Linux only" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.usefixtures("elsewhere")
def test_the_seed_door_exits_125(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "started"
    with pytest.raises(SystemExit) as exit_:
        supervisor.main(
            [
                "--variant", "v", "--parent-fd", "0", "--record", str(tmp_path / "r.json"),
                "--deadline-seconds", "1", "--grace-seconds", "1", "--", "touch", str(marker),
            ]
        )  # fmt: skip
    assert exit_.value.code == 125
    err = capsys.readouterr().err
    assert "Linux only" in err
    assert len(err.strip().splitlines()) == 1
    assert not marker.exists()

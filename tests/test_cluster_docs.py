"""Every Python example in ``docs/cluster.md`` runs on a local Ray cluster, and succeeds.

As ``tests/test_api_docs.py`` does for ``docs/api.md``: each block in a fresh
interpreter, in a scratch directory with its own home, state directory and Ray
temporary directory (``RAY_TMPDIR``), within a bound. Skipped where Ray is not
installed (the tox environment ``ray`` has it).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import BOUND, ROOT, alive, wait_gone

pytest.importorskip("ray", reason="Ray is not installed (pip install 'tether[ray]')")

DOC = ROOT / "docs" / "cluster.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)

#: Starting a local Ray cluster takes seconds (about 8 on the development machine).
RAY_BOUND = 180.0


def examples() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def line_of(block: str) -> int:
    text = DOC.read_text(encoding="utf-8")
    return text[: text.index(block)].count("\n") + 1


def test_the_page_has_a_ray_example() -> None:
    assert any("ray.init" in block for block in examples())


@pytest.mark.timeout(RAY_BOUND + 30)
@pytest.mark.parametrize("block", examples(), ids=lambda block: f"line{line_of(block)}")
def test_example_runs(block: str, tmp_path: Path) -> None:
    # Ray's socket paths must stay short (108 bytes): not under pytest's long tmp_path.
    with tempfile.TemporaryDirectory(prefix="tether-ray-") as ray_tmp:
        env = {
            **os.environ,
            "HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "RAY_TMPDIR": ray_tmp,
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        try:
            result = subprocess.run(
                [sys.executable, "-c", block],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=RAY_BOUND,
            )
        finally:
            left = [pid for pid in using(ray_tmp) if not wait_gone(pid, BOUND)]
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert result.returncode == 0, f"docs/cluster.md:{line_of(block)}\n{result.stderr}"
    assert left == [], "the example's ray.shutdown() left processes running"


def using(directory: str) -> list[int]:
    """The live processes whose command line names ``directory`` (this test's Ray cluster)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if directory.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
    return [pid for pid in found if alive(pid)]

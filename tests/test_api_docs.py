"""Every Python example in ``docs/api.md`` runs, and succeeds.

Documentation that is not run goes stale without anyone noticing. Each
```` ```python ```` block is executed on its own, in a fresh interpreter (so the
examples cannot lean on each other or on the test process), in a scratch
directory with its own ``XDG_STATE_HOME``, within a bound. The examples check
their own claims with ``assert``, so a wrong sentence in the docs fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, ROOT

DOC = ROOT / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def examples() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def line_of(block: str) -> int:
    text = DOC.read_text(encoding="utf-8")
    return text[: text.index(block)].count("\n") + 1


def test_the_page_has_examples() -> None:
    assert len(examples()) >= 6


@pytest.mark.parametrize("block", examples(), ids=lambda block: f"line{line_of(block)}")
def test_example_runs(block: str, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    result = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=2 * BOUND,
    )
    assert result.returncode == 0, f"docs/api.md:{line_of(block)}\n{result.stderr}"

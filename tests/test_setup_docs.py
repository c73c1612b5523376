"""The setup commands of README.md and docs/timeout.md work as written, with nothing activated.

Each recipe is taken from the page itself and run by ``sh`` in a directory laid out as a
clone after README's "Try it" (``.venv`` there), with a private home and a ``PATH`` that does
not hold the venv's ``bin``: what a new user who never ran ``source .venv/bin/activate`` has.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, ROOT

VENV = Path(sys.executable).parent.parent


def _shell_blocks(page: Path) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", page.read_text(), flags=re.DOTALL)


def _the_block(page: Path, holding: str) -> str:
    blocks = [block for block in _shell_blocks(page) if holding in block]
    assert len(blocks) == 1, f"{page.name}: {len(blocks)} shell blocks hold {holding!r}"
    return blocks[0]


def _as_a_new_user(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    if not (VENV / "bin" / "tether-timeout").exists():
        pytest.skip(f"no tether-timeout in {VENV}")
    clone, home = tmp_path / "clone", tmp_path / "home"
    clone.mkdir()
    home.mkdir()
    (clone / ".venv").symlink_to(VENV)
    bin_dir = str(VENV / "bin")
    path = ":".join(part for part in os.environ["PATH"].split(":") if part != bin_dir)
    env = {**os.environ, "HOME": str(home), "PATH": path}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        ["sh", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )


@pytest.mark.timeout(60)
def test_the_readmes_timeout_recipe_works_without_activating_anything(tmp_path: Path) -> None:
    recipe = _the_block(ROOT / "README.md", "tether-timeout")
    ran = _as_a_new_user(tmp_path, recipe + "timeout --version\n")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["exit status: 124", f"timeout (tether) {_version()}"]
    assert ran.stderr == "timeout: sending signal TERM to command 'sleep'\n"


@pytest.mark.timeout(60)
def test_the_timeout_pages_recipe_works_without_activating_anything(tmp_path: Path) -> None:
    recipe = _the_block(ROOT / "docs" / "timeout.md", "ln -s")
    ran = _as_a_new_user(tmp_path, recipe + "timeout 5 true && timeout --version\n")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"timeout (tether) {_version()}\n"


def test_the_docs_site_build_says_what_installs_it_and_where_it_lands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/pip install -q -e '.[docs]' && .venv/bin/mkdocs build --strict" in readme
    assert "writes the site to `site/`" in readme
    assert "site_dir" not in (ROOT / "mkdocs.yml").read_text()  # so site/ it is


def _version() -> str:
    from tether._version import __version__

    return __version__

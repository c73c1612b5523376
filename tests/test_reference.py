"""The manual page, the shell completions and the documentation site stay true to the program."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, ROOT, cgroup_problem, tether_argv
from tether.cli.reference import EXAMPLES, TIMEOUT_OPTIONS, reference_parser

DATA = ROOT / "src" / "tether" / "data"
needs_generators = pytest.mark.skipif(
    importlib.util.find_spec("shtab") is None
    or importlib.util.find_spec("argparse_manpage") is None,
    reason="needs the docs extra (shtab, argparse-manpage)",
)


@needs_generators
def test_the_shipped_manual_page_and_completions_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert result.returncode == 0, result.stdout


def test_the_timeout_options_are_exactly_those_tether_timeout_knows() -> None:
    shown = subprocess.run(
        tether_argv("timeout", "--help"), capture_output=True, text=True, timeout=BOUND
    ).stdout
    listed = set(re.findall(r"^\s+(?:(-\w), )?(--[\w-]+)", shown, re.MULTILINE))
    known = {
        (flags[0] if len(flags) == 2 else "", flags[-1])
        for flags, _metavar, _help in TIMEOUT_OPTIONS
    }
    assert known == listed - {("", "--help"), ("", "--version")}


def test_the_reference_parser_knows_every_subcommand_and_run_option() -> None:
    text = reference_parser().format_help()
    for command in ("run", "timeout", "show", "ls", "prune"):
        assert command in text
    from tether.cli.run import _run_parser

    run_options = {flag for action in _run_parser()._actions for flag in action.option_strings}
    assert {"--label", "--name", "--record-argv", "--deadline"} <= run_options
    completions = (DATA / "completions" / "tether.bash").read_text()
    for flag in run_options:
        assert flag in completions, flag


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("words", "expected"),
    [(["tether", "pr"], ["prune"]), (["tether", "run", "--rec"], ["--record", "--record-argv"])],
)
def test_bash_completes_from_the_shipped_script(words: list[str], expected: list[str]) -> None:
    script = (
        f"source {DATA / 'completions' / 'tether.bash'}; "
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
        f"COMP_LINE='{' '.join(words)}'; COMP_POINT=${{#COMP_LINE}}; "
        "_shtab_tether; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=BOUND)
    assert sorted(result.stdout.split()) == expected, result.stderr


def test_the_manual_page_names_every_command() -> None:
    page = (DATA / "man" / "tether.1").read_text()
    assert page.startswith(".TH TETHER")
    for command in ("run", "timeout", "show", "ls", "prune"):
        assert f"'tether {command}'" in page


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="needs the docs extra")
def test_the_documentation_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "reference" / "index.html").exists()


def test_the_manual_page_has_every_exit_status() -> None:
    page = (DATA / "man" / "tether.1").read_text()
    section = page[page.index(".SH EXIT STATUS") :]
    for status in ("124", "125", "126", "127", "130", "128+N", "137"):
        assert f".B {status}\n" in section, status


def test_the_completions_offer_the_reasons_and_since_examples() -> None:
    from tether.core.reasons import Reason

    for name in ("tether.bash", "_tether"):
        text = (DATA / "completions" / name).read_text()
        for value in (*(reason.value for reason in Reason), "running", "lost", "30m", "7d"):
            assert re.search(rf"[\s(\"]{value}[\s)\"]", text), (name, value)


def test_the_tether_timeout_statuses_match_its_help() -> None:
    from tether.cli.reference import TIMEOUT_STATUSES

    shown = subprocess.run(
        tether_argv("timeout", "--help"), capture_output=True, text=True, timeout=BOUND
    ).stdout
    listed = set(re.findall(r"^\s+(\d+)\s", shown[shown.index("Exit status:") :], re.MULTILINE))
    assert listed == {status for status, _ in TIMEOUT_STATUSES if status.isdigit()}


@pytest.mark.timeout(120)
def test_the_manual_pages_examples_are_in_it_and_run_as_written(tmp_path: Path) -> None:
    page = (DATA / "man" / "tether.1").read_text()
    section = page[page.index(".SH EXAMPLES") :]
    tether = Path(sys.executable).with_name("tether")
    if not tether.exists():
        pytest.skip(f"no tether script beside {sys.executable}")
    env = {**os.environ, "PATH": f"{tether.parent}:{os.environ['PATH']}"}
    statuses = []
    for _what, command in EXAMPLES:
        assert command.replace("-", "\\-") in section
        if "--memory-max" in command and cgroup_problem() is not None:
            continue  # refused (125) where no cgroup can take the limit, as documented
        ran = subprocess.run(
            ["sh", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=BOUND,
            check=False,
        )
        assert ran.returncode != 125, (command, ran.stderr)  # every option taken as written
        statuses.append(ran.returncode)
    assert statuses[:3] == [124, 0, 0]  # the run stopped at its deadline; show and ls read it

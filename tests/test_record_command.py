"""What ran, safely: the record keeps the command's name and directory, the argv only if asked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import tether
from conftest import BOUND, read_json, tether_argv, validate_record
from tether.review import load_run, render_run, render_table


def tether_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        tether_argv("run", *args), cwd=cwd, capture_output=True, text=True, timeout=BOUND
    )


def test_the_record_keeps_the_commands_name_and_directory_not_its_argv(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    done = tether_run(
        "--record", str(record), "--", "/bin/sh", "-c", "exit 0", "--password", "hunter22",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = read_json(record)
    validate_record(document)
    assert document["command"] == "sh"
    assert document["cwd"] == str(tmp_path)
    assert document["argv"] is None
    assert "hunter22" not in record.read_text()


def test_record_argv_keeps_the_whole_command_line_redacted(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    done = tether_run(
        "--record-argv", "--record", str(record), "--",
        "sh", "-c", "exit 0", "--password", "abc", "API_TOKEN=xy", "--verbose", "plain",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    document = read_json(record)
    validate_record(document)
    assert document["argv"] == [
        "sh", "-c", "exit 0", "--password", "[redacted]", "API_TOKEN=[redacted]",
        "--verbose", "plain",
    ]  # fmt: skip
    assert "abc" not in record.read_text().replace("tether_version", "")


def test_the_api_takes_record_argv_and_checks_it(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    outcome = tether.run(["true", "one", "two"], record=record, record_argv=True, cwd=tmp_path)
    document = outcome.read_record()
    assert (document["command"], document["cwd"]) == ("true", str(tmp_path))
    assert document["argv"] == ["true", "one", "two"]
    with pytest.raises(TypeError, match="record_argv"):
        tether.run(["true"], record=False, record_argv="yes")  # type: ignore[arg-type]


def test_a_huge_command_line_is_cut_so_the_record_stays_readable(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    words = ["x" * 20_000 for _ in range(10)]
    outcome = tether.run(["true", *words], record=record, record_argv=True)
    document = outcome.read_record()
    validate_record(document)
    argv = document["argv"]
    assert isinstance(argv, list)
    assert sum(len(word) for word in argv[:-1]) == 32_768
    assert argv[-1] == "[cut: 9 words no longer kept in full]"


def test_show_and_ls_say_what_ran(tmp_path: Path) -> None:
    record = tmp_path / "runs" / "r.json"
    tether.run(["sh", "-c", "exit 7"], record=record, cwd=tmp_path, label="seven")
    run = load_run(record)
    shown = render_run(run)
    assert "  command       sh -c, pid " in shown  # inline code: named, never kept
    assert f"  directory     {tmp_path}\n" in shown
    assert "  label         seven\n" in shown
    table = render_table([(record, run.record or {})], directory=record.parent)
    header, row = table.splitlines()
    assert header.split() == [
        "WHEN", "LABEL", "COMMAND", "REASON", "EXIT", "DURATION", "ESCALATED", "RECORD"
    ]  # fmt: skip
    assert row.split()[2:7] == ["seven", "sh", "-c", "completed", "7"]


def test_a_nonzero_exit_is_not_green(tmp_path: Path) -> None:
    failed, passed = tmp_path / "failed.json", tmp_path / "passed.json"
    tether.run(["sh", "-c", "exit 7"], record=failed)
    tether.run(["true"], record=passed)
    rows = [(path, read_json(path)) for path in (failed, passed)]
    lines = render_table(rows, directory=tmp_path, colour=True).splitlines()[1:]
    assert "\x1b[31mcompleted" in lines[0]
    assert "\x1b[31m7" in lines[0]
    assert "\x1b[32m" not in lines[0]
    assert "\x1b[32mcompleted" in lines[1]
    assert "\x1b[31m" in render_run(load_run(failed), colour=True).splitlines()[0]


@pytest.mark.parametrize("flag", ["--label", "--name", "--label=", "--name="])
def test_label_and_its_alias_name_are_one_option(tmp_path: Path, flag: str) -> None:
    record = tmp_path / "r.json"
    args = [flag + "nightly"] if flag.endswith("=") else [flag, "nightly"]
    done = tether_run("--record", str(record), *args, "--", "true", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert read_json(record)["variant"] == "nightly"


def test_a_label_too_long_is_refused_by_the_name_people_use(tmp_path: Path) -> None:
    done = tether_run("--label", "x" * 5000, "--", "true", cwd=tmp_path)
    assert done.returncode == 125
    assert done.stderr.startswith("tether run: --label: a label of 5000 characters is too long")


def test_tether_timeout_takes_a_label_too(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    done = subprocess.run(
        tether_argv("timeout", "--label", "nightly", "--record", str(record), "5", "true"),
        capture_output=True, text=True, timeout=BOUND,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert read_json(record)["variant"] == "nightly"
    refused = subprocess.run(
        tether_argv("timeout", "--label", "x" * 5000, "5", "true"),
        capture_output=True, text=True, timeout=BOUND,
    )  # fmt: skip
    assert refused.returncode == 125
    assert "--label: a label of 5000 characters is too long" in refused.stderr

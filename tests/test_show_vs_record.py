"""``tether show`` says each thing once, and what it says agrees with the record and the log.

The runs are the README's own example and the docs' ones (docs/operators.md's
deadline run that needed SIGKILL, a command that exits on its own leaving a
child behind), run for real through ``tether run``; ``tether show`` is run on
each record and every line it prints is checked against the record and the
event log beside it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import BOUND, tether_argv

#: The README's "Try it" command, as written there (its deadline is 2 s).
_README = ["-v", "--deadline", "2s", "--", "sh", "-c", "setsid sleep 60 & sleep 60"]
#: docs/operators.md's example: a deadline of 0.3 s, a grace of 0.2 s, and a child that
#: ignores SIGTERM, so it is still alive when the command exits and needs SIGKILL.
_OPERATORS = [
    *("--label", "nightly-eval", "--deadline", "0.3s", "--grace", "0.2s", "--"),
    *("sh", "-c", "(trap '' TERM; sleep 60; :) & sleep 60"),
]
#: docs/operators.md's "completed, with stragglers": the command exits, its child lives on.
_STRAGGLER = ["--deadline", "30s", "--", "sh", "-c", "sleep 60 & exit 0"]


def _run_and_show(
    tmp_path: Path, args: list[str]
) -> tuple[dict[str, object], list[dict[str, object]], str]:
    record = tmp_path / "run.json"
    subprocess.run(
        tether_argv("run", "--record", str(record), *args),
        capture_output=True,
        timeout=BOUND,
        check=False,
    )
    shown = subprocess.run(
        tether_argv("show", str(record)), capture_output=True, text=True, timeout=BOUND, check=True
    ).stdout
    data = json.loads(record.read_text())
    log = record.with_name("run.events.jsonl")
    events = [json.loads(line) for line in log.read_text().splitlines() if line]
    return data, events, shown


def _verdict(shown: str) -> tuple[str, dict[str, list[str]]]:
    """The title line, and each ``name  value`` line of the verdict (continuations appended)."""
    block = shown.split("\n\n", maxsplit=1)[0].splitlines()
    lines: dict[str, list[str]] = {}
    name = ""
    for line in block[1:]:
        key, value = line[2:15].strip(), line[16:]
        if key:
            assert key not in lines, f"{key!r} said twice:\n{shown}"
            name = key
            lines[name] = [value]
        else:
            lines[name].append(value)
    return block[0], lines


def _agrees(data: dict[str, object], events: list[dict[str, object]], shown: str) -> None:
    title, lines = _verdict(shown)
    assert title.endswith(f": {data['reason']}"), title
    assert lines["reason"][0].startswith(f"{data['reason']} - ")
    assert lines["exit status"][0].split()[0] == str(data["supervisor_exit_code"])
    assert f"pid {data['eval_pid']}" in lines["command"][0]
    assert lines["escalated"][0].startswith("yes" if data["escalated_to_sigkill"] else "no")
    sent = data["signals"]
    assert isinstance(sent, list)
    assert len(lines["signals"]) == len(sent)
    for said, item in zip(lines["signals"], sent, strict=True):
        assert said.startswith(f"{item['signal']} at ")
        assert said.endswith(
            f"to {item['processes']} process" + ("" if item["processes"] == 1 else "es")
        )
    assert lines["descendants"][0].startswith(f"{data['descendants_stopped']} stopped")
    # How many other processes were alive when the command exited: said by the
    # timeline (the log's command_exited), and by the verdict if it says it at all.
    exited = [event for event in events if event["event"] == "command_exited"]
    assert len(exited) == 1
    others = exited[0]["others_alive"]
    assert f"; {others} other process(es) still alive" in shown
    claims = re.findall(r"(\d+) (?:still|left) running when the command exited", shown)
    for claim in claims:
        assert int(claim) == others, f"the verdict says {claim}, the timeline {others}:\n{shown}"
    if data["reason"] == "completed":
        assert claims == [str(data["stragglers"])]


@pytest.mark.timeout(60)
def test_show_agrees_with_the_readme_example(tmp_path: Path) -> None:
    data, events, shown = _run_and_show(tmp_path, _README)
    assert data["reason"] == "deadline_exceeded"
    _agrees(data, events, shown)


@pytest.mark.timeout(60)
def test_show_agrees_with_the_operators_guide_example(tmp_path: Path) -> None:
    data, events, shown = _run_and_show(tmp_path, _OPERATORS)
    assert data["reason"] == "deadline_exceeded"
    assert data["escalated_to_sigkill"] is True
    others = next(e["others_alive"] for e in events if e["event"] == "command_exited")
    assert isinstance(others, int)
    assert others >= 1  # the child that ignores SIGTERM outlived the command
    _agrees(data, events, shown)


@pytest.mark.timeout(60)
def test_show_agrees_with_a_run_that_left_a_straggler(tmp_path: Path) -> None:
    data, events, shown = _run_and_show(tmp_path, _STRAGGLER)
    assert data["reason"] == "completed"
    assert data["stragglers"] == 1
    _agrees(data, events, shown)

"""Every list of limits follows one table: ``tether.core.limits.LIMIT_NAMES``.

A limit added to the table and forgotten in one of the places that list the
limits fails here, rather than being dropped in silence: the record's schema
(``limits`` and ``limits_enforced_by``), the controller each needs, the API's
options, ``tether run``'s flags (both readings), ``tether show``'s line, what
``tether.ray`` hands back, and the docs that list them. ``docs/architecture.md``
("Adding a limit") names every place.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import tether.ray
from conftest import BOUND, ROOT, SCHEMA, tether_argv, validate_record
from tether.api.options import LaunchOptions
from tether.caller.request import limits_refusal
from tether.cli.run import _run_parser
from tether.cli.run_options import RunOptions, read_options
from tether.core.limits import LIMIT_CONTROLLERS, LIMIT_NAMES, LIMITS, limit_controllers
from tether.ray.task import given_limits

#: ``tether run``'s flag for each limit (the API's name, as the record keeps it).
FLAGS = {limit.name: limit.flag for limit in LIMITS}

#: A value of each limit, as a person types it, and as the run keeps it.
TYPED = {"memory_max": "8G", "memory_swap_max": "0", "cpu_max": "1.5", "pids_max": "512"}
KEPT = {"memory_max": 8 << 30, "memory_swap_max": 0, "cpu_max": 1.5, "pids_max": 512}


def test_the_tables_of_this_test_name_every_limit() -> None:
    assert set(FLAGS) == set(TYPED) == set(KEPT) == set(LIMIT_NAMES)


@pytest.mark.parametrize("key", ["limits", "limits_enforced_by"])
def test_the_record_schema_has_every_limit(key: str) -> None:
    schema = json.loads(SCHEMA.read_text())["properties"][key]
    assert set(schema["properties"]) == set(LIMIT_NAMES)
    assert set(schema["required"]) == set(LIMIT_NAMES)


def test_every_limit_has_its_controller() -> None:
    assert set(LIMIT_CONTROLLERS) == set(LIMIT_NAMES)
    for name in LIMIT_NAMES:
        assert limit_controllers({name: 1}) == (LIMIT_CONTROLLERS[name],)


def test_the_api_takes_every_limit() -> None:
    assert set(LIMIT_NAMES) <= set(LaunchOptions.__annotations__)


def test_tether_run_has_a_flag_for_every_limit() -> None:
    shown = subprocess.run(
        tether_argv("run", "--help"), stdout=subprocess.PIPE, timeout=BOUND, check=True
    ).stdout.decode()
    for flag in FLAGS.values():
        assert flag in shown


def test_both_readings_of_tether_runs_options_take_every_limit() -> None:
    words = [f"{FLAGS[name]}={value}" for name, value in TYPED.items()]
    assert read_options(words).limits() == TYPED  # type: ignore[union-attr]
    assert _run_parser().parse_args(words, namespace=RunOptions()).limits() == TYPED


@pytest.mark.parametrize(
    ("doc", "spelt"),
    [("cli.md", "flag"), ("api.md", "name"), ("record.md", "name")],
)
def test_the_docs_name_every_limit(doc: str, spelt: str) -> None:
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    for limit in LIMITS:
        assert f"`{getattr(limit, spelt)}" in text, (doc, limit.name)


def test_tether_ray_hands_back_every_limit_as_the_run_took_it() -> None:
    assert given_limits({**TYPED, "stdout": None}) == KEPT
    assert given_limits({"memory_max": None}) == {}


def test_a_ray_run_keeps_a_size_given_as_text(tmp_path: Path) -> None:
    """``memory_max="8G"`` was dropped from ``RayRun.limits``: only numbers were kept."""
    given = {"memory_max": "8G", "cpu_max": "1.5", "pids_max": 512}
    why = limits_refusal(given)
    if why is not None:
        pytest.skip(f"these limits cannot be enforced here: {why}")
    result = tether.ray.run(["true"], record=str(tmp_path / "run.json"), **given)  # type: ignore[arg-type]
    assert result.ok, result.outcome.message
    assert result.limits == {"memory_max": 8 << 30, "cpu_max": 1.5, "pids_max": 512}
    assert result.record is not None
    recorded = result.record["limits"]
    assert isinstance(recorded, dict)
    assert {name: value for name, value in recorded.items() if value is not None} == result.limits


def test_tether_show_names_every_limit(tmp_path: Path) -> None:
    record_path = tmp_path / "run.json"
    subprocess.run(
        tether_argv("run", "--record", str(record_path), "--", "true"), timeout=BOUND, check=True
    )
    record = json.loads(record_path.read_text())
    record["limits"] = dict(KEPT)
    record["limits_enforced_by"] = dict.fromkeys(LIMIT_NAMES, "cgroup2")
    validate_record(record)
    record_path.write_text(json.dumps(record))
    shown = subprocess.run(
        tether_argv("show", str(record_path)), stdout=subprocess.PIPE, timeout=BOUND, check=True
    ).stdout.decode()
    (line,) = [line for line in shown.splitlines() if line.strip().startswith("limits")]
    assert len(line.split(",")) == len(LIMIT_NAMES), line

"""The benchmark harness works: its statistics, its report, its plot, one tiny measurement.

Speed is measured by ``python -m benchmarks``, never asserted here: these
tests check that the pieces compute what they say (a percentile, a ratio, a
table row, an SVG document) and that one real trial of each kind runs to the
end, leaves nothing running, and produces a sample. No timing is asserted.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The harness lives beside src/, not in the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import measures
from benchmarks.doors import Doors
from benchmarks.evaluation import MARKER, evaluation
from benchmarks.loops import loops
from benchmarks.measures import Bench
from benchmarks.plot import Panel, Row, render_svg
from benchmarks.procs import Channel, Registry, memory_kib, status_fields
from benchmarks.report import evaluation_section, markdown, plot, update_doc
from benchmarks.run import QUICK, main
from benchmarks.stats import format_ms, format_ratio, percentile, ratio, summarize

# -- statistics ------------------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]
    assert percentile(samples, 0.0) == 1.0
    assert percentile(samples, 1.0) == 4.0
    assert percentile(samples, 0.5) == pytest.approx(2.5)
    assert percentile(list(range(11)), 0.9) == pytest.approx(9.0)
    assert percentile([7.0], 0.9) == 7.0


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 0.5)
    with pytest.raises(ValueError, match="within"):
        percentile([1.0], 1.5)


def test_summary_and_ratio() -> None:
    summary = summarize([3.0, 1.0, 2.0, 10.0, 4.0])
    assert (summary.n, summary.median, summary.minimum, summary.maximum) == (5, 3.0, 1.0, 10.0)
    assert summary.p90 == pytest.approx(7.6)
    assert ratio(2.0, 4.0) == 0.5
    assert ratio(1.0, 0.0) is None
    assert ratio(math.inf, 1.0) is None


def test_formats() -> None:
    assert format_ms(None) == "—"
    assert format_ms(math.inf) == "never (∞)"
    assert format_ms(0.1234) == "0.123"
    assert format_ms(2.345) == "2.35"
    assert format_ms(23.45) == "23.4"
    assert format_ms(234.5) == "234"
    assert format_ratio(None) == "—"
    assert format_ratio(0.5) == "0.50x"
    assert format_ratio(150.0) == "150x"


# -- report and plot -------------------------------------------------------------------------


def _results() -> dict[str, object]:
    def series(samples: list[float], never: dict[str, float] | None = None) -> dict[str, object]:
        return {"samples_ms": samples, "failures": [], "never": never, "extra_ms": {}}

    return {
        "meta": {
            "mode": "quick",
            "date": "2026-01-01 00:00 UTC",
            "duration_s": 1.0,
            "load_average_at_end": "0.00 0.00 0.00",
            "machine": {
                "cpus": "2",
                "cpu_model": "test CPU",
                "memory": "1 kB",
                "kernel": "6.0",
                "python": "3.11.0 (/python)",
                "timeout": "timeout (GNU coreutils) 9.1",
                "tether": "0.1.0",
                "records_on": "ext4 on /",
                "load_average_at_start": "0.00 0.00 0.00",
            },
        },
        "latency": {
            "caller_death": {
                "tether run": series([0.5, 0.7, 0.9]),
                "timeout": series([], {"trials": 2, "alive": 2, "after_s": 0.5}),
            },
            "true": {"true": series([1.0, 1.2]), "tether run -- true": series([50.0, 60.0])},
        },
        "idle": [
            {
                "role": "seed door: supervisor",
                "window_s": 2.0,
                "delta": {
                    "cpu_ns": 0,
                    "cpu_ticks": 0,
                    "voluntary_ctxt_switches": 0,
                    "nonvoluntary_ctxt_switches": 0,
                },
                "memory_kib": {"VmHWM": 20480, "VmRSS": 20000, "Pss": 15000, "Pss_Anon": 12000},
            }
        ],
        "scale": [
            {
                "door": "seed door",
                "tethers": 2,
                "callers": "one holder",
                "all_running_ms": 250.0,
                "launched_at_once": True,
                "commands_gone": 2,
                "last_command_gone_ms": 12.0,
                "median_command_gone_ms": 11.0,
                "last_supervisor_gone_ms": 40.0,
                "records": 2,
                "records_parent_lost": 2,
                "supervisor_memory_kib": {"Pss": 30000, "VmRSS": 40000, "VmHWM": 41000},
            },
            {
                "door": "timeout",
                "tethers": 2,
                "callers": "one sh",
                "never": {"alive": 2, "after_s": 0.5},
            },
        ],
    }


def test_markdown_says_what_met_its_target() -> None:
    text = markdown(_results())
    assert (
        "| 1. caller SIGKILLed once the command runs → SIGTERM | tether run | 3 | 0.700 |" in text
    )
    assert "never (∞): 2 of 2 commands still running 0.5 s after the caller's death" in text
    assert "| 5. `true`: whole-run wall time | tether run -- true | 2 | 55.0 (+53.9) |" in text
    assert "| seed door: supervisor | 2 s | 0.000 | 0 | 0 | 0 | **yes** | 20.0 |" in text
    assert (
        "| seed door | 2 | one holder | 250 (at once) | — | 12.0 | 11.0 | 40.0 "
        "| 2 of 2 (2 parent_lost) |" in text
    )
    for line in text.splitlines():
        if line.startswith("| 1.") and "| tether run |" in line:
            assert line.endswith("| **yes** |")
    assert "| 5. `true`: overhead over a bare `true` | ≤ +100 | +53.9 | — | **yes** |" in text
    assert "| 7. peak RSS of a supervisor | ≤ 15 MiB | — | 20.0 MiB | **no** |" in text
    # A run from before the launch at once has no such column: a dash, not an error.
    assert "| timeout | 2 | one sh | — | never (∞)" in text
    assert "| 8. 2 callers SIGKILLed: last command gone | ≤ 1000, all records | — |" in text


def test_plot_is_an_svg_document_with_every_contender() -> None:
    svg = plot(_results())
    assert svg.startswith("<svg ")
    assert svg.rstrip().endswith("</svg>")
    assert "tether run -- true" in svg
    assert "never (∞)" in svg
    standalone = render_svg("t", [Panel("p", [Row("a", [0.001, 5000.0]), Row("b", [])], 1.0)])
    assert standalone.count("<circle") == 2
    assert "no samples" in standalone


def test_update_doc_replaces_only_between_markers(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text(
        "prose before\n<!-- bench:machine:begin -->\nSTALE\n<!-- bench:machine:end -->\n"
        "middle\n<!-- bench:results:begin -->\nSTALE\n<!-- bench:results:end -->\nprose after\n"
    )

    def write(path: Path, text: str) -> None:
        path.write_text(text)

    update_doc(doc, _results(), write)
    text = doc.read_text()
    assert text.startswith("prose before\n")
    assert text.endswith("prose after\n")
    assert "STALE" not in text
    assert "- CPU: 2 x test CPU" in text
    assert "| measure | contender |" in text


def test_report_from_saved_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(_results()))
    assert main(["--from-json", str(saved)]) == 0
    assert "| measure | contender |" in capsys.readouterr().out


# -- one tiny real measurement ---------------------------------------------------------------


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    registry = Registry()
    channel = Channel(tmp_path / "announce.fifo")
    (tmp_path / "records").mkdir()
    doors = Doors(registry, channel, tmp_path)
    yield Bench(registry, channel, doors, random.Random(6), lambda _message: None)
    leaked = registry.cleanup()
    channel.close()
    assert not leaked, f"processes left running: {leaked}"


def test_one_trial_of_each_latency_measure(bench: Bench) -> None:
    death = measures.caller_death(bench, trials=1, never_trials=1, never_after=0.3)
    assert len(death["tether run"].samples) == 1
    assert len(death["seed door"].samples) == 1
    assert death["timeout"].never == {"trials": 1, "alive": 1, "after_s": 0.3}
    # Killed as a user kills it: the shell that runs the caller, by its process group.
    assert "lifeline_end_heard_after_kill" in death["tether run"].extra
    idle = measures.caller_death(bench, trials=1, never_trials=0, never_after=0.3, moment="idle")
    assert len(idle["tether run"].samples) == len(idle["seed door"].samples) == 1
    overshoot, teardown = measures.deadline_and_teardown(bench, trials=1)
    escalation = measures.escalation(bench, trials=1, grace=0.1)
    for result in (overshoot, teardown, escalation, death, idle):
        for door, series in result.items():
            assert not series.failures, (door, series.failures)
    for result in (overshoot, teardown, escalation):
        assert all(len(series.samples) == 1 for series in result.values())
    assert not bench.registry.alive()


def test_true_and_spawn_trials(bench: Bench) -> None:
    wall = measures.true_wall(bench, trials=1)
    spawn = measures.spawn_to_running(bench, trials=1)
    for result in (wall, spawn):
        for variant, series in result.items():
            assert len(series.samples) == 1, (variant, series.failures)
            assert not series.failures


def test_idle_and_memory_run_and_clean_up(bench: Bench) -> None:
    idle = measures.idle_and_memory(bench, window=0.2)
    roles = {item["role"] for item in idle}
    assert {"tether run: supervisor", "seed door: supervisor", "timeout"} <= roles
    for item in idle:
        assert item["memory_kib"], item
    assert not bench.registry.alive()


def test_scale_runs_and_cleans_up(bench: Bench) -> None:
    scaled = measures.scale(bench, sizes=(2,), never_after=0.3)
    by_door = {item["door"]: item for item in scaled}
    for door in ("tether run", "seed door"):
        assert by_door[door]["records"] == 2
        assert by_door[door]["commands_gone"] == 2
    assert by_door["timeout"]["never"] == {"alive": 2, "after_s": 0.3}
    assert not bench.registry.alive()


def test_proc_readers_read_this_process() -> None:
    status = status_fields(os.getpid())
    assert status["VmRSS"] > 0
    assert "voluntary_ctxt_switches" in status
    assert memory_kib(os.getpid())["Pss"] > 0
    assert QUICK.mode == "quick"
    assert sys.executable


def test_one_trial_of_each_loop(bench: Bench) -> None:
    looped = {item["contender"]: item for item in loops(bench, shell_n=2, api_n=2, trials=1)}
    assert set(looped) == {
        "GNU timeout",
        "tether timeout (launcher)",
        "subprocess.run",
        "tether.run",
    }
    for item in looped.values():
        assert item["failures"] == [], item
        assert len(item["seconds"]) == 1  # type: ignore[arg-type]
    text = markdown({**_results(), "loops": list(looped.values())})
    assert "| shell | tether timeout (launcher) | 2 |" in text


def test_evaluation_counts_what_subprocess_leaves_and_kills_it(bench: Bench) -> None:
    hostile = ["setsid leaker", "closed stdout"]
    # No limits: the harness is under test, on hosts without a delegated cgroup too.
    pools = evaluation(
        bench, (2,), 1, size=2, big=16, out=1, hostile=hostile, timeout=1, limits=False
    )
    by_way = {item["way"]: item for item in pools}
    assert set(by_way) == {"subprocess.run", "tether.run", "tether.run_async"}
    for item in pools:
        assert "failure" not in item, item
        assert float(item["cpu_s"]) > 0  # type: ignore[arg-type]
    assert by_way["subprocess.run"]["left_behind"] == 1  # the setsid leaker's sleep
    assert by_way["subprocess.run"]["outcomes"] == {"passed": 2, "failed (1)": 1, "timed out": 1}
    assert by_way["tether.run"]["left_behind"] == by_way["tether.run_async"]["left_behind"] == 0
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and _has_marker(int(pid))]
    assert left == [], "the evaluation worker kills what it counted"
    table = "\n".join(evaluation_section(pools))
    assert "| `tether.run` | 2 |" in table


def _has_marker(pid: int) -> bool:
    try:
        return MARKER.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False

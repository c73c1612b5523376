"""The benchmark's command line: measure, print the tables, save the samples, plot.

``python -m benchmarks [--quick] [--only MEASURES] [--update-doc]``

A full run takes a few minutes and is what ``docs/performance.md`` quotes;
``--quick`` (fewer trials, a 2 s idle window, 50 tethers at scale) takes
under a minute and is for checking that the harness works. Whatever happens,
including Ctrl-C or SIGTERM, every process the run started is killed by pid
before it exits and its work directory is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import measures, output
from benchmarks.api import api_path
from benchmarks.doors import Doors
from benchmarks.evaluation import evaluation
from benchmarks.loops import loops
from benchmarks.measures import Bench, Series
from benchmarks.procs import Channel, Registry
from benchmarks.report import describe_machine, markdown, plot, update_doc

__all__ = ["Plan", "main"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "docs" / "performance.md"
DOC_PLOT = ROOT / "docs" / "performance" / "latency.svg"
MEASURES = (
    "caller_death",
    "deadline",
    "escalation",
    "true",
    "spawn",
    "idle",
    "scale",
    "api",
    "output",
    "loops",
    "evaluation",
)


@dataclass(frozen=True, slots=True)
class Plan:
    """How many trials of what: the difference between a full and a quick run."""

    mode: str
    trials: int
    never_trials: int
    never_after: float
    escalation_trials: int
    grace: float
    true_trials: int
    spawn_trials: int
    idle_window: float
    scale_sizes: tuple[int, ...]
    api_launches: int = 100
    output_trials: int = 10
    #: Measures 11 and 12: ``timeout 5 true`` calls in a shell loop, ``tether.run`` calls.
    shell_loop: int = 200
    api_loop: int = 100
    loop_trials: int = 3
    #: Measure 13: ordinary programs per pool (plus the 8 hostile), widths, rounds, MiB sizes.
    evaluation_size: int = 164
    evaluation_workers: tuple[int, ...] = (2, 8)
    evaluation_rounds: int = 3
    evaluation_big_mib: int = 2048
    evaluation_out_mib: int = 100


FULL = Plan("full", 20, 5, 2.0, 15, 0.2, 30, 20, 10.0, (100, 300))
QUICK = Plan(
    "quick",
    3,
    2,
    0.5,
    3,
    0.2,
    4,
    3,
    2.0,
    (50,),
    api_launches=20,
    output_trials=3,
    shell_loop=20,
    loop_trials=1,
    evaluation_size=8,
    evaluation_workers=(8,),
    evaluation_rounds=1,
    evaluation_big_mib=1024,
    evaluation_out_mib=8,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure tether (tether run and the seed door) against GNU timeout.",
    )
    parser.add_argument("--quick", action="store_true", help="a run of under a minute")
    parser.add_argument(
        "--only", default=",".join(MEASURES), help=f"comma-separated subset of {','.join(MEASURES)}"
    )
    parser.add_argument("--trials", type=int, help="trials per contender for the latency measures")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the records in a new run-* directory here (default: beside tether's, removed)",
    )
    parser.add_argument("--json", type=Path, help="raw samples (default: benchmarks/results/)")
    parser.add_argument("--svg", type=Path, help="the plot (default: beside the JSON file)")
    parser.add_argument("--seed", type=int, default=None, help="seed for the random deadlines")
    parser.add_argument(
        "--update-doc", action="store_true", help="paste the tables and plot into docs/"
    )
    parser.add_argument("--from-json", type=Path, help="report a saved run instead of measuring")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also run the copy of tether whose package is under PATH (a src/ directory), "
        "interleaved with this one, as contenders named 'tether run [NAME]' and "
        "'seed door [NAME]'; may be repeated",
    )
    return parser


def _interrupt(_number: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _default_workdir() -> Path:
    from tether.shared.paths import default_records_dir

    base = default_records_dir().parent
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(tempfile.mkdtemp(prefix="bench-", dir=base))


def _run_directory(workdir: Path) -> Path:
    """A fresh directory for this run's records inside ``workdir``, kept afterwards.

    ``workdir`` may hold earlier runs: each gets its own ``run-*`` directory,
    never a name that already exists.
    """
    workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(tempfile.mkdtemp(prefix="run-", dir=workdir))


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _series(result: dict[str, Series]) -> dict[str, object]:
    return {name: series.as_json() for name, series in result.items()}


def measure(
    plan: Plan, only: set[str], workdir: Path, seed: int | None, compare: dict[str, str]
) -> dict[str, Any]:
    """Run the measures in ``only``; return the results document."""
    registry = Registry()
    channel = Channel(workdir / "announce.fifo")
    (workdir / "records").mkdir(mode=0o700)
    doors = Doors(registry, channel, workdir)
    bench = Bench(registry, channel, doors, random.Random(seed), _say, compare)
    latency: dict[str, object] = {}
    results: dict[str, Any] = {
        "latency": latency,
        "idle": [],
        "scale": [],
        "api": [],
        "loops": [],
        "evaluation": [],
    }
    try:
        if "caller_death" in only:
            for key, moment in (("caller_death", "at once"), ("caller_death_idle", "idle")):
                _say(f"1. caller SIGKILLed ({moment}) -> SIGTERM")
                latency[key] = _series(
                    measures.caller_death(
                        bench, plan.trials, plan.never_trials, plan.never_after, moment
                    )
                )
        if "deadline" in only:
            _say("2, 3. deadline overshoot and teardown")
            overshoot, teardown = measures.deadline_and_teardown(bench, plan.trials)
            latency["overshoot"], latency["teardown"] = _series(overshoot), _series(teardown)
        if "escalation" in only:
            _say("4. escalation")
            latency["escalation"] = _series(
                measures.escalation(bench, plan.escalation_trials, plan.grace)
            )
        if "spawn" in only:
            _say("5. spawn -> running")
            latency["spawn"] = _series(measures.spawn_to_running(bench, plan.spawn_trials))
        if "true" in only:
            _say("5. true")
            latency["true"] = _series(measures.true_wall(bench, plan.true_trials))
        if "idle" in only:
            _say("6, 7. idle and memory")
            results["idle"] = measures.idle_and_memory(bench, plan.idle_window)
        if "scale" in only:
            _say("8. scale")
            results["scale"] = measures.scale(bench, plan.scale_sizes, plan.never_after)
        _throughput(bench, plan, only, results)
    finally:
        leaked = registry.cleanup()
        channel.close()
        if leaked:
            _say(f"killed {len(leaked)} leftover processes: {leaked}")
    return results


def _throughput(bench: Bench, plan: Plan, only: set[str], results: dict[str, Any]) -> None:
    """Measures 9 to 13: the API, output, loops of short runs, the evaluation workload."""
    if "api" in only:
        _say(f"9. the API: one caller, {plan.api_launches} launches, with and without a zygote")
        results["api"] = [
            api_path(bench, plan.api_launches, zygote=True),
            api_path(bench, plan.api_launches, zygote=False),
        ]
    if "output" in only:
        _say(f"10. {output.SIZE >> 20} MiB through stdout.read(), tether and subprocess")
        results["latency"]["output"] = _series(output.output_read(plan.output_trials))
    if "loops" in only:
        _say(f"11, 12. loops: {plan.shell_loop} x timeout 5 true, {plan.api_loop} x run(true)")
        results["loops"] = loops(bench, plan.shell_loop, plan.api_loop, plan.loop_trials)
    if "evaluation" in only:
        _say(f"13. evaluation: {plan.evaluation_size} + 8 hostile programs per pool")
        results["evaluation"] = evaluation(
            bench,
            plan.evaluation_workers,
            plan.evaluation_rounds,
            size=plan.evaluation_size,
            big=plan.evaluation_big_mib,
            out=plan.evaluation_out_mib,
        )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return the exit status."""
    args = _parser().parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.trials:
        from dataclasses import replace

        plan = replace(plan, trials=args.trials, escalation_trials=args.trials)
    if args.from_json:
        results = json.loads(args.from_json.read_text())
    else:
        only = set(args.only.split(","))
        unknown = only - set(MEASURES)
        if unknown:
            _parser().error(f"unknown measures: {', '.join(sorted(unknown))}")
        for number in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, _interrupt)
        _raise_fd_limit()
        workdir = _run_directory(args.workdir) if args.workdir else _default_workdir()
        began, date = time.monotonic(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        meta = {"mode": plan.mode, "date": date, "plan": _plan(plan), "compare": args.compare}
        meta["machine"] = describe_machine(workdir)
        try:
            results = measure(plan, only, workdir, args.seed, _alternatives(args.compare))
        except KeyboardInterrupt:
            _say("interrupted: every process started was killed")
            return 130
        finally:
            if args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
        meta["duration_s"] = time.monotonic() - began
        meta["load_average_at_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        results = {"meta": meta, **results}
        default = "compare" if args.compare else "latest" if plan.mode == "full" else "quick"
        path = args.json or RESULTS / f"{default}.json"
        _write(path, json.dumps(results, indent=1) + "\n")
        _say(f"raw samples: {path}")
        svg = args.svg or path.with_suffix(".svg")
        _write(svg, plot(results))
        _say(f"plot: {svg}")
    print(markdown(results))
    if args.update_doc:
        update_doc(DOC, results, _write)
        _write(DOC_PLOT, plot(results))
        _say(f"updated {DOC} and {DOC_PLOT}")
    return 0


def _alternatives(pairs: list[str]) -> dict[str, str]:
    alternatives = {}
    for pair in pairs:
        name, _, path = pair.partition("=")
        if not name or not path or not Path(path, "tether").is_dir():
            _parser().error(f"--compare {pair}: want NAME=PATH, PATH a directory holding tether/")
        alternatives[name] = str(Path(path).resolve())
        _compile(Path(path, "tether"))
    return alternatives


def _compile(package: Path) -> None:
    """Compile a compared copy of tether, as an installed one is.

    An uncompiled copy recompiles every module on every start where
    ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it): seen, a
    "before" whose spawn took 443 ms against 174 ms compiled, which measures
    the compiler, not the patch.
    """
    import compileall

    if not compileall.compile_dir(str(package), quiet=1):
        _parser().error(f"--compare: {package} does not compile")


def _plan(plan: Plan) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(plan)

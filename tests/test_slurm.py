"""tether inside Slurm jobs, on a real single-node Slurm (``tests/slurm_cluster.py``).

Each ``ProctrackType`` is one cluster (the daemons restart between them): ``proctrack/pgid``
and ``proctrack/linuxproc`` with ``TaskPlugin=task/none``, and ``proctrack/cgroup`` with
``task/cgroup`` (cgroup v1, the job's ``--mem`` a kernel limit). A job runs the tree of
``fixtures/escapees.sh`` (a plain, a ``setsid`` and a double-forked child, each announcing its
pid); when Slurm stops the job (``scancel``, the time limit) no process of the tree may survive
under tether, and its record says why. Without tether, the escapes Slurm misses are shown too.
The job scripts are the ones of ``docs/cluster.md``, found there by their ``--job-name`` (the
Python one is fenced ``py``, not ``python``: ``tests/test_cluster_docs.py`` runs every
``python`` block of that page, on Ray). Skipped where Slurm is not installed; under
``CI=true`` that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    EVENTS_SUFFIX,
    FIXTURES,
    ROOT,
    Processes,
    ReadyPipe,
    alive,
    read_json,
    tether_argv,
    wait_gone,
)
from slurm_cluster import KILL_WAIT, URGENT, Slurm, start_or_skip
from tether.linux.cgroup1 import parse_v1_mounts

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

TREE = FIXTURES / "escapees.sh"
#: The escapees fixture starts four processes: itself and three children.
TREE_SIZE = 4
#: Each ``ProctrackType`` with the ``TaskPlugin`` it runs beside.
CLUSTERS = {
    "proctrack/pgid": "task/none",
    "proctrack/linuxproc": "task/none",
    "proctrack/cgroup": "task/cgroup",
}
#: slurmctld looks for jobs past their time limit every 30 s (``PERIODIC_TIMEOUT`` in its
#: source, not a setting): a job whose end is put in the past ends within this.
TIME_LIMIT_CHECK = 30
#: The grace of the job scripts in ``docs/cluster.md`` (``--grace 2s``, ``grace=2``).
GRACE = 2.0


def doc_script(job_name: str) -> str:
    """The job script of ``docs/cluster.md`` whose ``#SBATCH --job-name`` is ``job_name``."""
    text = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    (block,) = [b for b in blocks if f"\n#SBATCH --job-name={job_name}\n" in b]
    return str(block)


def write_script(tmp_path: Path, name: str, text: str) -> Path:
    script = tmp_path / name
    script.write_text(text)
    script.chmod(0o755)
    return script


def plain_script(tmp_path: Path) -> Path:
    """A job script that runs its arguments without tether."""
    return write_script(tmp_path, "plain.sh", '#!/bin/sh\nexec "$@"\n')


@pytest.fixture(scope="module", params=list(CLUSTERS), ids=lambda p: p.split("/")[1])
def slurm(request: pytest.FixtureRequest) -> Iterator[Slurm]:
    with start_or_skip(request.param, CLUSTERS[request.param]) as running:
        yield running


@pytest.fixture
def records(slurm: Slurm, tmp_path: Path) -> Path:
    """The shared record directory the job scripts write to (``$RECORDS``), with this
    checkout's ``tether`` and ``python3`` first on the jobs' ``PATH``."""
    bin_dir = str(Path(sys.executable).parent)
    if not slurm.env["PATH"].startswith(bin_dir + ":"):
        slurm.env["PATH"] = f"{bin_dir}:{slurm.env['PATH']}"
    slurm.env["RECORDS"] = str(tmp_path / "records")
    return tmp_path / "records"


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


def tree(tmp_path: Path, name: str = "tree", *, stubborn: bool = False) -> tuple[list[str], Path]:
    """The escapees' command line, announcing in ``tmp_path/<name>.pids``; ``stubborn``: one
    that ignores SIGTERM."""
    pids = tmp_path / f"{name}.pids"
    return ["sh", str(TREE), str(pids), *(["stubborn"] if stubborn else [])], pids


def wait_tree(pids: Path) -> dict[int, str]:
    wait_until(lambda: len(announced(pids)) >= TREE_SIZE, "the tree's pids")
    return announced(pids)


def job_ended(slurm: Slurm, job: str, timeout: float = BOUND + KILL_WAIT) -> str:
    """Wait for the job's end; return its final state (``jobcomp/filetxt``)."""
    wait_until(lambda: slurm.job_state(job) is not None, f"job {job} to end", timeout)
    state = slurm.job_state(job)
    assert state is not None
    return state


def submit(
    slurm: Slurm, tmp_path: Path, script: Path, *command: str, options: tuple[str, ...] = ()
) -> str:
    """Submit ``script`` with ``command`` (its output in ``job-<id>.out``) and sbatch's
    ``options``; return the job id."""
    os.chmod(tmp_path, 0o755)
    output = slurm.run(
        "sbatch", "--parsable", f"--output={tmp_path}/job-%j.out", f"--chdir={tmp_path}",
        "--export=ALL", *options, str(script), *command,
    )  # fmt: skip
    return output.strip().split(";")[0]


def job_output(tmp_path: Path, job: str) -> str:
    try:
        return (tmp_path / f"job-{job}.out").read_text()
    except FileNotFoundError:
        return ""


def kill_survivors(pids: dict[int, str]) -> set[str]:
    """Kill (by pid) what is left of the tree; return the names of the survivors."""
    survivors = {pid: name for pid, name in pids.items() if alive(pid)}
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
    return set(survivors.values())


def assert_all_gone(slurm: Slurm, pids: dict[int, str]) -> None:
    survivors = {pid: name for pid, name in pids.items() if not wait_gone(pid, BOUND + KILL_WAIT)}
    assert survivors == {}, f"survived under {slurm.proctrack}: {survivors}"


def test_scancel_stops_the_whole_tree_under_tether(
    slurm: Slurm, records: Path, tmp_path: Path
) -> None:
    script = write_script(tmp_path, "evaluate.sh", doc_script("evaluate"))
    argv, pids_file = tree(tmp_path)
    job = submit(slurm, tmp_path, script, *argv)
    pids = wait_tree(pids_file)
    try:
        slurm.run("scancel", job)
        assert_all_gone(slurm, pids)
        record = records / f"job-{job}.json"
        wait_until(record.exists, "the record")
        assert read_json(record)["reason"] in ("cancelled", "parent_lost")
    finally:
        kill_survivors(pids)


#: What Slurm alone leaves running after it stops a job (measured, see ``docs/cluster.md``).
ESCAPES = {
    "proctrack/pgid": {"setsid"},
    "proctrack/linuxproc": {"doublefork"},
    "proctrack/cgroup": set(),
}


def test_without_tether_escapees_survive_scancel(slurm: Slurm, tmp_path: Path) -> None:
    script = plain_script(tmp_path)
    argv, pids_file = tree(tmp_path)
    job = submit(slurm, tmp_path, script, *argv)
    pids = wait_tree(pids_file)
    try:
        slurm.run("scancel", job)
        # Ended by its completion record: ``squeue -j`` fails once MinJobAge has purged the job.
        job_ended(slurm, job)
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
    record, name = tmp_path / "run.json", f"tether-{os.getpid()}"
    command, pids_file = tree(tmp_path)
    argv = [
        "srun", f"--job-name={name}", f"--chdir={tmp_path}", "--export=ALL",
        *tether_argv("run", "--grace", "2s", "--record", str(record), "--"), *command,
    ]  # fmt: skip
    step = subprocess.Popen(argv, env=slurm.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids: dict[int, str] = {}
    try:
        pids = wait_tree(pids_file)
        job = slurm.run("squeue", "-h", "-n", name, "-o", "%i").strip()
        slurm.run("scancel", job)
        assert_all_gone(slurm, pids)
        wait_until(record.exists, "the record")
        assert read_json(record)["reason"] in ("cancelled", "parent_lost")
    finally:
        if step.poll() is None:
            step.kill()
        step.communicate(timeout=BOUND)
        kill_survivors(pids)


def signal_times(record: dict[str, object]) -> dict[str, datetime]:
    """When the supervisor sent each signal (the first time), as wall-clock times.

    Slurm sends SIGCONT before its SIGTERM, and ``tether run`` passes it on: the record may
    list a SIGCONT first."""
    started = datetime.fromisoformat(str(record["started_at"]))
    sent = record["signals"]
    assert isinstance(sent, list)
    times: dict[str, datetime] = {}
    for entry in sent:
        times.setdefault(entry["signal"], started + timedelta(seconds=entry["at_seconds"]))
    return times


def written_at(record: Path) -> datetime:
    """When the record was written: its event log's ``record_written`` line."""
    lines = record.with_name(record.stem + EVENTS_SUFFIX).read_text().splitlines()
    (written,) = [event for event in map(json.loads, lines) if event["event"] == "record_written"]
    return datetime.fromisoformat(written["ts"])


def assert_stopped_with_grace(slurm: Slurm, pids: dict[int, str], path: Path) -> None:
    """The tree (one that ignores SIGTERM) is gone, and its record at ``path`` shows tether's
    stop: cancelled, SIGKILL after the grace, the record written before Slurm's SIGKILL."""
    assert_all_gone(slurm, pids)
    wait_until(path.exists, "the record")
    record = read_json(path)
    assert record["reason"] == "cancelled"
    assert record["escalated_to_sigkill"] is True
    sent = signal_times(record)
    assert GRACE <= (sent["SIGKILL"] - sent["SIGTERM"]).total_seconds() < KILL_WAIT
    assert (written_at(path) - sent["SIGTERM"]).total_seconds() < KILL_WAIT


@pytest.mark.timeout(TIME_LIMIT_CHECK + 90)
def test_the_time_limit_gives_the_tree_its_grace_and_the_record_beats_slurms_sigkill(
    slurm: Slurm, records: Path, tmp_path: Path
) -> None:
    """A job past its ``--time``: Slurm's SIGTERM, tether's grace, tether's SIGKILL, the record,
    all before Slurm's own SIGKILL ``KillWait`` seconds later.

    Both jobs' trees ignore SIGTERM, so only a SIGKILL ends them. The time limit is made short
    the legal way: ``scontrol update TimeLimit=0`` on the running jobs puts their end at their
    start (Slurm's smallest ``--time`` is a minute), and slurmctld's next time-limit check ends
    them, ``TIMEOUT``. The job without tether shows what Slurm alone leaves running.
    """
    evaluate = write_script(tmp_path, "evaluate.sh", doc_script("evaluate"))
    plain = plain_script(tmp_path)
    tethered_argv, tethered_file = tree(tmp_path, "tethered", stubborn=True)
    plain_argv, plain_file = tree(tmp_path, "plain", stubborn=True)
    tethered = submit(slurm, tmp_path, evaluate, *tethered_argv)
    untethered = submit(slurm, tmp_path, plain, *plain_argv)
    tethered_pids = wait_tree(tethered_file)
    plain_pids = wait_tree(plain_file)
    try:
        for job in (tethered, untethered):
            slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=0")
        bound = TIME_LIMIT_CHECK + KILL_WAIT + BOUND
        assert job_ended(slurm, tethered, bound) == "TIMEOUT"
        assert job_ended(slurm, untethered, bound) == "TIMEOUT"
        assert f"Time limit exhausted for JobId={tethered}" in slurm.log("slurmctld")
        assert_stopped_with_grace(slurm, tethered_pids, records / f"job-{tethered}.json")
        wait_until(
            lambda: sum(map(alive, plain_pids)) <= len(ESCAPES[slurm.proctrack]),
            "Slurm to stop what it tracks",
        )
    finally:
        kill_survivors(tethered_pids)
        survivors = kill_survivors(plain_pids)
    assert survivors == ESCAPES[slurm.proctrack]


def test_preemption_stops_the_whole_tree_under_tether(
    slurm: Slurm, records: Path, tmp_path: Path
) -> None:
    """A job preempted by one of a partition with a higher ``PriorityTier`` (``PreemptMode=
    CANCEL``, no ``GraceTime``): Slurm's SIGTERM, tether's grace and SIGKILL for a tree that
    ignores SIGTERM, the record, and the preempting job runs."""
    evaluate = write_script(tmp_path, "evaluate.sh", doc_script("evaluate"))
    argv, pids_file = tree(tmp_path, stubborn=True)
    low = submit(slurm, tmp_path, evaluate, *argv, options=("--exclusive",))
    pids = wait_tree(pids_file)
    try:
        urgent = submit(
            slurm, tmp_path, write_script(tmp_path, "true.sh", "#!/bin/sh\ntrue\n"),
            options=(f"--partition={URGENT}", "--exclusive"),
        )  # fmt: skip
        assert job_ended(slurm, low) == "PREEMPTED"
        assert_stopped_with_grace(slurm, pids, records / f"job-{low}.json")
        assert job_ended(slurm, urgent) == "COMPLETED"
    finally:
        kill_survivors(pids)


def job_processes(slurm: Slurm, job: str) -> set[int]:
    """The job's processes as Slurm tracks them (``scontrol listpids``), and their children."""
    listed = slurm.run("scontrol", "listpids", job).splitlines()[1:]
    pids = {int(line.split()[0]) for line in listed if line.split() and line.split()[0] != "-1"}
    children: set[int] = set()
    for pid in pids:
        for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                children.update(int(child) for child in tasks.read_text().split())
            except OSError:
                continue  # gone meanwhile
    return pids | children


def test_the_api_in_a_job_script_stops_the_tree_on_scancel(
    slurm: Slurm, records: Path, tmp_path: Path
) -> None:
    """``evaluate.py`` (``tether.launch`` in the job's Python) scancel'd: the tree, the
    supervisor and the job's own processes (the caller, its zygote) all end, and the record
    says ``cancelled``: the script takes Slurm's SIGTERM as Ctrl-C and waits for the run.

    A script that died of the SIGTERM instead would end its step at once, and Slurm then
    SIGKILLs what is left of the step's processes: under ``proctrack/cgroup`` the supervisor
    too, within milliseconds, and no record is written (measured, see ``docs/cluster.md``).
    """
    script = write_script(tmp_path, "evaluate.py", doc_script("evaluate-py"))
    argv, pids_file = tree(tmp_path)
    job = submit(slurm, tmp_path, script, *argv)
    pids = wait_tree(pids_file)
    wait_until(lambda: "supervisor " in job_output(tmp_path, job), "the job's first line")
    supervisor = int(job_output(tmp_path, job).split()[1].rstrip(","))
    everything = {**pids, supervisor: "supervisor"}
    everything.update({pid: "job" for pid in job_processes(slurm, job) if pid not in everything})
    try:
        slurm.run("scancel", job)
        assert_all_gone(slurm, everything)
        record = records / f"job-{job}.json"
        wait_until(record.exists, "the record")
        data = read_json(record)
        assert data["reason"] == "cancelled"
        assert data["supervisor_pid"] == supervisor
        assert data["variant"] == "evaluate-py"
        wait_until(lambda: slurm.job_state(job) is not None, "the job to end")
        assert "cancelled -15" in job_output(tmp_path, job).splitlines()
    finally:
        kill_survivors(everything)


def evaluate_case(tmp_path: Path, fifo: Path) -> None:
    """The ``./evaluate-case`` of ``cases.sh``: case ``hog`` writes down its cgroups and then
    fills memory (``fixtures/hog.py``, announcing on ``fifo``), a number is its exit status."""
    write_script(
        tmp_path,
        "evaluate-case",
        f"""#!/bin/sh
if [ "$1" = hog ]; then
    cat /proc/self/cgroup > cgroup-hog
    exec {sys.executable} {FIXTURES / "hog.py"} memory {fifo}
fi
exit "$1"
""",
    )


def test_memory_max_inside_a_job_ends_the_case_not_the_job(
    slurm: Slurm, records: Path, tmp_path: Path, ready: ReadyPipe, processes: Processes
) -> None:
    """``cases.sh`` runs a case over its 256 MiB, then one more, in a job of 1 GiB: the OOM
    killer ends the case's whole tree (its record: ``oom_killed``), the job goes on and ends
    ``COMPLETED``. Under ``task/cgroup`` the case's cgroup is inside the job's."""
    script = write_script(tmp_path, "cases.sh", doc_script("cases"))
    evaluate_case(tmp_path, ready.path)
    job = submit(slurm, tmp_path, script, "hog", "0")
    assert job_ended(slurm, job) == "COMPLETED"
    output = job_output(tmp_path, job)
    if "case hog: exit status 125" in output and "swap" in output:  # refused before it ran
        pytest.skip(f"this machine has swap but no swap accounting: {output.strip()}")
    leader, sibling = ready.ready_pids()  # written before the hog began to fill its memory
    processes.track(leader, sibling)
    assert "case hog: exit status 137" in output
    hog = read_json(records / f"job-{job}-case-hog.json")
    assert hog["reason"] == "completed"
    assert hog["oom_killed"] is True
    assert hog["eval_exit_code"] == -9
    assert hog["limits"] == {
        "cpu_max": None, "memory_max": 256 * 2**20, "memory_swap_max": 0, "pids_max": None,
    }  # fmt: skip
    assert not alive(sibling)
    after = read_json(records / f"job-{job}-case-0.json")
    assert (after["reason"], after["eval_exit_code"]) == ("completed", 0)
    memory = next(
        line.split(":", 2)[2]
        for line in (tmp_path / "cgroup-hog").read_text().splitlines()
        if line.split(":")[1] == "memory"
    )
    assert memory.rsplit("/", 1)[1].startswith("tether-")
    if slurm.task == "task/cgroup":
        assert f"/job_{job}/" in memory
        assert "job: alloc=1024MB mem.limit=1024MB" in slurm.log("slurmd")
        # tether removed the run's cgroup from inside the task's, so Slurm could remove the job's.
        job_cgroup = memory_mount() + memory[: memory.index(f"/job_{job}/") + len(f"/job_{job}")]
        wait_until(lambda: not os.path.exists(job_cgroup), f"Slurm to remove {job_cgroup}")


def memory_mount() -> str:
    """Where the cgroup v1 ``memory`` hierarchy is mounted."""
    mounts = parse_v1_mounts(Path("/proc/self/mountinfo").read_text())
    (point,) = [point for controllers, _, point in mounts if "memory" in controllers]
    return point


def test_records_of_many_jobs_are_listed_together(
    slurm: Slurm, records: Path, tmp_path: Path
) -> None:
    """Three jobs (two ``cases.sh``, one ``evaluate.sh``) write into one ``$RECORDS``;
    ``tether ls`` lists every run of them, each with its own outcome."""
    cases = write_script(tmp_path, "cases.sh", doc_script("cases"))
    evaluate = write_script(tmp_path, "evaluate.sh", doc_script("evaluate"))
    evaluate_case(tmp_path, tmp_path / "unused.fifo")
    first = submit(slurm, tmp_path, cases, "0", "3")
    second = submit(slurm, tmp_path, cases, "1")
    third = submit(slurm, tmp_path, evaluate, "sh", "-c", "exit 4")
    states = [job_ended(slurm, job) for job in (first, second, third)]
    assert states == ["COMPLETED", "COMPLETED", "FAILED"]  # cases.sh goes on; exit 4 fails
    listed = subprocess.run(
        tether_argv("ls", "--json", str(records)), capture_output=True, text=True, timeout=BOUND,
        check=True,
    )  # fmt: skip
    runs = {Path(run["record_path"]).name: run for run in json.loads(listed.stdout)}
    outcomes = {name: (run["reason"], run["eval_exit_code"]) for name, run in runs.items()}
    assert outcomes == {
        f"job-{first}-case-0.json": ("completed", 0),
        f"job-{first}-case-3.json": ("completed", 3),
        f"job-{second}-case-1.json": ("completed", 1),
        f"job-{third}.json": ("completed", 4),
    }
    labelled = subprocess.run(
        tether_argv("ls", "--label", "case-*", str(records)), capture_output=True, text=True,
        timeout=BOUND, check=True,
    ).stdout  # fmt: skip
    assert set(re.findall(r"job-\S+\.json", labelled)) == set(outcomes) - {f"job-{third}.json"}

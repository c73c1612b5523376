"""tether inside Ray: on a local Ray cluster this module starts, tasks and actors run tethered
commands, one task is force-cancelled, and the outcomes and records come home.

Skipped where Ray is not installed (``pip install 'tether[ray]'``; the tox
environment ``ray`` has it). The cluster is local and bounded: two CPUs, no
dashboard, no usage statistics, its own temporary directory, a scratch home
(Ray writes an authentication token there), started once for the module and
shut down by the last test, which then checks by pid, through ``/proc``, that
nothing Ray or tether started is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tether[ray]')")

import tether  # noqa: E402
import tether.ray  # noqa: E402
from conftest import (  # noqa: E402
    BOUND,
    ReadyPipe,
    alive,
    parent_of,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.caller.request import limits_refusal  # noqa: E402

pytestmark = pytest.mark.timeout(240)

#: Every pid a test here learned of: checked gone after ray.shutdown(), killed if not.
SEEN: set[int] = set()


def descendants(root: int) -> set[int]:
    """Every process below ``root``, from the parent pids in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = Path(f"/proc/{entry}/stat").read_text()
            children.setdefault(int(raw[raw.rindex(")") + 2 :].split()[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def remember(*runs: tether.ray.RayRun) -> None:
    for run in runs:
        SEEN.update(pid for pid in (run.outcome.pid, run.outcome.supervisor_pid) if pid)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    """A local Ray cluster of two CPUs; yields the records directory its tasks write to."""
    scratch = Path(tempfile.mkdtemp(prefix="tether-ray-"))
    saved = dict(os.environ)
    os.environ.update(
        HOME=str(scratch / "home"),
        XDG_STATE_HOME=str(scratch / "state"),
        RAY_USAGE_STATS_ENABLED="0",
    )
    before = descendants(os.getpid())
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _temp_dir=str(scratch / "ray"),
            log_to_driver=False,
            configure_logging=False,
        )
        SEEN.update(descendants(os.getpid()) - before)
        yield scratch / "state" / "tether" / "runs"
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved)
        for pid in SEEN:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)


def test_twenty_tasks_bring_outcomes_output_and_records_home(cluster: Path, tmp_path: Path) -> None:
    run = tether.ray.remote(num_cpus=1)
    script = 'echo "case $0"; echo oops >&2; exit $(($0 % 3))'
    refs = [
        run.remote(["sh", "-c", script, str(n)], deadline="2m", label=f"case-{n}", text=True)
        for n in range(20)
    ]
    runs: list[tether.ray.RayRun] = ray.get(refs, timeout=120)
    remember(*runs)
    assert [r.outcome.returncode for r in runs] == [n % 3 for n in range(20)]
    assert [r.outcome.stdout for r in runs] == [f"case {n}\n" for n in range(20)]
    assert {r.outcome.stderr for r in runs} == {"oops\n"}
    for n, result in enumerate(runs):
        assert result.outcome.reason is tether.Reason.COMPLETED
        assert result.outcome.label == f"case-{n}"
        assert result.hostname == os.uname().nodename
        assert result.node_id == ray.get_runtime_context().get_node_id()
        assert result.record is not None
        validate_record(result.record)
        assert result.record["reason"] == "completed"
        assert result.record["variant"] == f"case-{n}"
        assert result.record["hostname"] == result.hostname
        assert result.events is None  # not asked for
        # The task's one CPU is a limit where this node can enforce it, and said so where not.
        if result.limits_skipped is None:
            assert result.limits == {"cpu_max": 1.0}
            assert result.record["limits"] == {**dict.fromkeys(("memory_max",
                "memory_swap_max", "pids_max")), "cpu_max": 1.0}  # fmt: skip
        else:
            assert "cannot enforce" in result.limits_skipped
            assert result.limits == {}
            assert result.record.get("limits") is None

    gathered = tmp_path / "gathered"
    written = tether.ray.write_records(runs, gathered)
    assert len(written) == 20
    assert {p.name for p in written} == {r.record_name for r in runs}
    assert tether.ray.write_records(runs, gathered) == []  # the same records: already there
    listing = subprocess.run(
        tether_argv("ls", str(gathered), "--json"), capture_output=True, text=True, timeout=BOUND
    )
    assert listing.returncode == 0, listing.stderr
    assert sorted(r["variant"] for r in json.loads(listing.stdout)) == sorted(
        f"case-{n}" for n in range(20)
    )
    shown = subprocess.run(
        tether_argv("show", str(written[0])), capture_output=True, text=True, timeout=BOUND
    )
    assert shown.returncode == 0, shown.stderr
    assert os.uname().nodename in shown.stdout


def test_a_force_cancelled_task_stops_its_tree_and_records_parent_lost(
    cluster: Path, tmp_path: Path
) -> None:
    ready = ReadyPipe(tmp_path / "ready.fifo")
    record = tmp_path / "cancelled.json"
    # The detached child announces itself once it is in its own session.
    command = f"setsid sh -c 'echo \"ready $$\" > {ready.path}; exec sleep 300' & wait"
    ref = tether.ray.remote(max_retries=0).remote(
        ["sh", "-c", command], record=str(record), label="cancel-me", events=True
    )
    (detached,) = ready.ready_pids(timeout=60)
    shell = parent_of(detached)
    assert shell is not None
    supervisor = parent_of(shell)
    assert supervisor is not None
    SEEN.update({shell, detached, supervisor})
    assert alive(shell)
    assert alive(detached)
    assert os.getsid(detached) == detached  # its own session: outside the command's group

    cancelled_at = time.monotonic()
    ray.cancel(ref, force=True)
    for pid in (shell, detached, supervisor):
        assert wait_gone(pid, BOUND), f"pid {pid} still running after the task was killed"
    print(f"tree and supervisor gone {time.monotonic() - cancelled_at:.3f}s after ray.cancel")
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=BOUND)
    ready.close()

    left = json.loads(record.read_text())
    validate_record(left)
    assert left["reason"] == "parent_lost"
    assert left["descendants_stopped"] >= 1
    # The task never returned, so the driver fetches the record from the node.
    found = tether.ray.collect_records(tmp_path, label="cancel-me", events=True)
    assert [(f.record_name, f.record["reason"]) for f in found] == [
        ("cancelled.json", "parent_lost")
    ]
    assert found[0].events is not None
    assert b"parent_lost" in found[0].events or b"caller_lost" in found[0].events


def test_deadlines_inside_tasks(cluster: Path) -> None:
    run = tether.ray.remote()
    slow = run.remote(["sleep", "30"], deadline=0.5, grace=2, label="slow")
    failing = run.remote(["sh", "-c", "echo no >&2; exit 3"], check=True, label="failing")
    result: tether.ray.RayRun = ray.get(slow, timeout=60)
    remember(result)
    assert result.outcome.reason is tether.Reason.DEADLINE_EXCEEDED
    assert result.outcome.exit_status == 124
    assert result.record is not None
    assert result.record["reason"] == "deadline_exceeded"
    with pytest.raises(ray.exceptions.RayTaskError) as caught:
        ray.get(failing, timeout=60)
    failure = caught.value.cause
    assert isinstance(failure, tether.CommandFailed)  # pickled home whole, with its outcome
    assert failure.outcome.returncode == 3
    assert failure.stderr == b"no\n"


def test_required_limits_are_enforced_or_the_task_is_refused(cluster: Path) -> None:
    ref = tether.ray.remote(num_cpus=1).remote(["true"], limits="require", record=False)
    problem = limits_refusal({"cpu_max": 1.0})
    if problem is None:
        result: tether.ray.RayRun = ray.get(ref, timeout=60)
        remember(result)
        assert result.limits == {"cpu_max": 1.0}
        assert result.outcome.ok
    else:
        with pytest.raises(ray.exceptions.RayTaskError) as caught:
            ray.get(ref, timeout=60)
        assert isinstance(caught.value.cause, tether.LaunchError)
        assert caught.value.cause.exit_status == 125
        assert "cannot enforce" in str(caught.value.cause)


@ray.remote
class Evaluator:
    """A sync actor: one method call at a time, each a tethered command."""

    def evaluate(self, n: int) -> tether.ray.RayRun:
        return tether.ray.run(["sh", "-c", f"echo {n}"], record=False, limits="off")

    def hang(self, fifo: str) -> tether.ray.RayRun:
        return tether.ray.run(["sh", "-c", f'echo "ready $$" > {fifo}; exec sleep 300'])


@ray.remote
class AsyncEvaluator:
    """An async actor: many calls at once on its event loop."""

    async def evaluate(self, n: int) -> tether.ray.RayRun:
        return await tether.ray.run_async(["sh", "-c", f"sleep 0.2; echo {n}"], text=True)

    async def hang(self, fifo: str) -> tether.ray.RayRun:
        return await tether.ray.run_async(
            ["sh", "-c", f'echo "ready $$" > {fifo}; exec sleep 300'], grace=5
        )


def test_a_sync_actor_runs_commands_and_its_death_stops_them(cluster: Path, tmp_path: Path) -> None:
    actor = Evaluator.remote()  # type: ignore[attr-defined]
    results: list[tether.ray.RayRun] = ray.get(
        [actor.evaluate.remote(n) for n in range(3)], timeout=60
    )
    remember(*results)
    assert [r.outcome.stdout for r in results] == [b"0\n", b"1\n", b"2\n"]

    ready = ReadyPipe(tmp_path / "ready.fifo")
    ref = actor.hang.remote(str(ready.path))
    (command,) = ready.ready_pids(timeout=60)
    supervisor = parent_of(command)
    assert supervisor is not None
    SEEN.update({command, supervisor})
    ray.kill(actor)  # the actor's process is killed outright
    assert wait_gone(command, BOUND)
    assert wait_gone(supervisor, BOUND)  # it is gone once the record is written
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(ref, timeout=BOUND)
    ready.close()
    found = tether.ray.collect_records()
    lost = [f.record for f in found if f.record.get("eval_pid") == command]
    assert [r["reason"] for r in lost] == ["parent_lost"]


def test_an_async_actor_runs_commands_at_once_and_cancels_one(
    cluster: Path, tmp_path: Path
) -> None:
    actor = AsyncEvaluator.options(max_concurrency=8).remote()  # type: ignore[attr-defined]
    results: list[tether.ray.RayRun] = ray.get(
        [actor.evaluate.remote(n) for n in range(6)], timeout=60
    )
    remember(*results)
    assert [r.outcome.stdout for r in results] == [f"{n}\n" for n in range(6)]

    ready = ReadyPipe(tmp_path / "ready.fifo")
    ref = actor.hang.remote(str(ready.path))
    (command,) = ready.ready_pids(timeout=60)
    supervisor = parent_of(command)
    assert supervisor is not None
    SEEN.update({command, supervisor})
    ray.cancel(ref)  # an async actor's task: its coroutine is cancelled, the command with it
    assert wait_gone(command, BOUND)
    assert wait_gone(supervisor, BOUND)
    with pytest.raises((ray.exceptions.TaskCancelledError, asyncio.CancelledError)):
        ray.get(ref, timeout=BOUND)
    ready.close()
    found = tether.ray.collect_records()
    stopped = [f.record for f in found if f.record.get("eval_pid") == command]
    assert [r["reason"] for r in stopped] == ["cancelled"]
    ray.kill(actor)


def test_nothing_is_left_running_after_shutdown(cluster: Path) -> None:
    SEEN.update(descendants(os.getpid()))
    assert SEEN, "the cluster's processes were found"
    ray.shutdown()
    left = [pid for pid in SEEN if not wait_gone(pid, BOUND)]
    assert left == [], [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left if alive(pid)]


def test_import_tether_does_not_import_ray() -> None:
    program = (
        "import sys, tether, tether.ray\n"
        "tether.run(['true'], record=False)\n"
        "tether.ray.mapped_limits({'CPU': 2.0})\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr

"""Measure 13: an evaluation runner's workload, through ``subprocess.run`` and ``tether.run``.

N short untrusted programs, each ``python -c PROGRAM`` with a 3 s timeout: ordinary
ones, and the hostile ones of issue 36 (an infinite loop, a ``setsid`` leaker, a
double-forked daemon, a bounded fork bomb, a large allocation, closed stdout,
SIGTERM ignored, lots of output). Each way runs them 2 and 8 at a time, in a
fresh worker process (``python -m benchmarks.evaluation``) that is a child
subreaper: everything the run orphans comes back to it, so that when it has
killed what was left (by pidfd) and reaped everything, ``RUSAGE_SELF`` plus
``RUSAGE_CHILDREN`` is the CPU of the whole tree, supervisors, zygote and
commands included. Processes left behind are the processes still alive once
the pool is done that carry the run's marker in their environment (every
program gets it); they are counted first, then killed by pid.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "PROGRAMS", "WAYS", "evaluation", "programs"]

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 3.0
MARKER = "TETHER_BENCH_EVALUATION"
WAYS = ("subprocess.run", "tether.run", "tether.run_async")
LIMITS = {"memory_max": "512M", "pids_max": 64}

#: Ordinary short programs: what most of a code-evaluation workload is.
ORDINARY = (
    "print(sum(range(10**5)))",
    "import json; print(json.dumps(sorted({'b': 1, 'a': [3, 2, 1]}.items())))",
    "def f(n): return n if n < 2 else f(n - 1) + f(n - 2)\nassert f(20) == 6765",
    "import re; assert re.fullmatch(r'[a-z]+', 'abc')",
    "assert sorted([3, 1, 2]) == [1, 2, 3]; print('ok')",
    "assert 1 + 1 == 3, 'a wrong answer'",
    "import collections; print(collections.Counter('evaluation').most_common(2))",
    "print(''.join(reversed('tether')))",
)

#: The hostile programs; ``{big}`` and ``{out}`` are sizes in MiB.
HOSTILE = {
    "infinite loop": "while True: pass",
    "setsid leaker": (
        "import subprocess; subprocess.Popen(['sleep', '60'], start_new_session=True)"
    ),
    "double-forked daemon": (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '60'])\n    os._exit(0)\nos.wait()"
    ),
    "bounded fork bomb": (
        "import os, time\nfor _ in range(200):\n    try:\n        if os.fork() == 0:\n"
        "            time.sleep(60)\n            os._exit(0)\n    except OSError:\n"
        "        break\ntime.sleep(60)"
    ),
    "large allocation": "b = b'x' * ({big} << 20); print(len(b))",
    "closed stdout": "import os; os.close(1); os.write(1, b'lost')",
    "SIGTERM ignored": (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    ),
    "lots of output": "import sys; sys.stdout.buffer.write(b'x' * ({out} << 20))",
}
PROGRAMS = (*ORDINARY, *HOSTILE)


def programs(job: dict[str, Any]) -> list[tuple[str, str]]:
    """``job``'s ordinary programs, then its hostile ones (all by default): (name, source)."""
    size, big, out = job["size"], job["big"], job["out"]
    ordinary = [(f"ordinary {i}", ORDINARY[i % len(ORDINARY)]) for i in range(size)]
    names = job.get("hostile") or list(HOSTILE)
    return ordinary + [(name, HOSTILE[name].format(big=big, out=out)) for name in names]


# -- the parent's side ------------------------------------------------------------------


def evaluation(
    bench: Any, workers: tuple[int, ...], rounds: int, **job: object
) -> list[dict[str, object]]:
    """Every way at every width, ``rounds`` times, the ways' order rotating round by round.

    ``job``: ``size`` (ordinary programs), ``big`` and ``out`` (MiB), optionally
    ``hostile`` (names, default all), ``timeout`` (default 3 s) and ``limits`` (default on;
    a launch refused for want of a cgroup is an outcome of its own).
    """
    results: list[dict[str, object]] = []
    for turn in range(rounds):
        for width in workers:
            shift = turn % len(WAYS)
            for way in WAYS[shift:] + WAYS[:shift]:
                bench.say(f"  evaluation: round {turn + 1}, {way}, {width} at a time")
                pool = {**job, "way": way, "workers": width}
                results.append({**pool, "round": turn + 1, **_one_pool(bench, pool)})
    return results


def _one_pool(bench: Any, job: dict[str, object]) -> dict[str, object]:
    argv = [sys.executable, "-m", "benchmarks.evaluation", json.dumps(job)]
    popen = bench.registry.start(argv, cwd=str(ROOT), stdout=subprocess.PIPE)
    try:
        out, _ = popen.communicate(timeout=600)
    finally:
        bench.registry.cleanup()
    if popen.returncode != 0:
        return {"failure": f"worker exit status {popen.returncode}"}
    result: dict[str, object] = json.loads(out.decode().splitlines()[-1])
    return result


# -- the worker's side ---------------------------------------------------------------------


def _become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _pids_cgroup() -> Path | None:
    """The benchmark's own pids cgroup (``pids.max`` 64) for the fork bomb; ``None`` if none."""
    for base in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        where = base / f"tether-bench-{os.getpid()}"
        try:
            where.mkdir()
        except OSError:
            continue
        try:
            (where / "pids.max").write_text("64\n")
            return where
        except OSError:
            where.rmdir()
    return None


def _marked(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            if marker not in environ.read():
                return False
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _kill_by_pid(pids: list[int]) -> None:
    for pid in pids:
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)


def _leftovers(marker: bytes) -> list[int]:
    me = os.getpid()
    pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
    return [pid for pid in pids if pid != me and _marked(pid, marker)]


def _children() -> list[int]:
    kids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            kids += [int(p) for p in Path(f"/proc/self/task/{task}/children").read_text().split()]
    return kids


def _reap_everything(bound: float = 30.0) -> None:
    """Kill every child still running (the zygote, a spare) by pid, and reap all of them."""
    ends = time.monotonic() + bound
    while time.monotonic() < ends:
        _kill_by_pid(_children())
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        del pid


def _classify_subprocess(argv: list[str], env: dict[str, str], timeout: float) -> str:
    try:
        done = subprocess.run(argv, timeout=timeout, capture_output=True, env=env, check=False)
    except subprocess.TimeoutExpired:
        return "timed out"
    return "passed" if done.returncode == 0 else f"failed ({done.returncode})"


def _classify_outcome(outcome: Any) -> str:
    reason = str(getattr(outcome.reason, "value", outcome.reason))
    if reason != "completed":
        return reason
    return "passed" if outcome.returncode == 0 else f"failed ({outcome.returncode})"


def _tether_options(env: dict[str, str], timeout: float, limits: bool) -> dict[str, Any]:
    return {
        "deadline": timeout,
        "grace": 1,
        "capture_output": True,
        "record": False,
        "env": env,
        **(LIMITS if limits else {}),
    }


def _pool(job: dict[str, Any], env: dict[str, str], cgroup: Path | None) -> list[str]:
    work = programs(job)
    way, width, timeout = job["way"], job["workers"], job.get("timeout", TIMEOUT)
    options = _tether_options(env, timeout, job.get("limits", True))
    python = sys.executable

    def argv(name: str, source: str) -> list[str]:
        if way == "subprocess.run" and name == "bounded fork bomb" and cgroup is not None:
            join = f'echo $$ > {cgroup}/cgroup.procs && exec "$0" -c "$1"'
            return ["/bin/sh", "-c", join, python, source]
        return [python, "-c", source]

    if way == "tether.run_async":
        import asyncio

        import tether

        async def everything() -> list[str]:
            gate = asyncio.Semaphore(width)

            async def one(name: str, source: str) -> str:
                async with gate:
                    try:
                        outcome = await tether.run_async(argv(name, source), **options)
                    except tether.LaunchError as error:
                        return f"launch refused: {error}"
                    return _classify_outcome(outcome)

            return list(await asyncio.gather(*(one(n, s) for n, s in work)))

        return asyncio.run(everything())
    from concurrent.futures import ThreadPoolExecutor

    def one(pair: tuple[str, str]) -> str:
        if way == "subprocess.run":
            return _classify_subprocess(argv(*pair), env, timeout)
        import tether

        try:
            return _classify_outcome(tether.run(argv(*pair), **options))
        except tether.LaunchError as error:
            return f"launch refused: {error}"

    with ThreadPoolExecutor(width) as pool:
        return list(pool.map(one, work))


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def worker(job: dict[str, Any]) -> dict[str, object]:
    """Run one pool; return its wall time, tree CPU, outcomes and the processes left behind."""
    _become_subreaper()
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, MARKER: token}
    cgroup = _pids_cgroup() if job["way"] == "subprocess.run" else None
    if job["way"] != "subprocess.run":
        import tether  # noqa: F401 - loaded before the clock starts, as a runner has it loaded

    cpu_before = _cpu(resource.RUSAGE_SELF)
    began = time.monotonic()
    try:
        outcomes = _pool(job, env, cgroup)
        wall = time.monotonic() - began
        left = _leftovers(f"{MARKER}={token}".encode())
        _kill_by_pid(left)
    finally:
        _reap_everything()
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.rmdir()
    cpu = _cpu(resource.RUSAGE_SELF) - cpu_before + _cpu(resource.RUSAGE_CHILDREN)
    counts: dict[str, int] = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "left_behind": len(left),
        "outcomes": counts,
        "pids_cgroup": str(cgroup) if cgroup else None,
    }


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))), flush=True)

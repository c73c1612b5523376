"""Stress: concurrent limited launches of a short program beside a CPU hog, for minutes.

Issue 35 item 12: in 3,612 limited launches (an evaluation harness, two workers)
one raised ``LaunchError: resource limits, but the command could not join its
cgroup``, with no errno. This runs the same shape of load on this host and
prints every launch that failed, with its message and errno, and the totals:

    python scripts/stress_limited_launches.py --seconds 180 --workers 2 --hogs 1

Not part of the default suite (it takes minutes). Exit status 1 if any launch
failed. Each worker is a process of its own with the API's zygote, as a harness's
workers are.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time


def _hog() -> None:
    while True:
        pass


def _worker(seconds: float, queue: multiprocessing.Queue[str]) -> None:
    import tether

    end = time.monotonic() + seconds
    launches = 0
    failures: list[dict[str, object]] = []
    while time.monotonic() < end:
        launches += 1
        try:
            tether.run(["true"], memory_max="64M", pids_max=64, record=False)
        except tether.LaunchError as error:
            failures.append(
                {"message": str(error), "errno": error.errno, "at": launches, "pid": os.getpid()}
            )
            print(json.dumps(failures[-1]), file=sys.stderr, flush=True)
    queue.put(json.dumps({"launches": launches, "failures": failures}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hogs", type=int, default=1)
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    hogs = [context.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    queue: multiprocessing.Queue[str] = context.Queue()
    workers = [
        context.Process(target=_worker, args=(args.seconds, queue)) for _ in range(args.workers)
    ]
    try:
        for worker in workers:
            worker.start()
        results = [json.loads(queue.get(timeout=args.seconds + 120)) for _ in workers]
        for worker in workers:
            worker.join(60)
    finally:
        for hog in hogs:
            if hog.pid is not None:
                os.kill(hog.pid, signal.SIGKILL)
            hog.join(10)
    launches = sum(result["launches"] for result in results)
    failures = [failure for result in results for failure in result["failures"]]
    print(json.dumps({"launches": launches, "failed": len(failures), "failures": failures[:20]}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Measure 9, the API path: one long-lived caller launching N commands through ``tether.launch``.

An evaluation runner is one process that launches commands by the hundred.
The caller here is such a program: it launches one command first (the cold
launch: the zygote, if any, starts then), then N more one after the other,
timing each ``tether.launch`` call (it returns once the command runs), and
prints what it measured. The benchmark then

* reads when every command announced itself (``ready`` on the FIFO, stamped by
  the command as the first thing it does), for the time from the first warm
  launch to the last command running;
* waits until the supervisors are quiet and sums their PSS (and the
  zygote's, which they share pages with);
* SIGKILLs the caller, and waits for every command, every supervisor and the
  zygote to be gone, and counts the records that say ``parent_lost``.

It runs twice, with the zygote (the default) and with ``TETHER_ZYGOTE=0``
(every supervisor a fresh interpreter, as before the zygote), interleaved
with nothing else: the numbers are this machine's at that moment, and the
report says the load average.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from benchmarks.measures import BOUND, Bench, _ms, _record
from benchmarks.procs import Waiter, memory_kib, prompt, settle

__all__ = ["CALLER", "api_path"]

#: The caller: ``python -c CALLER FIFO RECORDS N ANNOUNCE``; prints one JSON line, then waits.
CALLER = r"""
import json, sys, time
import tether
from tether.caller import zygote

fifo, records, size, announce = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def command(token):
    return ["/bin/sh", announce, token, fifo]

handles = []
began = time.monotonic()
handles.append(tether.launch(command("api-cold"), record=f"{records}/api-cold.json"))
cold = time.monotonic() - began
latencies = []
warm_began = time.monotonic()
for i in range(size):
    before = time.monotonic()
    handles.append(tether.launch(command(f"api-{i}"), record=f"{records}/api-{i}.json"))
    latencies.append(time.monotonic() - before)
print(json.dumps({
    "cold_s": cold,
    "warm_began": warm_began,
    "all_launched_s": time.monotonic() - warm_began,
    "latencies_s": latencies,
    "zygote": zygote.zygote_pid(),
    "zygotes_started": zygote.started,
}), flush=True)
sys.stdin.read()
"""


def api_path(bench: Bench, size: int, *, zygote: bool) -> dict[str, object]:
    """One caller, ``size`` warm launches (and one cold); see the module."""
    result: dict[str, object] = {"zygote": zygote, "launches": size}
    env = {**os.environ}
    env.pop("TETHER_ZYGOTE", None)
    if not zygote:
        env["TETHER_ZYGOTE"] = "0"
    tokens = {"api-cold", *(f"api-{i}" for i in range(size))}
    waiter = Waiter(bench.channel)
    try:
        caller = _start_caller(bench, size, env)
        assert caller.stdout is not None
        said = json.loads(caller.stdout.readline() or "{}")
        if not said:
            result["error"] = "the caller said nothing"
            return result
        waiter.until(lambda: bench.channel.count("ready", tokens) == len(tokens), BOUND * 4)
        ready = [m for m in bench.channel.messages if m.kind == "ready" and m.token in tokens]
        result["announced"] = len(ready)
        result.update(_launch_times(said))
        supervisors = sorted({m.ppid for m in ready})
        watched = [f"command {m.pid}" for m in ready]
        for message in ready:
            waiter.watch(f"command {message.pid}", bench.registry.track(message.pid))
        zygote_pid = said.get("zygote")
        result.update(_memory(bench, supervisors, zygote_pid, caller.pid))
        for pid in supervisors:
            waiter.watch(f"supervisor {pid}", bench.registry.pidfd(pid))
            watched.append(f"supervisor {pid}")
        if zygote_pid:
            waiter.watch("zygote", bench.registry.pidfd(zygote_pid))
            watched.append("zygote")
        with prompt():
            asked = time.monotonic()
            caller.send_signal(signal.SIGKILL)
            waiter.until(lambda: all(name in waiter.gone for name in watched), BOUND * 2)
        gone = {name: waiter.gone[name] - asked for name in watched if name in waiter.gone}
        commands = [at for name, at in gone.items() if name.startswith("command")]
        result["commands_gone"] = len(commands)
        result["last_command_gone_ms"] = _ms(max(commands)) if commands else None
        result["everything_gone_ms"] = _ms(max(gone.values())) if gone else None
        result["zygote_gone"] = "zygote" in gone if zygote_pid else None
        result.update(_records(bench, tokens))
    finally:
        waiter.close()
        result["leftovers_killed"] = len(bench.registry.cleanup())
        bench.channel.forget(tokens)
    return result


def _start_caller(bench: Bench, size: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    doors = bench.doors
    return bench.registry.start(
        [
            doors.python,
            "-c",
            CALLER,
            str(bench.channel.path),
            str(doors.workdir / "records"),
            str(size),
            str(doors.sleeper("x")[1]),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


def _launch_times(said: dict[str, object]) -> dict[str, object]:
    latencies = sorted(float(x) for x in said["latencies_s"])  # type: ignore[attr-defined]
    return {
        "cold_launch_ms": _ms(float(said["cold_s"])),  # type: ignore[arg-type]
        "launch_median_ms": _ms(latencies[len(latencies) // 2]),
        "launch_p90_ms": _ms(latencies[int(len(latencies) * 0.9)]),
        "launch_max_ms": _ms(latencies[-1]),
        "all_launched_ms": _ms(float(said["all_launched_s"])),  # type: ignore[arg-type]
        "zygotes_started": said["zygotes_started"],
    }


def _memory(
    bench: Bench, supervisors: list[int], zygote_pid: object, caller: int
) -> dict[str, object]:
    """PSS of the supervisors (once quiet), of the zygote and of the caller, in KiB."""
    for pid in supervisors:
        bench.registry.track(pid)
    if isinstance(zygote_pid, int):
        bench.registry.track(zygote_pid)
    settle(supervisors, quiet=0.5, bound=BOUND * 4)
    pss = sorted(memory_kib(pid).get("Pss", 0) for pid in supervisors)
    return {
        "supervisors_pss_kib": sum(pss),
        "supervisor_pss_median_kib": pss[len(pss) // 2] if pss else 0,
        "zygote_pss_kib": memory_kib(zygote_pid).get("Pss", 0)
        if isinstance(zygote_pid, int)
        else 0,
        "caller_pss_kib": memory_kib(caller).get("Pss", 0),
    }


def _records(bench: Bench, tokens: set[str]) -> dict[str, object]:
    found = [_record(bench.doors.workdir / "records" / f"{token}.json") for token in tokens]
    return {
        "records": sum(1 for r in found if r is not None),
        "records_parent_lost": sum(
            1 for r in found if r is not None and r.get("reason") == "parent_lost"
        ),
    }


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run python -m benchmarks --only api")

"""Black-box check of tether's limits on one host context, run inside a guest of the VM host
matrix (``scripts/host-matrix``, docs/hosts.md) exactly as a user would: the README's Python
example with ``memory_max="64M"`` on a 400 MB allocation, ``tether run --pids-max 20`` on a
fork loop, ``tether run --cpus 0.5`` on a busy loop.

Around them it reads the caller's own cgroup (``cgroup.subtree_control``, ``cgroup.type``)
before and after, and looks for any ``tether-*`` cgroup left under /sys/fs/cgroup. It prints one
line ``TETHER-BLACKBOX {json}`` and exits 0 when the context did what it is expected to do:

* ``--expect enforce``: each limit is enforced (an OOM-killed outcome, forks refused at
  pids_max, the cpu limit recorded), in a cgroup (``containment`` ``cgroup``);
* ``--expect refuse``: each run is refused before anything starts: status 125 (the API: a
  ``LaunchError``), a one-line message, and no record;
* ``--expect either``: each is one or the other, cleanly.

In every case the caller's cgroup must be unchanged and no ``tether-*`` cgroup left behind.
Standard library and tether only: it runs with the tether under test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CGROOT = Path("/sys/fs/cgroup")
ALLOCATE = "b = bytearray(400 * 1024 * 1024)"
FORK_LOOP = "for i in $(seq 100); do sleep 3 & done; wait"
BUSY_LOOP = "import time\ne = time.monotonic() + 3\nwhile time.monotonic() < e: pass"


def own_cgroup() -> dict[str, Any]:
    """The caller's cgroup v2 path and its two files a run must never change."""
    line = next(
        (ln for ln in Path("/proc/self/cgroup").read_text().splitlines() if ln.startswith("0::")),
        None,
    )
    info: dict[str, Any] = {"path": line[3:] if line else None}
    base = next(
        (b for b in (CGROOT, CGROOT / "unified") if (b / "cgroup.controllers").exists()), None
    )
    if line is None or base is None:
        return info
    d = base / line[3:].lstrip("/")
    info["dir"] = str(d)
    for name in ("cgroup.subtree_control", "cgroup.type"):
        try:
            info[name] = (d / name).read_text().strip()
        except OSError as e:
            info[name] = f"<{e.strerror}>"
    return info


def tether_cgroups() -> list[str]:
    """Every cgroup named tether-* anywhere under /sys/fs/cgroup (v2 and v1 hierarchies)."""
    found = []
    for top, dirs, _ in os.walk(CGROOT, onerror=lambda e: None):
        for d in dirs:
            if d.startswith("tether-"):
                found.append(os.path.join(top, d))
    return sorted(found)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def summary(rec: dict[str, Any] | None) -> dict[str, Any]:
    if rec is None:
        return {"record": None}
    usage = rec.get("tree_usage") or {}
    return {
        "reason": rec.get("reason"),
        "containment": rec.get("containment"),
        "limits": rec.get("limits"),
        "enforced_by": rec.get("limits_enforced_by"),
        "oom_kills": usage.get("oom_kills"),
        "pids_max_refusals": usage.get("pids_max_refusals"),
        "cpu_seconds": usage.get("cpu_seconds"),
        "memory_peak_bytes": usage.get("memory_peak_bytes"),
        "eval_exit_code": rec.get("eval_exit_code"),
        "launch_error": rec.get("launch_error"),
    }


def records_in(state: Path) -> list[str]:
    return sorted(str(p) for p in state.rglob("*.json"))


API_SCRIPT = """
import json, sys, tether
try:
    o = tether.run(["python3", "-c", sys.argv[1]], memory_max="64M", deadline="300")
except Exception as e:
    print(json.dumps({"exception": type(e).__name__, "message": str(e)}))
else:
    print(json.dumps({"reason": str(o.reason), "exit_status": o.exit_status,
                      "oom_killed": o.oom_killed, "record_path": str(o.record_path)}))
"""


def check_api(state: Path) -> dict[str, Any]:
    """The README's Python example, memory_max="64M" on a 400 MB allocation, in a Python
    program of its own (as a user runs it: its zygote ends with it)."""
    before = records_in(state)
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", API_SCRIPT, ALLOCATE], capture_output=True, text=True, timeout=600
    )
    secs = round(time.monotonic() - t0, 2)
    try:
        o = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {
            "outcome": "error",
            "status": p.returncode,
            "message": p.stderr[-2000:],
            "seconds": secs,
        }
    if "exception" in o:
        msg = o["message"]
        return {
            "outcome": "refused" if o["exception"] == "LaunchError" else "error",
            "exception": o["exception"],
            "message": msg,
            "one_line": "\n" not in msg.strip(),
            "new_records": [r for r in records_in(state) if r not in before],
            "seconds": secs,
        }
    rec = (
        read_record(Path(o["record_path"])) if o.get("record_path") not in (None, "None") else None
    )
    return {
        "outcome": "enforced" if o["oom_killed"] else "not-enforced",
        "reason": o["reason"],
        "exit_status": o["exit_status"],
        "oom_killed": o["oom_killed"],
        **summary(rec),
        "seconds": secs,
    }


def run_cli(args: list[str], cmd: list[str], work: Path, name: str) -> dict[str, Any]:
    rec_path = work / f"{name}.json"
    t0 = time.monotonic()
    p = subprocess.run(
        ["tether", "run", "--record", str(rec_path), "--deadline", "300", *args, "--", *cmd],
        capture_output=True,
        text=True,
        timeout=600,
    )
    rec = read_record(rec_path)
    err = p.stderr.strip()
    return {
        "status": p.returncode,
        "stderr": err[-2000:],
        "stderr_lines": len(err.splitlines()),
        "record_written": rec_path.exists(),
        **summary(rec),
        "seconds": round(time.monotonic() - t0, 2),
    }


def judge_cli(r: dict[str, Any], enforced: bool) -> str:
    if r["status"] == 125 and not r["record_written"]:
        return "refused"
    return "enforced" if enforced else "not-enforced"


def judge(checks: dict[str, Any], expect: str) -> list[str]:
    """What each check did that the context is not expected to do."""
    problems: list[str] = []
    for name, c in checks.items():
        if c["outcome"] == "enforced":
            if expect == "refuse":
                problems.append(f"{name}: enforced where a refusal was expected")
            elif c.get("containment") != "cgroup":
                problems.append(f"{name}: containment {c.get('containment')!r}, not 'cgroup'")
        elif c["outcome"] == "refused":
            if expect == "enforce":
                problems.append(f"{name}: refused: {c.get('message') or c.get('stderr')}")
            else:
                if name != "api_memory" and c.get("stderr_lines") != 1:
                    problems.append(f"{name}: refusal is {c.get('stderr_lines')} lines, not one")
                if name == "api_memory" and (not c.get("one_line") or c.get("new_records")):
                    problems.append(f"{name}: refusal not one line, or left a record")
        else:
            problems.append(
                f"{name}: {c['outcome']}: "
                + (c.get("message") or c.get("stderr") or json.dumps(summary_of(c)))[-400:]
            )
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", required=True)
    ap.add_argument("--expect", choices=("enforce", "refuse", "either"), default="enforce")
    opts = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="blackbox-"))
    state = work / "state"
    os.environ["XDG_STATE_HOME"] = str(state)  # the API's records, and nothing in the real home
    result: dict[str, Any] = {
        "context": opts.context,
        "expect": opts.expect,
        "uid": os.getuid(),
        "tether": shutil.which("tether"),
    }
    v = subprocess.run(["tether", "--version"], capture_output=True, text=True)
    result["tether_version"] = (v.stdout or v.stderr).strip()
    cg_before = own_cgroup()
    leftovers_before = tether_cgroups()
    result["cgroup_before"] = cg_before
    checks: dict[str, Any] = {}

    api = check_api(state)
    checks["api_memory"] = api

    pids = run_cli(["--pids-max", "20"], ["sh", "-c", FORK_LOOP], work, "pids")
    pids["outcome"] = judge_cli(
        pids,
        bool(pids.get("pids_max_refusals")) and (pids.get("limits") or {}).get("pids_max") == 20,
    )
    checks["cli_pids"] = pids

    cpu = run_cli(["--cpus", "0.5"], ["python3", "-c", BUSY_LOOP], work, "cpu")
    cpu["outcome"] = judge_cli(
        cpu,
        cpu["status"] == 0
        and (cpu.get("limits") or {}).get("cpu_max") is not None
        and (cpu.get("enforced_by") or {}).get("cpu_max") is not None,
    )
    checks["cli_cpus"] = cpu

    cg_after = own_cgroup()
    # A systemd scope is removed by its manager once empty, a moment after the run: a cgroup
    # still there after 10 s is left behind.
    t0 = time.monotonic()
    leftovers = tether_cgroups()
    while leftovers and time.monotonic() - t0 < 10:
        time.sleep(0.2)
        leftovers = tether_cgroups()
    result["leftover_wait_seconds"] = round(time.monotonic() - t0, 1)
    result["cgroup_after"] = cg_after
    result["leftover_cgroups"] = leftovers
    result["leftover_cgroups_before"] = leftovers_before
    result["checks"] = checks

    problems = judge(checks, opts.expect)
    for f in ("cgroup.subtree_control", "cgroup.type"):
        if cg_before.get(f) != cg_after.get(f):
            problems.append(f"caller's {f} changed: {cg_before.get(f)!r} -> {cg_after.get(f)!r}")
    if leftovers:
        problems.append(f"tether-* cgroups left: {leftovers}")
    result["problems"] = problems
    if problems:
        result["verdict"] = "failed"
    elif all(c["outcome"] == "refused" for c in checks.values()):
        result["verdict"] = "refused-as-expected"
    else:
        result["verdict"] = "passed"
    print("TETHER-BLACKBOX " + json.dumps(result, default=str), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if not problems else 1


def summary_of(c: dict[str, Any]) -> dict[str, Any]:
    keys = ("reason", "status", "exit_status", "containment", "limits", "enforced_by")
    return {k: c.get(k) for k in keys if k in c}


if __name__ == "__main__":
    sys.exit(main())

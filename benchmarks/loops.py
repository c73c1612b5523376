"""Measures 11 and 12: what a loop of short runs costs, against the tools it stands for.

* **10.** A shell loop of N ``timeout 5 true`` calls, with ``timeout`` the
  installed ``tether-timeout`` launcher (a symlink named ``timeout`` early on
  ``PATH``, as a new user would install it) against GNU ``timeout``.
* **11.** One Python program calling ``tether.run(["true"])`` N times, against
  ``subprocess.run(["true"])`` N times.

Each is the wall time of the whole loop, one loop per contender per trial,
the contenders taking turns; a loop is a single number, so the trials are few.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.measures import Bench, _rotate

__all__ = ["API_LOOP", "SHELL_LOOP", "loops"]

SHELL_LOOP = 'i=0; while [ "$i" -lt "$1" ]; do timeout 5 true || exit 1; i=$((i + 1)); done'

#: ``python -c API_LOOP N WHICH``: runs ``true`` N times through ``tether.run`` or subprocess.
API_LOOP = r"""
import sys
n, which = int(sys.argv[1]), sys.argv[2]
if which == "tether":
    import tether
    for _ in range(n):
        assert tether.run(["true"]).returncode == 0
else:
    import subprocess
    for _ in range(n):
        subprocess.run(["true"], check=True)
"""

#: The bound of one loop, in seconds (a bound, not an expectation).
LOOP_BOUND = 600.0


def _launcher() -> Path | None:
    """The installed ``tether-timeout`` beside this interpreter, if there is one."""
    path = Path(sys.executable).parent / "tether-timeout"
    return path if path.exists() else None


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float | None, str]:
    began = time.monotonic()
    result = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=LOOP_BOUND, check=False
    )
    elapsed = time.monotonic() - began
    if result.returncode != 0:
        return None, f"exit status {result.returncode}: {result.stderr.strip()[-200:]}"
    return elapsed, ""


def loops(bench: Bench, shell_n: int, api_n: int, trials: int) -> list[dict[str, object]]:
    """Both measures, ``trials`` loops per contender; one dict per contender."""
    launcher = _launcher()
    with tempfile.TemporaryDirectory(prefix="tether-loops-") as scratch:
        shims = Path(scratch) / "bin"
        shims.mkdir()
        home = Path(scratch) / "home"
        home.mkdir()
        base = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home)}
        runs: dict[str, tuple[str, int, list[str], dict[str, str]]] = {
            "GNU timeout": ("shell", shell_n, ["sh", "-c", SHELL_LOOP, "sh", str(shell_n)], base),
            "subprocess.run": (
                "api",
                api_n,
                [sys.executable, "-c", API_LOOP, str(api_n), "sp"],
                base,
            ),
            "tether.run": (
                "api",
                api_n,
                [sys.executable, "-c", API_LOOP, str(api_n), "tether"],
                base,
            ),
        }
        if launcher is not None:
            (shims / "timeout").symlink_to(launcher)
            shimmed = {**base, "PATH": f"{shims}{os.pathsep}{base.get('PATH', '')}"}
            argv = ["sh", "-c", SHELL_LOOP, "sh", str(shell_n)]
            runs["tether timeout (launcher)"] = ("shell", shell_n, argv, shimmed)
        results = {
            name: {"measure": kind, "contender": name, "n": n, "seconds": [], "failures": []}
            for name, (kind, n, _argv, _env) in runs.items()
        }
        for turn in range(trials):
            for name in _rotate(tuple(runs), turn):
                bench.say(f"  {name}, trial {turn + 1}")
                _kind, _n, argv, env = runs[name]
                elapsed, failure = _timed(argv, env)
                if elapsed is None:
                    results[name]["failures"].append(failure)  # type: ignore[attr-defined]
                else:
                    results[name]["seconds"].append(round(elapsed, 4))  # type: ignore[attr-defined]
    return list(results.values())

"""The API's fast path keeps its promises under stress: forks, stops, signal handlers.

Each test runs a real caller (a Python program using the API, a process of its
own) and does to it what an unlucky program or a hostile command would: fork
workers while it launches, stop its zygote, launch again from a signal
handler, kill it while its zygote is stopped. Every wait is bounded: a pidfd,
a line on a pipe, the caller's own exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BOUND, Processes, fixture, wait_gone


def _env(tmp_path: Path, *, zygote: bool = True) -> dict[str, str]:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    env.pop("TETHER_ZYGOTE", None)
    if not zygote:
        env["TETHER_ZYGOTE"] = "0"
    return env


@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", ["zygote", "plain"])
def test_a_worker_forked_during_launches_keeps_no_command_alive(
    tmp_path: Path, processes: Processes, path: str
) -> None:
    """60 launches while another thread forks every 20 ms; the caller SIGKILLed: none is left.

    A lifeline is close-in-child from the moment it exists: a worker forked
    while a launch is under way (its channels made, not yet handed over)
    holds none of it, so every command sees its caller die.
    """
    caller = processes.start(
        fixture("api_fork_while_launching", "60", "--", "sleep", "1000"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_env(tmp_path, zygote=path == "zygote"),
    )
    assert caller.stdout is not None
    said = json.loads(caller.stdout.readline())
    pids, workers = said["pids"], said["workers"]
    processes.track(*pids, *workers)
    assert len(pids) == 60
    assert workers  # the storm did fork while launching
    caller.send_signal(signal.SIGKILL)
    caller.wait(timeout=BOUND)
    end = time.monotonic() + BOUND
    left = [pid for pid in pids if not wait_gone(pid, max(0.0, end - time.monotonic()))]
    assert left == []

"""The zygote's rehearsal of a run (``tether.supervisor.loop.rehearse``) leaves no trace.

A zygote goes once through the pure part of a run before it freezes what it loaded, so that its
forks share what the interpreter builds on a first use (issue 36). It must touch nothing a
supervisor or its command could see: run in a fresh interpreter, twice, it opens and closes
no descriptor for good, starts no process, changes no signal's disposition nor the signal mask,
and writes no file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import BOUND

_PROGRAM = r"""
import json, os, signal, sys
from tether.supervisor import loop

def state():
    return {
        "fds": sorted(os.listdir("/proc/self/fd")),
        "dispositions": {
            str(number): repr(signal.getsignal(number)) for number in signal.valid_signals()
            if number not in (signal.SIGKILL, signal.SIGSTOP)
        },
        "mask": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "children": open(f"/proc/self/task/{os.getpid()}/children").read().split(),
        "cwd": os.getcwd(),
        "files": sorted(os.listdir(".")),
    }

fd = os.open(os.devnull, os.O_RDONLY)  # a descriptor the rehearsal must not close
before = state()
answers = [loop.rehearse(), loop.rehearse()]
print(json.dumps({"before": before, "after": state(), "answers": answers}))
"""


def test_a_rehearsal_touches_no_descriptor_process_signal_or_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    seen = json.loads(done.stdout)
    assert seen["answers"] == [None, None]
    assert seen["after"] == seen["before"]
    assert seen["before"]["children"] == []
    assert list(tmp_path.iterdir()) == []

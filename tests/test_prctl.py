"""``prctl`` through ``_ctypes`` alone does what it does through ``ctypes``, without loading it.

:mod:`tether.linux.prctl` builds libc's ``prctl`` from ``_ctypes`` (``import
ctypes`` would cost every launch milliseconds) and falls back to ``ctypes``
where that cannot be done. Both ways are run here, each in a fresh
interpreter (a subreaper flag is for good): the name and the subreaper (an
orphaned grandchild re-parents to the process) take effect, the parent-death
signal is taken (that it comes is ``test_containment``'s), a refused option
raises the system's error, and on the Pythons tether supports the lean way
is the one taken.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import BOUND

_PROBE = r"""
import json, os, signal, sys
from tether.linux import prctl

prctl._binding = getattr(prctl, sys.argv[1])()
prctl.set_process_name("tether-sup-and-more")
with open("/proc/self/comm") as comm:
    name = comm.read().strip()
prctl.set_child_subreaper()
report_r, report_w = os.pipe()
go_r, go_w = os.pipe()
middle = os.fork()
if middle == 0:
    if os.fork() == 0:  # the grandchild: orphaned once the middle exits
        os.read(go_r, 1)  # the middle is reaped: whoever adopted it is its parent now
        os.write(report_w, str(os.getppid()).encode())
        os._exit(0)
    os._exit(0)
os.waitpid(middle, 0)
os.write(go_w, b"!")
adopted_by = int(os.read(report_r, 64))
os.wait()
child = os.fork()
if child == 0:
    try:
        prctl.set_parent_death_signal(signal.SIGUSR1)
    except OSError:
        os._exit(1)
    os._exit(0)
death_signal_taken = os.waitpid(child, 0)[1] == 0
try:
    prctl._prctl(0x7FFF, prctl._bound().unsigned_long(0))
    refused = None
except OSError as error:
    refused = error.errno
print(json.dumps({
    "name": name, "adopted_by": adopted_by, "me": os.getpid(), "refused": refused,
    "death_signal_taken": death_signal_taken,
    "ctypes": "ctypes" in sys.modules,
}))
"""


@pytest.mark.parametrize(
    ("binding", "loads_ctypes"), [("_through_ctypes_core", False), ("_through_ctypes", True)]
)
def test_both_ways_to_prctl_do_the_same(binding: str, loads_ctypes: bool) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, binding],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
    )
    seen = json.loads(done.stdout)
    assert seen["name"] == "tether-sup-and-"  # 15 bytes: what the kernel keeps
    assert seen["adopted_by"] == seen["me"]
    assert seen["death_signal_taken"] is True
    assert seen["refused"] == 22  # EINVAL, read from errno as the call left it
    assert seen["ctypes"] is loads_ctypes


def test_the_lean_way_is_taken_here() -> None:
    """On a supported Python, ``_ctypes`` offers everything: no silent fall back to ``ctypes``."""
    from tether.linux import prctl

    binding = prctl._through_ctypes_core()
    assert type(binding.prctl).__module__ == "tether.linux.prctl"

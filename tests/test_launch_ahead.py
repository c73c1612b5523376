"""A limited launch prepared ahead: the spare's cgroup with the last run's limits, and a v1
join that takes no machine-wide lock (``docs/performance.md``, "Where a launch's time goes")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import api_caller, wait_gone
from test_zygote_spare import _FIND_THE_SPARE
from tether.linux.cgroup1 import Hierarchy, V1Cgroup, find_hierarchies
from tether.linux.clone3 import clone_into_cgroup_likely, kernel_at_least
from tether.linux.run_cgroups import RunCgroups


def _pids_hierarchy() -> Hierarchy:
    found = [h for h in find_hierarchies() if "pids" in h.controllers]
    if not found or not os.access(found[0].directory, os.W_OK):
        pytest.skip("needs the pids controller on a cgroup v1 hierarchy this user may divide")
    return found[0]


def test_a_v1_join_moves_the_child_through_tasks_and_needs_no_warming() -> None:
    made = V1Cgroup.create(_pids_hierarchy(), f"tether-{os.getpid()}-0a1b2c3d", [])
    try:
        assert made.tasks_descriptor is not None
        child = os.fork()
        if child == 0:
            try:
                made.join()
            finally:
                os._exit(0 if made.holds("self") else 1)
        _, status = os.waitpid(child, 0)
        assert os.WIFEXITED(status)
        assert os.WEXITSTATUS(status) == 0  # the whole (one-threaded) process moved
        cgroups = RunCgroups(None, [made], {"pids_max": "cgroup1"})
        # No v2 cgroup here: that join writes cgroup.procs, and still wants the warm-up.
        assert cgroups.join_takes_lock()
        if kernel_at_least(6, 1) and clone_into_cgroup_likely():
            born_in = RunCgroups.create()
            try:
                both = RunCgroups(born_in.v2, [made], {"pids_max": "cgroup1"})
                assert not both.join_takes_lock()  # nothing to warm: no warming child forked
            finally:
                born_in.discard()
    finally:
        made.discard()


_LIMITED_AHEAD = (
    _FIND_THE_SPARE
    + """
from tether.linux.cgroup1 import find_hierarchies
(pids,) = [h.directory for h in find_hierarchies() if "pids" in h.controllers]

def made_by(pid):
    return sorted(name for name in os.listdir(pids) if name.startswith(f"tether-{pid}-"))

first = tether.run(["true"], record=False, pids_max=16)
waiting = spare({first.supervisor_pid})
end = time.monotonic() + 10
while not made_by(waiting) and time.monotonic() < end:  # made while it waits
    time.sleep(0.01)
ahead = made_by(waiting)
limit = open(f"{pids}/{ahead[0]}/pids.max").read().strip() if ahead else None
second = tether.run(["true"], record=f"{sys.argv[1]}/second.json", pids_max=16)
last = spare({first.supervisor_pid, waiting})
while not made_by(last) and time.monotonic() < end:
    time.sleep(0.01)
print(json.dumps({
    "ahead": ahead, "limit": limit, "waiting": waiting, "second": second.supervisor_pid,
    "reason": second.reason.value, "last": last, "last_ahead": made_by(last), "parent": pids,
}))
"""
)


def test_a_spare_makes_the_last_runs_limited_cgroup_ahead_and_leaves_none(
    tmp_path: Path,
) -> None:
    """The next run with the same limits finds its cgroup made; a spare never used removes it."""
    _pids_hierarchy()
    runs = tmp_path / "runs"
    runs.mkdir()
    said = json.loads(api_caller(["-c", _LIMITED_AHEAD, str(runs)], tmp_path).stdout)
    assert len(said["ahead"]) == 1  # made before the request, with the last run's limit
    assert said["limit"] == "16"
    assert said["second"] == said["waiting"]  # the spare took the request
    assert said["reason"] == "completed"
    record = json.loads((runs / "second.json").read_text())
    assert record["limits_enforced_by"]["pids_max"] == "cgroup1"
    assert len(said["last_ahead"]) == 1
    # The caller ended, its zygote with it, and the last spare saw no request.
    assert wait_gone(said["last"])
    assert not (Path(said["parent"]) / said["last_ahead"][0]).exists()

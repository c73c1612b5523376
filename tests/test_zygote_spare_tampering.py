"""The zygote's spare is a peer like any other: bounded, checked before use, cleaned up after.

A spare waits, idle, for as long as its caller launches nothing; meanwhile
anyone with the right to may freeze it, stop it, or remove the cgroup it made
ahead. None of that may hold a launch past its bound, lose it, start it twice,
or leave a process or a cgroup behind. The caller in each case is a child
subreaper (``tests/test_zygote_spare.py``'s way of finding the spare).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BOUND, alive, api_caller, api_env, skip_without_cgroup, wait_gone
from test_zygote_spare import _FIND_THE_SPARE

_MADE_BY = """
from tether.linux.cgroup import own_cgroup
parent = own_cgroup()[1]

def made_by(pid):
    end = time.monotonic() + 10
    while time.monotonic() < end:  # the spare makes it once forked, after the launch returned
        names = sorted(n for n in os.listdir(parent) if n.startswith(f"tether-{pid}-"))
        if names:
            return names
        time.sleep(0.01)
    return []
"""

_REMOVED_AHEAD = (
    _FIND_THE_SPARE
    + _MADE_BY
    + """
os.environ["TETHER_CONTAINMENT"] = "cgroup"
ran = tether.run(["true"], record=False)
waiting = spare({ran.supervisor_pid})
ahead = made_by(waiting)
os.rmdir(os.path.join(parent, ahead[0]))  # as an administrator's cleanup might
try:
    outcome = tether.run(["true"], record=f"{sys.argv[1]}/after.json")
    said = {"reason": outcome.reason.value, "supervisor": outcome.supervisor_pid}
except tether.LaunchError as error:
    said = {"error": str(error)}
print(json.dumps({**said, "spare": waiting, "ahead": ahead}))
"""
)


def test_a_spare_whose_cgroup_was_removed_makes_a_new_one(tmp_path: Path) -> None:
    skip_without_cgroup()
    runs = tmp_path / "runs"
    runs.mkdir()
    said = json.loads(api_caller(["-c", _REMOVED_AHEAD, str(runs)], tmp_path).stdout)
    assert said.get("reason") == "completed", said
    assert said["supervisor"] == said["spare"]  # the spare took it, and made a new cgroup
    record = json.loads((runs / "after.json").read_text())
    assert record["containment"] == "cgroup"


_STOPPED_SPARE_S_CGROUP = (
    _FIND_THE_SPARE
    + _MADE_BY
    + """
ran = tether.run(["true"], record=False)
stopped = spare({ran.supervisor_pid})
ahead = made_by(stopped)
os.kill(stopped, signal.SIGSTOP)
while open(f"/proc/{stopped}/stat").read().rpartition(")")[2].split()[0] != "T":
    time.sleep(0.001)
outcome = tether.run(["true"], record=False)
print(json.dumps({
    "reason": outcome.reason.value, "stopped": stopped, "ahead": ahead, "parent": parent,
}))
"""
)


def test_a_spare_passed_over_leaves_no_cgroup(tmp_path: Path) -> None:
    skip_without_cgroup()
    said = json.loads(api_caller(["-c", _STOPPED_SPARE_S_CGROUP], tmp_path).stdout)
    assert said["reason"] == "completed"
    assert len(said["ahead"]) == 1
    assert wait_gone(said["stopped"])
    left = Path(said["parent"]) / said["ahead"][0]
    assert not left.exists(), f"the killed spare's cgroup {left} is left"


_FREEZER = Path("/sys/fs/cgroup/freezer")


@contextlib.contextmanager
def _freezer_cgroup() -> Iterator[Path]:
    """The path of a v1 freezer cgroup for a test's caller to make; thawed, waited empty
    (bounded) and removed however the test ends."""
    freezer = _FREEZER / f"tether-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        yield freezer
    finally:
        if freezer.exists():
            (freezer / "freezer.state").write_text("THAWED")
            end = time.monotonic() + BOUND
            while (freezer / "cgroup.procs").read_text().strip() and time.monotonic() < end:
                time.sleep(0.01)
            freezer.rmdir()


#: Freezes process ``frozen`` in cgroup v1 ``freezer``, then launches with a deadline of 3 s.
_FREEZE_AND_RUN = """
with open(f"{freezer}/cgroup.procs", "w") as procs:
    procs.write(str(frozen))
with open(f"{freezer}/freezer.state", "w") as state:
    state.write("FROZEN")
while open(f"{freezer}/freezer.state").read().strip() != "FROZEN":
    time.sleep(0.001)
begun = time.monotonic()
try:
    outcome = tether.run(["true"], deadline=3, record=False)
"""

_FROZEN_SPARE = (
    _FIND_THE_SPARE
    + _MADE_BY
    + """
freezer = sys.argv[1]
os.mkdir(freezer)
ran = tether.run(["true"], record=False)
frozen = spare({ran.supervisor_pid})
ahead = made_by(frozen)
"""
    + _FREEZE_AND_RUN
    + """    said = {"reason": outcome.reason.value, "supervisor": outcome.supervisor_pid}
except tether.LaunchError as error:
    said = {"error": str(error)}
took = time.monotonic() - begun
with open(f"{freezer}/freezer.state", "w") as state:
    state.write("THAWED")
print(json.dumps({**said, "took": took, "frozen": frozen, "ahead": ahead, "parent": parent}))
"""
)


@pytest.mark.skipif(
    not (_FREEZER / "freezer.state").exists() and not (_FREEZER / "cgroup.procs").exists(),
    reason="needs the cgroup v1 freezer (a hybrid host), as root",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to freeze the spare")
def test_a_frozen_spare_never_holds_the_launch_past_its_bound(tmp_path: Path) -> None:
    with _freezer_cgroup() as freezer:
        said = json.loads(api_caller(["-c", _FROZEN_SPARE, str(freezer)], tmp_path).stdout)
        assert said.get("reason") == "completed", said
        assert said["took"] < 3, said  # the spare's wait is bounded by the deadline
        assert said["supervisor"] != said["frozen"]  # forked instead: started once
        assert wait_gone(said["frozen"])  # killed while frozen: dead as it thawed


#: Freezes the cgroup the spare made ahead for the next run.
_FREEZE_THE_NEXT_RUN_CGROUP = (
    _FIND_THE_SPARE
    + _MADE_BY
    + """
ran = tether.run(["true"], record=False)
waiting = spare({ran.supervisor_pid})
ahead = made_by(waiting)
with open(os.path.join(parent, ahead[0], "cgroup.freeze"), "w") as freeze:
    freeze.write("1")
"""
)

_FROZEN_RUN_CGROUP = (
    _FREEZE_THE_NEXT_RUN_CGROUP
    + """
begun = time.monotonic()
try:
    outcome = tether.run(["true"], deadline=4, record=False)
    said = {"reason": outcome.reason.value}
except tether.LaunchError as error:
    said = {"error": str(error)}
print(json.dumps({
    **said, "took": time.monotonic() - begun, "spare": waiting, "ahead": ahead, "parent": parent,
}))
"""
)


def test_a_frozen_run_cgroup_never_holds_the_launch_past_its_deadline(tmp_path: Path) -> None:
    skip_without_cgroup()
    said = json.loads(api_caller(["-c", _FROZEN_RUN_CGROUP], tmp_path, timeout=BOUND * 2).stdout)
    assert said["took"] < 4 + 5, said  # the deadline, and the start limit beside it
    assert "did not start before its deadline" in said.get("error", ""), said
    cgroup = Path(said["parent"]) / said["ahead"][0]
    assert wait_gone(said["spare"])
    end = time.monotonic() + BOUND
    while cgroup.exists() and time.monotonic() < end:
        time.sleep(0.01)
    assert not cgroup.exists(), "the run's cgroup is left"
    assert not alive(said["spare"])


_FROZEN_ZYGOTE = (
    """
import json, os, sys, time
import tether
from tether.caller import zygote
freezer = sys.argv[1]
os.mkdir(freezer)
tether.run(["true"], record=False)
frozen = zygote.zygote_pid()
"""
    + _FREEZE_AND_RUN
    + """    said = {"reason": outcome.reason.value}
except tether.LaunchError as error:
    said = {"error": str(error), "errno": error.errno}
took = time.monotonic() - begun
after = tether.run(["true"], record=False)  # a fresh zygote
with open(f"{freezer}/freezer.state", "w") as state:
    state.write("THAWED")
print(json.dumps({**said, "took": took, "frozen": frozen, "after": after.reason.value}))
"""
)


@pytest.mark.skipif(
    not (_FREEZER / "cgroup.procs").exists(),
    reason="needs the cgroup v1 freezer (a hybrid host), as root",
)
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to freeze the zygote")
def test_a_frozen_zygote_never_holds_the_launch_past_its_bound(tmp_path: Path) -> None:
    with _freezer_cgroup() as freezer:
        done = api_caller(["-c", _FROZEN_ZYGOTE, str(freezer)], tmp_path, timeout=BOUND * 2)
        said = json.loads(done.stdout)
        # The deadline, and the few seconds after it the supervisor has to say how it ended.
        assert said["took"] < 3 + 5 + 2, said
        assert "did not start the command within" in said.get("error", ""), said
        assert said["errno"] == 110  # ETIMEDOUT
        assert said["after"] == "completed"
        assert wait_gone(said["frozen"])  # abandoned while frozen: dead as it thawed


_HELD_BY_A_FROZEN_RUN_CGROUP = (
    _FREEZE_THE_NEXT_RUN_CGROUP
    + """
print(json.dumps({"spare": waiting, "cgroup": os.path.join(parent, ahead[0])}), flush=True)
tether.run(["true"], record=False)  # no deadline: held until this caller is gone
"""
)


def test_a_launch_held_by_a_frozen_run_cgroup_leaves_nothing_when_its_caller_dies(
    tmp_path: Path,
) -> None:
    skip_without_cgroup()
    caller = subprocess.Popen(
        [sys.executable, "-c", _HELD_BY_A_FROZEN_RUN_CGROUP],
        stdout=subprocess.PIPE,
        text=True,
        env=api_env(tmp_path),
    )
    try:
        assert caller.stdout is not None
        said = json.loads(caller.stdout.readline())
        procs = Path(said["cgroup"]) / "cgroup.procs"
        end = time.monotonic() + BOUND
        while not procs.read_text().split():  # the command, born frozen
            assert time.monotonic() < end, "no command was born in the frozen cgroup"
            time.sleep(0.01)
        (command,) = (int(pid) for pid in procs.read_text().split())
    finally:
        caller.kill()
        caller.wait(BOUND)
    assert wait_gone(said["spare"]), "the supervisor outlived its caller"
    assert wait_gone(command), "the command, frozen before its exec, outlived its caller"

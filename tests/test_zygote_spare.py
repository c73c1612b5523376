"""The zygote's spare: the next request's supervisor, forked and detached before it is asked for.

The caller in each test is a child subreaper, so that the spare (detached, as
every supervisor is) is re-parented to it and can be found among its
children: a process that is neither the zygote nor a supervisor the caller
already knows of.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import BOUND, Processes, alive, api_caller, read_json, skip_without_cgroup, wait_gone

_FIND_THE_SPARE = """
import json, os, signal, sys, time
from tether.linux.prctl import set_child_subreaper
set_child_subreaper(True)
import tether
from tether.caller import zygote

def spare(known):
    '''The one live child of this caller that is neither the zygote nor in ``known``.'''
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with open(f"/proc/self/task/{os.getpid()}/children") as listed:
            children = [int(pid) for pid in listed.read().split()]
        found = []
        for pid in children:
            if pid == zygote.zygote_pid() or pid in known:
                continue
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    state = stat.read().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state == "Z":
                os.waitpid(pid, 0)  # a supervisor that ended: this caller reaps it
            else:
                found.append(pid)
        if len(found) == 1:
            return found[0]
        time.sleep(0.01)
    raise SystemExit(f"no spare among {children}")
"""

_USED_THEN_LOST = (
    _FIND_THE_SPARE
    + """
records = sys.argv[1]
first = tether.run(["true"], record=f"{records}/first.json")
waiting = spare({first.supervisor_pid})  # that one may not have exited yet
handle = tether.launch(["sleep", "60"], record=f"{records}/second.json")
second = handle.supervisor_pid
following = spare({first.supervisor_pid, second})
os.kill(following, signal.SIGKILL)  # a spare lost: the next launch forks as before
while True:
    try:
        os.waitpid(following, 0)
        break
    except ChildProcessError:  # not re-parented here yet
        time.sleep(0.01)
third = tether.run(["true"], record=f"{records}/third.json")
handle.cancel()
print(json.dumps({
    "spare": waiting, "second": second, "following": following,
    "reasons": [first.reason.value, handle.wait().reason.value, third.reason.value],
    "started": zygote.started,
}))
"""
)


def test_the_next_launch_is_the_spare_and_a_lost_spare_costs_only_the_fork(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    done = api_caller(["-c", _USED_THEN_LOST, str(runs)], tmp_path)
    said = json.loads(done.stdout)
    assert said["second"] == said["spare"]  # forked before the launch was asked for
    assert said["following"] not in (said["spare"], said["second"])  # a spare per launch
    assert said["reasons"] == ["completed", "cancelled", "completed"]
    assert said["started"] == 1  # one zygote throughout
    third = read_json(runs / "third.json")
    assert third["supervisor_pid"] != said["following"]
    assert read_json(runs / "second.json")["supervisor_pid"] == said["spare"]


_HOLD_A_SPARE = (
    _FIND_THE_SPARE
    + """
ran = tether.run(["true"], record=False)
print(json.dumps({"zygote": zygote.zygote_pid(), "spare": spare({ran.supervisor_pid})}), flush=True)
sys.stdin.readline()
"""
)


def test_the_spare_ends_with_its_caller(tmp_path: Path, processes: Processes) -> None:
    caller = processes.api_program(["-c", _HOLD_A_SPARE], tmp_path)
    assert caller.stdout is not None
    said = json.loads(caller.stdout.readline())
    processes.track(said["zygote"], said["spare"])
    assert alive(said["spare"])
    caller.kill()
    caller.wait(timeout=BOUND)
    assert wait_gone(said["zygote"])
    assert wait_gone(said["spare"])


_LET_GO_OF_A_STOPPED_SPARE = (
    _FIND_THE_SPARE
    + """
ran = tether.run(["true"], record=False)
stopped = spare({ran.supervisor_pid})
os.kill(stopped, signal.SIGSTOP)
while open(f"/proc/{stopped}/stat").read().rpartition(")")[2].split()[0] != "T":
    time.sleep(0.001)
zygote.forget()  # the zygote sees its end of file: a stopped spare never would see its own
end = time.monotonic() + 10
while time.monotonic() < end:
    pid, status = os.waitpid(stopped, os.WNOHANG)
    if pid:
        break
    time.sleep(0.01)
print(json.dumps(pid == stopped and os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9))
"""
)


def test_a_zygote_that_ends_kills_its_stopped_spare(tmp_path: Path) -> None:
    """Let go of (a fresh zygote for new credentials, ``forget()``), it leaves no spare stopped."""
    assert json.loads(api_caller(["-c", _LET_GO_OF_A_STOPPED_SPARE], tmp_path).stdout) is True


_CGROUPS_LEFT = (
    _FIND_THE_SPARE
    + """
from tether.linux.cgroup import own_cgroup
parent = own_cgroup()[1]

def made_by(pid):
    return sorted(name for name in os.listdir(parent) if name.startswith(f"tether-{pid}-"))

ran = tether.run(["true"], record=False)
first = spare({ran.supervisor_pid})
end = time.monotonic() + 10
while not made_by(first) and time.monotonic() < end:  # made while it waits
    time.sleep(0.01)
ahead = made_by(first)
by_zygote = made_by(zygote.zygote_pid())  # its warm-up made and removed a run's cgroups
os.environ["TETHER_CONTAINMENT"] = "sweep"
swept = tether.run(["true"], record=f"{sys.argv[1]}/swept.json")
del os.environ["TETHER_CONTAINMENT"]
second = spare({ran.supervisor_pid, first})
while not made_by(second) and time.monotonic() < end:
    time.sleep(0.01)
print(json.dumps({
    "ahead": ahead, "after_sweep": made_by(first), "second": second,
    "second_ahead": made_by(second), "parent": parent, "by_zygote": by_zygote,
}))
"""
)


def test_a_spares_cgroup_is_used_or_removed(tmp_path: Path) -> None:
    """Made while the spare waits; removed when the request wants none, or no request comes."""
    skip_without_cgroup()
    runs = tmp_path / "runs"
    runs.mkdir()
    done = api_caller(["-c", _CGROUPS_LEFT, str(runs)], tmp_path)
    said = json.loads(done.stdout)
    assert len(said["ahead"]) == 1  # made before the request
    assert said["by_zygote"] == []  # the zygote's warm-up left none of its own
    assert said["after_sweep"] == []  # the request wanted the sweep: removed
    assert read_json(runs / "swept.json")["containment"] == "sweep"
    assert len(said["second_ahead"]) == 1
    # The caller ended, its zygote with it, and the last spare saw no request.
    assert wait_gone(said["second"])
    assert not (Path(said["parent"]) / said["second_ahead"][0]).exists()


_A_STOPPED_SPARE = (
    _FIND_THE_SPARE
    + """
ran = tether.run(["true"], record=False)
stopped = spare({ran.supervisor_pid})
os.kill(stopped, signal.SIGSTOP)  # as any process of the user could, at leisure
while open(f"/proc/{stopped}/stat").read().rpartition(")")[2].split()[0] != "T":
    time.sleep(0.001)
outcome = tether.run(["true"], record=False)
end = time.monotonic() + 10
while time.monotonic() < end:  # the zygote SIGKILLs it: this caller (its reaper) sees it
    pid, status = os.waitpid(stopped, os.WNOHANG)
    if pid:
        break
    time.sleep(0.01)
print(json.dumps({
    "reason": outcome.reason.value, "supervisor": outcome.supervisor_pid, "stopped": stopped,
    "killed": pid == stopped and os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9,
    "next": spare({ran.supervisor_pid, outcome.supervisor_pid}),
}))
"""
)


def test_a_stopped_spare_is_passed_over_and_killed(tmp_path: Path) -> None:
    """A spare stopped while it waits never holds a launch up: the zygote forks instead."""
    said = json.loads(api_caller(["-c", _A_STOPPED_SPARE], tmp_path).stdout)
    assert said["reason"] == "completed"
    assert said["supervisor"] != said["stopped"]
    assert said["killed"]
    assert said["next"] not in (said["stopped"], said["supervisor"])

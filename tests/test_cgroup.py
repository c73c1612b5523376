"""The cgroup rung: finding the hierarchy, a run's own cgroup, and every way back to the sweep.

The unit half drives :mod:`tether.linux.cgroup` directly with real
processes. The other half checks the promise that matters when no cgroup can
be had: under ``TETHER_CONTAINMENT=auto`` the run falls back to the sweep
silently and still stops everything; under ``cgroup`` it refuses to start
the command, with one line saying why; an unknown value is refused too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    cgroup_problem,
    fixture,
    parent_of,
    read_json,
    skip_without_cgroup,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.linux import cgroup as cgroup_module
from tether.linux.cgroup import (
    CgroupUnavailable,
    V2Cgroup,
    cgroup_of,
    divisible,
    enable_controllers,
    own_cgroup,
    remove_stale,
    warm_attach_lock,
)


@pytest.fixture(autouse=True)
def _needs_cgroup() -> None:
    skip_without_cgroup()


def sleeper_in(cgroup: V2Cgroup, processes: Processes) -> subprocess.Popen[bytes]:
    """A process that joined ``cgroup`` before exec, as the command does."""
    return processes.start(
        [sys.executable, "-c", "import signal; signal.pause()"], preexec_fn=cgroup.join
    )


def test_the_own_cgroup_is_found_and_lists_this_process() -> None:
    path, directory = own_cgroup()
    assert path == cgroup_of("self")
    assert str(os.getpid()) in Path(directory, "cgroup.procs").read_text().split()


#: Moves itself into a new cgroup below its own and back: ``own_cgroup`` follows each move.
_MOVED = """
import os
from pathlib import Path
from tether.linux import cgroup
path, directory = cgroup.own_cgroup()
checked = []
real_lists = cgroup.lists
cgroup.lists = lambda at, pid: checked.append(at) or real_lists(at, pid)
assert cgroup.own_cgroup() == (path, directory) and checked == [], checked  # kept
below = Path(directory, f"moved-{os.getpid()}")
try:
    below.mkdir()
    (below / "cgroup.procs").write_text("0")
except PermissionError:
    print("unwritable")
    raise SystemExit(0)
try:
    moved = cgroup.own_cgroup()
finally:
    Path(directory, "cgroup.procs").write_text("0")
    below.rmdir()
assert moved == (os.path.join(path, below.name), str(below)), moved
assert checked == [str(below)], checked  # found again, and believed once it listed this one
assert cgroup.own_cgroup() == (path, directory)
print("followed")
"""


def test_the_own_cgroup_is_kept_only_while_the_process_stays_in_it() -> None:
    """Found once (a read of every pid in it), then kept: but a move is seen at once."""
    done = subprocess.run(
        [sys.executable, "-c", _MOVED], capture_output=True, text=True, timeout=BOUND, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    if done.stdout.strip() == "unwritable":
        pytest.skip("this process's cgroup is not this user's to divide")
    assert done.stdout.strip() == "followed"


def test_warming_the_attach_lock_leaves_a_process_where_it_was() -> None:
    """The warm-up is a move to where the process already is: a real process, really written."""
    code = (
        "from tether.linux.cgroup import cgroup_of, own_cgroup, warm_attach_lock\n"
        "before = cgroup_of('self')\n"
        "warm_attach_lock()\n"
        "print(before == cgroup_of('self') == own_cgroup()[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, check=False
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "True", "")


def test_warming_the_attach_lock_says_nothing_where_it_cannot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No cgroup2 mount, or no ``cgroup.procs`` where one was expected: nothing, and no raise."""
    monkeypatch.setattr(cgroup_module, "_cgroup2_mounts", lambda: [])
    warm_attach_lock()
    monkeypatch.setattr(cgroup_module, "_cgroup2_mounts", lambda: [("/", str(tmp_path))])
    warm_attach_lock()
    assert list(tmp_path.iterdir()) == []  # nothing created where there was no cgroup
    monkeypatch.setattr(cgroup_module, "cgroup_of", lambda _pid: None)
    warm_attach_lock()


def test_a_run_cgroup_holds_everything_below_it_and_is_removed(processes: Processes) -> None:
    cgroup = V2Cgroup.create()
    try:
        assert Path(cgroup.directory).name.startswith(f"tether-{os.getpid()}-")
        assert Path(cgroup.directory, "cgroup.kill").exists()
        first = sleeper_in(cgroup, processes)
        cgroup.close_join()
        assert cgroup.holds(first.pid)
        # A cgroup the command makes below its own is still inside the run's.
        nested = Path(cgroup.directory, "inner")
        nested.mkdir()
        second = processes.start([sys.executable, "-c", "import signal; signal.pause()"])
        (nested / "cgroup.procs").write_text(str(second.pid))
        assert sorted(cgroup.pids()) == sorted([first.pid, second.pid])
        assert cgroup.populated()
        assert cgroup.kill()
        assert first.wait(timeout=BOUND) == -9
        assert second.wait(timeout=BOUND) == -9
        assert not cgroup.populated()
        assert cgroup.remove()
        assert not Path(cgroup.directory).exists()
    finally:
        cgroup.remove()


def test_removing_a_populated_cgroup_kills_what_is_left(processes: Processes) -> None:
    cgroup = V2Cgroup.create()
    popen = sleeper_in(cgroup, processes)
    assert cgroup.discard() is False
    assert cgroup.remove(timeout=BOUND)
    assert popen.wait(timeout=BOUND) == -9
    assert not Path(cgroup.directory).exists()


def test_a_zombie_does_not_keep_a_cgroup(processes: Processes) -> None:
    cgroup = V2Cgroup.create()
    popen = processes.start(["true"], preexec_fn=cgroup.join)
    os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOWAIT)
    # Exited, not reaped: it still says where it was, but the cgroup is empty.
    assert cgroup.holds(popen.pid)
    assert cgroup.pids() == []
    assert cgroup.discard()
    popen.wait()


def test_stale_cgroups_of_dead_supervisors_are_removed_if_empty(processes: Processes) -> None:
    _path, parent = own_cgroup()
    gone = processes.start(["true"])
    gone.wait()
    stale = Path(parent, f"tether-{gone.pid}-0badcafe")
    busy = Path(parent, f"tether-{gone.pid}-0badbeef")
    mine = Path(parent, f"tether-{os.getpid()}-00c0ffee")
    for directory in (stale, busy, mine):
        directory.mkdir()
    squatter = processes.start([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        (busy / "cgroup.procs").write_text(str(squatter.pid))
        remove_stale(parent)
        assert not stale.exists()
        assert busy.exists()  # populated: whatever runs there is not ours to kill
        assert mine.exists()  # its creator is alive
    finally:
        squatter.kill()
        squatter.wait()
        for directory in (stale, busy, mine):
            if directory.exists():
                directory.rmdir()


def test_a_cgroup_holding_processes_or_in_a_thread_subtree_is_refused_as_the_kernel_shows_it(
    processes: Processes,
) -> None:
    """Read from the real files: ``cgroup.procs`` (not the kernel's EBUSY, which a threaded
    controller never gets) and ``cgroup.type`` (a thread root, as ``+pids`` used to leave)."""
    _path, parent = own_cgroup()
    directory = Path(parent, f"tethertest-{os.urandom(4).hex()}")
    directory.mkdir()
    threads = directory / "threads"
    sleeper = processes.start([sys.executable, "-c", "import signal; signal.pause()"])
    try:
        divisible(str(directory))  # empty: it may be divided
        (directory / "cgroup.procs").write_text(str(sleeper.pid))
        with pytest.raises(CgroupUnavailable, match="holds processes of its own"):
            divisible(str(directory))
        threads.mkdir()
        (threads / "cgroup.type").write_text("threaded")  # the parent becomes a thread root
        assert (directory / "cgroup.type").read_text().strip() == "domain threaded"
        with pytest.raises(CgroupUnavailable, match="'domain threaded' cgroup"):
            divisible(str(directory))
        before = (directory / "cgroup.subtree_control").read_text()
        with pytest.raises(CgroupUnavailable):
            enable_controllers(str(directory), ("pids",))
        assert (directory / "cgroup.subtree_control").read_text() == before
    finally:
        sleeper.kill()
        sleeper.wait()
        wait_gone(sleeper.pid)
        for each in (threads, directory):
            with contextlib.suppress(OSError):
                each.rmdir()


_STEP_ASIDE = """
import json, os, sys
from tether.linux.run_cgroups import OwnLeaf
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as procs:
    procs.write("0")  # alone in the cgroup, as a container's entry point is
def where():
    return open("/proc/self/cgroup").read().splitlines()[-1]
seen = {"before": where()}
leaf = OwnLeaf.enter(())
seen["inside"] = where()
seen["procs"] = open(os.path.join(sys.argv[1], "cgroup.procs")).read().split()
seen["leaf"] = leaf.leaf
leaf.leave()
seen["after"] = where()
print(json.dumps(seen))
"""


def test_the_entry_point_steps_into_a_leaf_and_back_on_a_real_kernel() -> None:
    """``tether run`` alone in its cgroup (``OwnLeaf``): it moves into a leaf of its own, the
    cgroup is left empty for the run's cgroup to go beside it, and all is undone after.
    (No controller here: the development machine's v2 hierarchy offers none to enable.)"""
    _path, parent = own_cgroup()
    directory = Path(parent, f"tethertest-{os.urandom(4).hex()}")
    directory.mkdir()
    try:
        result = subprocess.run(
            [sys.executable, "-c", _STEP_ASIDE, str(directory)],
            capture_output=True,
            text=True,
            timeout=BOUND,
            check=True,
        )
        seen = json.loads(result.stdout)
        name = Path(seen["leaf"]).name
        assert seen["before"].endswith(f"/{directory.name}")
        assert name.startswith("tether-")
        assert seen["inside"].endswith(f"/{directory.name}/{name}")
        assert seen["procs"] == []  # the cgroup itself holds nothing while the run goes on
        assert seen["after"] == seen["before"]
        assert not Path(seen["leaf"]).exists()
        assert (directory / "cgroup.subtree_control").read_text().strip() == ""
    finally:
        directory.rmdir()


# -- falling back to the sweep -------------------------------------------------


#: A supervisor's start of ``sys.argv[1:]`` whose run cgroup disappears between its
#: creation and the command's join; what came of it, as JSON.
_VANISHING_CGROUP = """
import json, os, sys
from tether.linux.cgroup import V2Cgroup
from tether.supervisor.command import CommandNotStarted, start_command
from tether.supervisor.launch import LaunchPlan

real_create = V2Cgroup.create

def create(*args, **kwargs):
    made = real_create(*args, **kwargs)
    os.rmdir(made.directory)
    return made

V2Cgroup.create = staticmethod(create)
try:
    command = start_command(LaunchPlan(argv=tuple(sys.argv[1:])))
except CommandNotStarted as failure:
    print(json.dumps({"stage": failure.stage, "errno": failure.errno, "message": failure.message}))
    raise SystemExit(0)
status = os.waitstatus_to_exitcode(os.waitpid(command.pid, 0)[1])
print(json.dumps({"cgroup": command.cgroup is not None, "status": status}))
"""


def start_where_the_cgroup_vanishes(argv: list[str], containment: str) -> dict[str, Any]:
    """``argv`` started as the supervisor starts it, in a process of its own.

    The supervisor forks (this path cannot clone into the cgroup) from a single
    thread; the test's process may have more (a zygote's keeper, once the API ran),
    and Python 3.12 on warns of a fork there (3.14's warning is the same).
    """
    done = subprocess.run(
        [sys.executable, "-P", "-W", "error::DeprecationWarning", "-c", _VANISHING_CGROUP, *argv],
        env={**os.environ, "TETHER_CONTAINMENT": containment},
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_failed_join_falls_back_to_the_sweep_under_auto() -> None:
    assert start_where_the_cgroup_vanishes(["true"], "auto") == {"cgroup": False, "status": 0}


def test_a_failed_join_refuses_to_start_under_cgroup(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    failure = start_where_the_cgroup_vanishes(["touch", str(marker)], "cgroup")
    assert failure["stage"] == "setup"
    assert "could not join its cgroup" in failure["message"]
    # The errno and the step are kept, for the message, the record and the event log.
    assert failure["errno"] is not None
    assert f"(errno {failure['errno']})" in failure["message"]
    assert "/cgroup.procs" in failure["message"]
    assert not marker.exists()


@pytest.fixture
def no_room(processes: Processes) -> Iterator[Path]:
    """A cgroup in which no cgroup may be created (``cgroup.max.descendants`` 0)."""
    _path, parent = own_cgroup()
    directory = Path(parent, f"tethertest-{os.urandom(4).hex()}")
    directory.mkdir()
    (directory / "cgroup.max.descendants").write_text("0")
    yield directory
    for pid in (int(word) for word in (directory / "cgroup.procs").read_text().split()):
        processes.track(pid)
        wait_gone(pid)
    directory.rmdir()


def run_inside(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run from a shell that first moves itself into the cgroup ``directory``."""
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(directory), *argv]


def test_no_room_for_a_cgroup_falls_back_to_the_sweep_silently(
    no_room: Path, processes: Processes, ready: ReadyPipe, tmp_path: Path
) -> None:
    record = tmp_path / "r.json"
    command = fixture("tree", str(ready.path), "--setsid", "1", "--daemon", "1", "--exit", "0")
    argv = tether_argv("run", "--record", str(record), "--", *command)
    caller = processes.start(
        run_inside(no_room, argv),
        env={**os.environ, "TETHER_CONTAINMENT": "auto"},
        stderr=subprocess.PIPE,
    )
    pids = ready.ready_pids()
    processes.track(*pids)
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    processes.track(supervisor)
    assert cgroup_of(pids[0]) == cgroup_of(supervisor)
    _out, err = caller.communicate(timeout=BOUND)
    assert caller.returncode == 0
    assert err == b""
    assert wait_gone(supervisor)
    assert not any(alive(pid) for pid in pids)
    data = read_json(record)
    validate_record(data)
    assert (data["containment"], data["reason"], data["stragglers"]) == ("sweep", "completed", 3)


def test_no_room_for_a_cgroup_refuses_to_start_when_cgroup_is_required(
    no_room: Path, processes: Processes, tmp_path: Path
) -> None:
    record = tmp_path / "r.json"
    marker = tmp_path / "started"
    argv = tether_argv("run", "--record", str(record), "--", "touch", str(marker))
    result = subprocess.run(
        run_inside(no_room, argv),
        env={**os.environ, "TETHER_CONTAINMENT": "cgroup"},
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert result.returncode == 125
    assert "TETHER_CONTAINMENT=cgroup" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists()
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "launch_failed"
    assert isinstance(data["supervisor_pid"], int)
    processes.track(data["supervisor_pid"])
    assert wait_gone(data["supervisor_pid"])


@pytest.mark.parametrize(("setting", "expected"), [("", "cgroup"), ("sweep", "sweep")])
def test_auto_uses_a_cgroup_where_one_can_be_made(
    tmp_path: Path, setting: str, expected: str
) -> None:
    assert cgroup_problem() is None
    record = tmp_path / "r.json"
    result = subprocess.run(
        tether_argv("run", "--record", str(record), "--", "cat", "/proc/self/cgroup"),
        env={**os.environ, "TETHER_CONTAINMENT": setting},
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
    )
    data = read_json(record)
    assert data["containment"] == expected
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("0::")]
    inside = Path(line[3:]).name.startswith(f"tether-{data['supervisor_pid']}-")
    assert inside is (expected == "cgroup")
    _path, parent = own_cgroup()
    assert list(Path(parent).glob(f"tether-{data['supervisor_pid']}-*")) == []


def test_cgroup_kill_reaches_a_process_its_writer_may_not_signal(processes: Processes) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("kill") is None:
        pytest.skip("needs root, and setpriv(1) and kill(1) to act as another user")
    cgroup = V2Cgroup.create()
    try:
        victim = sleeper_in(cgroup, processes)
        cgroup.close_join()
        os.chown(Path(cgroup.directory, "cgroup.kill"), 65534, -1)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        refused = subprocess.run(
            [*nobody, "kill", "-KILL", str(victim.pid)], capture_output=True, timeout=BOUND
        )
        assert refused.returncode != 0
        assert b"not permitted" in refused.stderr
        assert alive(victim.pid)
        kill_file = str(Path(cgroup.directory, "cgroup.kill"))
        subprocess.run([*nobody, "sh", "-c", 'echo 1 > "$0"', kill_file], check=True, timeout=BOUND)
        assert victim.wait(timeout=BOUND) == -9
    finally:
        cgroup.remove()

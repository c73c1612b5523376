"""When the supervisor itself is SIGKILLed, ``tether run`` still leaves evidence and nothing runs.

The detached supervisor is found as the command's parent (the command
announces itself on a FIFO), then SIGKILLed. The caller, ``tether run``, sees
the status pipe end without ``finished``: it must exit 125 with one line on
stderr and write the fallback record (``reason: supervisor_lost``) where the
record was expected. The command itself dies by its parent-death signal
(PDEATHSIG), the backstop for exactly this case.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)


def start_and_lose_the_supervisor(
    processes: Processes, ready: ReadyPipe, tmp_path: Path, *sleeper_options: str
) -> tuple[subprocess.Popen[bytes], list[int], int, Path]:
    """Start ``tether run`` on a sleeper, SIGKILL its supervisor; return what is known."""
    record = tmp_path / "runs" / "lost.json"
    stderr = (tmp_path / "stderr").open("wb")
    caller = processes.start(
        tether_argv(
            "run", "--name", "doomed", "--record", str(record), "--",
            *fixture("sleeper", str(ready.path), *sleeper_options),
        ),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )  # fmt: skip
    stderr.close()
    pids = ready.ready_pids()
    processes.track(*pids)
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    assert supervisor != caller.pid  # detached: the caller is not the command's parent
    processes.track(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    return caller, pids, supervisor, record


def test_a_lost_supervisor_leaves_a_fallback_record_and_a_stopped_command(
    processes: Processes, ready: ReadyPipe, tmp_path: Path
) -> None:
    caller, pids, supervisor, record = start_and_lose_the_supervisor(processes, ready, tmp_path)
    assert caller.wait(timeout=BOUND) == 125
    message = (tmp_path / "stderr").read_text()
    assert len(message.splitlines()) == 1, message
    assert message.startswith("tether: the supervisor was lost")
    assert str(record) in message

    assert wait_gone(pids[0])  # PDEATHSIG
    assert wait_gone(supervisor)

    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "supervisor_lost"
    assert data["supervisor_exit_code"] == 125
    assert (data["supervisor_pid"], data["eval_pid"]) == (supervisor, pids[0])
    assert data["variant"] == "doomed"
    assert data["containment"] == "unknown"
    assert isinstance(data["tether_error"], str)


def test_show_and_ls_tell_an_operator_what_is_known(
    processes: Processes, ready: ReadyPipe, tmp_path: Path
) -> None:
    caller, pids, _, record = start_and_lose_the_supervisor(processes, ready, tmp_path)
    assert caller.wait(timeout=BOUND) == 125
    assert wait_gone(pids[0])
    shown = subprocess.run(
        tether_argv("show", str(record)), capture_output=True, text=True, timeout=BOUND
    )
    assert shown.returncode == 0, shown.stderr
    assert "supervisor_lost" in shown.stdout
    assert f"pid {pids[0]}, fate unknown" in shown.stdout
    # Whatever the supervisor logged before it died is there; never a record_written line.
    document = json.loads(
        subprocess.run(
            tether_argv("show", "--json", str(record)),
            capture_output=True,
            text=True,
            timeout=BOUND,
            check=True,
        ).stdout
    )
    assert document["record"] == read_json(record)
    assert "record_written" not in [event["event"] for event in document["events"]]
    listed = subprocess.run(
        tether_argv("ls", "--json", "--reason", "supervisor_lost", str(record.parent)),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
    )
    assert [item["record_path"] for item in json.loads(listed.stdout)] == [str(record)]


def test_the_commands_children_are_stopped_too(
    processes: Processes, ready: ReadyPipe, tmp_path: Path
) -> None:
    caller, pids, _, _ = start_and_lose_the_supervisor(
        processes, ready, tmp_path, "--children", "1"
    )
    assert caller.wait(timeout=BOUND) == 125
    assert wait_gone(pids[0])
    # PDEATHSIG stops only the leader; the caller SIGKILLs the rest of its group.
    assert wait_gone(pids[1])


@pytest.mark.parametrize("containment", ["sweep", "cgroup"])
def test_the_caller_stops_what_it_can_reach(
    processes: Processes, ready: ReadyPipe, tmp_path: Path, containment: str
) -> None:
    """Group members are always stopped; an escapee only under cgroup containment.

    With the supervisor gone, the caller knows the command's process group and,
    under cgroup containment, the run's cgroup: ``cgroup.kill`` reaches the
    descendant that left the group; ``killpg`` cannot.
    """
    if containment == "cgroup":
        from conftest import skip_without_cgroup

        skip_without_cgroup()
    record = tmp_path / "lost.json"
    caller = processes.start(
        tether_argv(
            "run", "--record", str(record), "--",
            *fixture("tree", str(ready.path), "--group", "1", "--setsid", "1"),
        ),
        env={**os.environ, "TETHER_CONTAINMENT": containment},
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    leader, member, setsid_child, escapee = ready.ready_pids()
    processes.track(leader, member, setsid_child, escapee)
    supervisor = parent_of(leader)
    assert supervisor is not None
    processes.track(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    assert caller.wait(timeout=BOUND) == 125
    assert all(wait_gone(pid) for pid in (leader, member, setsid_child))
    if containment == "cgroup":
        assert wait_gone(escapee)
    else:
        assert alive(escapee)  # out of reach, as docs/containment.md says


# -- every door: one status client ------------------------------------------------------------


def test_tether_timeout_stops_what_is_left_and_leaves_a_record(
    processes: Processes, ready: ReadyPipe, tmp_path: Path
) -> None:
    """The same fallback as ``tether run``: ``tether timeout`` reads the pipe the same way."""
    record = tmp_path / "lost.json"
    caller = processes.start(
        tether_argv(
            "timeout", "--record", str(record), "60",
            *fixture("sleeper", str(ready.path), "--children", "1"),
        ),
        stderr=subprocess.PIPE,
    )  # fmt: skip
    leader, child = ready.ready_pids()
    processes.track(leader, child)
    supervisor = parent_of(leader)
    assert supervisor is not None
    processes.track(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    assert caller.wait(timeout=BOUND) == 125
    assert caller.stderr is not None
    message = caller.stderr.read().decode()
    assert message.startswith("tether timeout: the supervisor was lost"), message
    assert wait_gone(leader)
    assert wait_gone(child)  # the caller SIGKILLed the rest of the group
    data = read_json(record)
    validate_record(data)
    assert (data["reason"], data["eval_pid"]) == ("supervisor_lost", leader)


#: A ``sitecustomize`` that makes the detached supervisor die before it starts anything:
#: as it loads the launch (spawned by the API, or forked from the CLI), which no caller loads.
LOSE_BEFORE_STARTED = """
import os, sys
class _Lose:
    def find_spec(self, name, path=None, target=None):
        if name == "tether.supervisor.launch":
            os._exit(3)
sys.meta_path.insert(0, _Lose())
"""


@pytest.mark.parametrize("door", ["run", "timeout", "api"])
def test_a_supervisor_lost_before_it_started_anything_is_recorded(
    tmp_path: Path, door: str
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LOSE_BEFORE_STARTED)
    record = tmp_path / "runs" / "lost.json"
    marker = tmp_path / "started"
    command = ["touch", str(marker)]
    argv = {
        "run": tether_argv("run", "--record", str(record), "--", *command),
        "timeout": tether_argv("timeout", "--record", str(record), "10", *command),
        "api": [
            sys.executable,
            "-c",
            "import sys, tether\n"
            "try:\n"
            "    tether.launch(sys.argv[2:], record=sys.argv[1])\n"
            "except tether.LaunchError as error:\n"
            "    print(error.exit_status, error.record_path)\n",
            str(record),
            *command,
        ],
    }[door]
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_STATE_HOME": str(tmp_path)}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=BOUND, env=env)
    if door == "api":
        assert result.stdout.split() == ["125", str(record)], result.stderr
    else:
        assert result.returncode == 125, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not marker.exists()
    data = read_json(record)
    validate_record(data)
    assert (data["reason"], data["eval_pid"], data["supervisor_pid"]) == (
        "supervisor_lost",
        None,
        None,
    )


# -- the API: the run's cgroups, whoever made them ----------------------------------------------

_API_LOSES_ITS_SUPERVISOR = """
import sys, tether
handle = tether.launch(sys.argv[2:], record=sys.argv[1])
print(handle.supervisor_pid, flush=True)
print(handle.wait().reason.value, flush=True)
"""


@pytest.mark.parametrize("path", ["zygote", "plain"])
def test_an_api_caller_stops_an_escapee_of_a_lost_supervisor(
    processes: Processes, ready: ReadyPipe, tmp_path: Path, path: str
) -> None:
    """The ``setsid`` grandchild of a run whose supervisor was SIGKILLed is gone: ``cgroup.kill``.

    Through the zygote, the run's cgroup is the zygote's making (named after
    it, not after the supervisor): ``started`` lists it all the same, and the
    caller's fallback kills it once it has checked it is one of tether's own.
    """
    from conftest import skip_without_cgroup

    skip_without_cgroup()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "TETHER_CONTAINMENT": "cgroup"}
    env.pop("TETHER_ZYGOTE", None)
    if path == "plain":
        env["TETHER_ZYGOTE"] = "0"
    caller = processes.start(
        [
            sys.executable, "-c", _API_LOSES_ITS_SUPERVISOR, str(tmp_path / "lost.json"),
            *fixture("tree", str(ready.path), "--setsid", "1"),
        ],
        stdout=subprocess.PIPE,
        env=env,
    )  # fmt: skip
    assert caller.stdout is not None
    leader, setsid_child, escapee = ready.ready_pids()
    supervisor = int(caller.stdout.readline())
    processes.track(leader, setsid_child, escapee, supervisor)
    os.kill(supervisor, signal.SIGKILL)
    assert caller.stdout.readline().split() == [b"supervisor_lost"]
    assert caller.wait(timeout=BOUND) == 0
    assert all(wait_gone(pid) for pid in (leader, setsid_child, escapee))


def test_a_cgroup_not_of_tethers_making_is_never_touched(
    processes: Processes, tmp_path: Path
) -> None:
    """A forged ``started`` naming cgroups tether did not make: the fallback kills none of them.

    Not tether's name, tether's name outside the caller's own cgroup (a plain
    directory too), or a path that climbs out with ``..``: each is refused by
    the check, and a process living in such a cgroup lives on.
    """
    from conftest import skip_without_cgroup

    skip_without_cgroup()
    from tether.caller.fallback import _stop_what_is_left
    from tether.linux.cgroup import V2Cgroup, is_run_cgroup, own_cgroup
    from tether.shared.protocol import Started

    _, own = own_cgroup()
    foreign = Path(own) / f"victim-{os.getpid()}"
    foreign.mkdir()
    ours = V2Cgroup.create()
    victim = processes.start(["sleep", "1000"])
    try:
        (foreign / "cgroup.procs").write_text(str(victim.pid))
        forged = [
            str(foreign),
            str(tmp_path / "tether-1-0123abcd"),
            f"{ours.directory}/../{foreign.name}",
            f"{foreign}/tether-1-0123abcd",
        ]
        assert [is_run_cgroup(directory) for directory in forged] == [False] * 4
        assert is_run_cgroup(ours.directory)
        _stop_what_is_left(Started(supervisor_pid=1, pid=None, pgid=None, cgroups=forged))
        assert victim.poll() is None
        assert not wait_gone(victim.pid, 0.2)
    finally:
        victim.kill()
        victim.wait(timeout=BOUND)
        ours.discard()
        foreign.rmdir()


def test_a_cgroup_v1_directory_is_emptied_without_cgroup_kill(processes: Processes) -> None:
    """cgroup v1 has no ``cgroup.kill``: every process ``cgroup.procs`` lists is SIGKILLed."""
    from tether.linux.cgroup import _own_directories, is_run_cgroup, kill_run_cgroup

    hierarchies = [d for d in _own_directories() if d.startswith("/sys/fs/cgroup/pids")]
    if os.geteuid() != 0 or not hierarchies:
        pytest.skip("needs root and a cgroup v1 pids hierarchy")
    directory = Path(hierarchies[0]) / f"tether-{os.getpid()}-{os.urandom(4).hex()}"
    directory.mkdir()
    try:
        sleepers = [processes.start(["sleep", "1000"]) for _ in range(3)]
        for sleeper in sleepers:
            (directory / "cgroup.procs").write_text(str(sleeper.pid))
        assert is_run_cgroup(str(directory))
        assert not (directory / "cgroup.kill").exists()
        assert kill_run_cgroup(str(directory))
        assert [sleeper.wait(timeout=BOUND) for sleeper in sleepers] == [-signal.SIGKILL] * 3
    finally:
        directory.rmdir()

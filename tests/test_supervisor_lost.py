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

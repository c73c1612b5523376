"""A run whose start goes wrong leaves nothing running and says so: real processes.

A supervisor lost between starting the command and saying ``started``, a fork that fails
(``RLIMIT_NPROC``), a machine without ``/proc``: the caller stops what is left, the failure
is tether's own (125, one line), and no traceback reaches a person.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)

running_as_root = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")
SEED = [sys.executable, "-m", "tether.supervisor"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every door started here: its home and state inside ``tmp_path``."""
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


# -- a supervisor lost between starting the command and saying so ------------------


def _session_members(session: int) -> list[int]:
    """The processes of ``session`` (by /proc), the intermediate's own included."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                raw = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            if int(raw[raw.rindex(")") + 2 :].split()[3]) == session:
                found.append(int(name))
    return found


def _supervisor_of(intermediate: int) -> int:
    """The supervisor the intermediate forked: the other member of its new session."""
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        others = [pid for pid in _session_members(intermediate) if pid != intermediate]
        if others:
            return others[0]
        time.sleep(0.001)
    pytest.fail("no supervisor appeared")


def _stop_at_its_first_child(supervisor: int) -> None:
    """SIGSTOP ``supervisor`` the moment the command, just forked, has a process group of its own.

    The supervisor is then waiting for the command's exec: it has not said
    ``started``, and cannot until it is continued. (Its other child, the
    short-lived one that warms the cgroup lock, stays in its group.)
    """
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children")
    own_group = os.getpgid(supervisor)
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        for child in children.read_bytes().split():
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(int(child)) != own_group:
                    os.kill(supervisor, signal.SIGSTOP)
                    return
    pytest.fail("the supervisor started no command")


def test_a_supervisor_lost_before_it_said_started_leaves_nothing_running(
    tmp_path: Path,
    processes: Processes,
    ready: ReadyPipe,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The supervisor killed after the command started but before ``started`` reached the
    caller: the caller knew nothing of the command, and its children ran on for ever.

    The command's leader died of its parent-death signal, but the two ``sleep``s it had
    started were nobody's to stop. The command now says where it is from between fork and
    exec (``spawned``), so a caller that loses its supervisor at any moment after the fork
    can stop what is left, as it does after ``started``.
    """
    from tether.caller.request import build_request
    from tether.caller.start import send_spec, spawn_supervisor
    from tether.shared.protocol import Started

    monkeypatch.setenv("TETHER_CONTAINMENT", mode)
    script = f'sleep 60 & a=$!; sleep 60 & echo "ready $a $! $$" > "{ready.path}"; wait'
    for attempt in range(5):
        # A record of its own each try: a try that came too late leaves its own record,
        # and the fallback never overwrites a record that is there.
        record = tmp_path / f"r{attempt}.json"
        spec = build_request(["sh", "-c", script], asked_at=time.monotonic(), record=str(record))
        spawn = spawn_supervisor(spec, zygote=False)  # a spawned supervisor, stopped mid-way
        processes.track(spawn.intermediate.pid)
        send_spec(spawn)
        supervisor = _supervisor_of(spawn.intermediate.pid)
        processes.track(supervisor)
        _stop_at_its_first_child(supervisor)
        spawn.intermediate.wait(timeout=BOUND)
        *sleeps, leader = ready.ready_pids()
        processes.track(*sleeps, leader)
        if not any(isinstance(message, Started) for message in spawn.status.read_available()):
            break
        # Too late: the supervisor said "started" before it could be stopped. Again.
        spawn.lifeline.release()
        os.kill(supervisor, signal.SIGCONT)
        spawn.status.wait_finished()
        assert wait_gone(supervisor)
    else:
        pytest.fail("the supervisor always said started before it could be stopped")

    os.kill(supervisor, signal.SIGKILL)
    finished = spawn.status.wait_finished()
    spawn.lifeline.release()

    assert finished.reason == "supervisor_lost"
    for pid in (leader, *sleeps):
        assert wait_gone(pid), f"{pid} outlived the lost supervisor"
    data = read_json(record)
    validate_record(data)
    assert (data["reason"], data["eval_pid"]) == ("supervisor_lost", leader)


# -- a fork that fails ------------------------------------------------------------


@pytest.mark.skipif(
    not running_as_root or SETPRIV is None,
    reason="needs root and setpriv, to run the seed door as a user under RLIMIT_NPROC",
)
def test_a_fork_that_fails_is_tethers_failure_not_the_commands(tmp_path: Path) -> None:
    """A supervisor that could not fork the command (``ulimit -u``: EAGAIN) said the command
    "cannot be executed" (126, ``failed to run command``). It is tether's own failure, as
    GNU timeout says (``fork system call failed``, 125): the command was never tried."""
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chown(runs, 65534, 65534)
    record = runs / "r.json"
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)

    def one_process_at_most() -> None:  # root is not held to it; the user it becomes is
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))

    argv = [
        str(SETPRIV),
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        # Only to reach this interpreter wherever it is installed (a home directory).
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        *SEED,
        "--variant",
        "v",
        "--parent-fd",
        str(read_end),
        "--record",
        str(record),
        "--deadline-seconds",
        "10",
        "--grace-seconds",
        "1",
        "--",
        "true",
    ]
    try:
        result = subprocess.run(
            argv,
            pass_fds=(read_end,),
            preexec_fn=one_process_at_most,
            capture_output=True,
            text=True,
            timeout=BOUND,
            env={**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "s")},
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert result.returncode == 125, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "launch_failed"
    launch_error = data["launch_error"]
    assert isinstance(launch_error, dict)
    assert launch_error["errno_name"] == "EAGAIN"


# -- no /proc -------------------------------------------------------------------


UNSHARE = shutil.which("unshare")


@pytest.mark.skipif(
    not running_as_root or UNSHARE is None,
    reason="needs root and unshare, to run tether in a mount namespace without /proc",
)
@pytest.mark.parametrize("door", ["run", "timeout", "seed"])
def test_without_proc_nothing_is_started_and_it_is_said(
    tmp_path: Path, env: dict[str, str], processes: Processes, door: str
) -> None:
    """Without /proc (a chroot or a container that mounts none), every walk of the tree read
    as empty: ``setsid sleep`` outlived a deadline, and the record said all was stopped
    (``deadline_exceeded``, no descendants). tether now refuses, as it does off Linux."""
    marker = tmp_path / "started"
    script = f'touch "{marker}"; setsid sleep 60 & sleep 60'
    record = tmp_path / "r.json"
    argv = {
        "run": tether_argv(
            "run", "--deadline", "1", "--record", str(record), "--", "sh", "-c", script
        ),
        "timeout": tether_argv("timeout", "--record", str(record), "1", "sh", "-c", script),
        "seed": [
            *SEED,
            "--variant",
            "v",
            "--parent-fd",
            "0",
            "--record",
            str(record),
            "--deadline-seconds",
            "1",
            "--grace-seconds",
            "1",
            "--",
            "sh",
            "-c",
            script,
        ],
    }[door]
    read_end, write_end = os.pipe()
    try:
        result = subprocess.run(
            [str(UNSHARE), "-m", "sh", "-c", 'umount -l /proc && exec "$@"', "sh", *argv],
            env=env,
            stdin=read_end,  # the seed door's lifeline
            capture_output=True,
            text=True,
            timeout=BOUND,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert result.returncode == 125, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "/proc/thread-self/children is missing" in result.stderr
    assert not marker.exists()

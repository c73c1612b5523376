"""Whole-tree containment, with real processes: nothing the command started survives tether.

Every test here runs in both containments, ``sweep`` (process group plus the
subreaper's ``/proc`` walk) and ``cgroup`` (the same, inside a cgroup of the
run's own, ended with ``cgroup.kill``), chosen through ``TETHER_CONTAINMENT``;
the cgroup half is skipped, with the reason, where no writable cgroup v2 exists.

The commands (``fixtures/tree.py``, ``fixtures/fork_storm.py``) announce their
pids on a FIFO, so the tests know whom to look for without sleeping. For the
duration of each test the test process itself is a child subreaper (the
:class:`Adopter`): whatever the supervisor leaves behind when it exits, a
running process or a zombie it did not reap, is re-parented to the test and
found there. After every test nothing of the tree is alive, no zombie is
left, and, in cgroup mode, the run's cgroup is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    state_of,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.linux import proctree
from tether.linux.cgroup import cgroup_of, own_cgroup
from tether.linux.prctl import set_child_subreaper


def run_cgroups(supervisor: int) -> list[Path]:
    """The cgroups a supervisor made beside the test's own (none once it is done)."""
    _path, directory = own_cgroup()
    return sorted(Path(directory).glob(f"tether-{supervisor}-*"))


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def running_with(token: str) -> list[int]:
    """Every live process whose command line holds ``token`` (a test's unique path)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and token in cmdline(int(entry)) and alive(int(entry)):
            found.append(int(entry))
    return found


@contextlib.contextmanager
def no_survivors(token: str) -> Iterator[None]:
    """Whatever happens in the block, SIGKILL (by pid) every process still running with ``token``.

    For trees whose pids the test cannot all know in advance (a fork storm, a
    PID namespace): a failing test must not leak them.
    """
    try:
        yield
    finally:
        for pid in running_with(token):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class Adopter:
    """The test process as a child subreaper, to catch what a supervisor leaves behind.

    ``expected`` holds pids that may legitimately end up here as zombies (the
    detached supervisor itself, whose parent is gone): they are reaped.
    Anything else that arrives is a leak, reported by :meth:`leftovers`.
    """

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.me = os.getpid()
        self.before = set(proctree.children(self.me))
        self.expected: set[int] = set()

    def _adopted(self) -> list[int]:
        started = {popen.pid for popen in self.processes.popens}
        return [pid for pid in proctree.children(self.me) if pid not in self.before | started]

    def leftovers(self) -> list[str]:
        """Reap the expected zombies; describe every other process re-parented to the test."""
        found = []
        for pid in self._adopted():
            if pid in self.expected and state_of(pid) == "Z":
                os.waitpid(pid, 0)
            else:
                found.append(f"{pid} state={state_of(pid)} {cmdline(pid)!r}")
        return found

    def cleanup(self) -> None:
        for pid in self._adopted():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


@pytest.fixture
def adopter(processes: Processes) -> Iterator[Adopter]:
    set_child_subreaper(True)
    made = Adopter(processes)
    try:
        yield made
    finally:
        made.cleanup()
        set_child_subreaper(False)


@dataclass
class Run:
    """One supervised run, as the test sees it."""

    caller: subprocess.Popen[bytes]
    supervisor: int
    record: Path
    mode: str
    pids: list[int] = field(default_factory=list)


def start(
    adopter: Adopter,
    ready: ReadyPipe,
    tmp_path: Path,
    mode: str,
    command: list[str],
    *options: str,
    door: str = "run",
) -> Run:
    """Start ``command`` through ``door`` (``run``: ``tether run``; ``seed``: the seed door).

    Waits for the command's ``ready`` line, learns the supervisor (the
    leader's parent) and, in cgroup mode, checks the leader is in the run's cgroup.
    """
    record = tmp_path / "records" / "run.json"
    env = {**os.environ, "TETHER_CONTAINMENT": mode}
    if door == "run":
        argv = tether_argv("run", "--record", str(record), *options, "--", *command)
    else:
        argv = fixture("seed_caller", str(record), "--", *command)
    caller = adopter.processes.start(argv, env=env, stdout=subprocess.DEVNULL)
    pids = ready.ready_pids()
    adopter.processes.track(*pids)
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    adopter.processes.track(supervisor)
    adopter.expected.add(supervisor)
    if mode == "cgroup":
        where = cgroup_of(pids[0])
        assert where is not None
        assert Path(where).name.startswith(f"tether-{supervisor}-"), where
    return Run(caller=caller, supervisor=supervisor, record=record, mode=mode, pids=pids)


def finish(adopter: Adopter, run: Run, *, status: int | None) -> dict[str, object]:
    """Wait for the run to end; check nothing is left; return the record.

    ``status`` is the caller's expected exit status (``None``: it was killed).
    """
    if status is not None:
        assert run.caller.wait(timeout=BOUND) == status
    assert wait_gone(run.supervisor)
    still = [pid for pid in run.pids if not wait_gone(pid)]
    assert still == [], f"still running: {still}"
    assert adopter.leftovers() == []
    if run.mode == "cgroup":
        assert run_cgroups(run.supervisor) == []
    data = read_json(run.record)
    validate_record(data)
    assert data["containment"] == run.mode
    assert data["unkillable"] is False
    return data


def signal_names(data: dict[str, object]) -> list[str]:
    signals = data["signals"]
    assert isinstance(signals, list)
    return [entry["signal"] for entry in signals]


# -- escapees: setsid() and the double fork -----------------------------------


@pytest.mark.parametrize("door", ["run", "seed"])
def test_escapees_are_stopped_when_the_caller_is_sigkilled(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str, door: str
) -> None:
    command = fixture("tree", str(ready.path), "--group", "1", "--setsid", "1", "--daemon", "1")
    run = start(adopter, ready, tmp_path, mode, command, door=door)
    _leader, *others = run.pids
    assert len(others) == 4
    # The escapees really escaped: another session, and the daemon's parent is gone.
    sessions = {os.getsid(pid) for pid in run.pids}
    assert len(sessions) == 3
    assert parent_of(others[-1]) == run.supervisor
    run.caller.kill()
    data = finish(adopter, run, status=None)
    assert data["reason"] == "parent_lost"
    assert data["supervisor_exit_code"] == 130
    assert data["descendants_stopped"] == 4
    assert data["escalated_to_sigkill"] is False
    assert signal_names(data) == ["SIGTERM", "SIGCONT"]
    assert data["eval_exit_code"] == -signal.SIGTERM


def test_escapees_left_behind_are_stragglers(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    command = fixture("tree", str(ready.path), "--setsid", "1", "--daemon", "1", "--exit", "0")
    run = start(adopter, ready, tmp_path, mode, command)
    data = finish(adopter, run, status=0)
    assert data["reason"] == "completed"
    assert (data["eval_exit_code"], data["supervisor_exit_code"]) == (0, 0)
    assert data["stragglers"] == 3
    assert data["descendants_stopped"] == 3
    assert data["escalated_to_sigkill"] is False
    assert signal_names(data) == ["SIGTERM", "SIGCONT"]


def test_stragglers_that_ignore_sigterm_are_killed_after_the_grace(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    command = fixture(
        "tree", str(ready.path), "--setsid", "1", "--daemon", "1", "--ignore-term", "--exit", "3"
    )
    run = start(adopter, ready, tmp_path, mode, command, "--grace", "0.3")
    data = finish(adopter, run, status=3)
    assert (data["reason"], data["eval_exit_code"], data["stragglers"]) == ("completed", 3, 3)
    assert data["escalated_to_sigkill"] is True
    assert signal_names(data) == ["SIGTERM", "SIGCONT", "SIGKILL"]


def test_grandchildren_ignoring_sigterm_are_killed_after_the_grace(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    command = fixture(
        "tree", str(ready.path), "--group", "1", "--setsid", "1", "--daemon", "1", "--ignore-term"
    )
    run = start(adopter, ready, tmp_path, mode, command, "--grace", "0.3")
    run.caller.send_signal(signal.SIGTERM)
    data = finish(adopter, run, status=130)
    assert data["reason"] == "cancelled"
    # The command itself died of SIGTERM; only its descendants held out.
    assert data["eval_exit_code"] == -signal.SIGTERM
    assert data["escalated_to_sigkill"] is True
    signals = data["signals"]
    assert isinstance(signals, list)
    assert [entry["signal"] for entry in signals] == ["SIGTERM", "SIGCONT", "SIGKILL"]
    # Times are rounded to the millisecond in the record: allow for that, no more.
    assert signals[2]["at_seconds"] - signals[0]["at_seconds"] >= 0.3 - 0.0015
    assert signals[2]["processes"] == 4
    assert data["descendants_stopped"] == 4


# -- a fork storm --------------------------------------------------------------


def test_a_fork_storm_is_fully_stopped(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    log = tmp_path / "storm.log"
    command = fixture("fork_storm", str(ready.path), str(log))
    with no_survivors(str(log)):
        run = start(adopter, ready, tmp_path, mode, command, "--grace", "0.2")
        # Mid-storm: the leader has just forked its first child and goes on.
        run.caller.send_signal(signal.SIGTERM)
        data = finish(adopter, run, status=130)
    storm = [int(word) for word in log.read_text().split()]
    assert len(storm) > 10
    assert [pid for pid in storm if alive(pid)] == []
    assert running_with(str(log)) == []
    assert data["escalated_to_sigkill"] is True
    assert data["reason"] == "cancelled"
    assert isinstance(data["descendants_stopped"], int)
    assert data["descendants_stopped"] > 0


# -- the supervisor itself SIGKILLed: the PDEATHSIG backstop ------------------


def test_supervisor_sigkilled_takes_the_command_down_but_only_the_command(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    # Through the seed door, whose caller does nothing when the supervisor is
    # lost (tether run's caller would SIGKILL the group itself): what is
    # stopped here is stopped by the backstop alone.
    command = fixture("tree", str(ready.path), "--group", "1", "--setsid", "1")
    run = start(adopter, ready, tmp_path, mode, command, door="seed")
    leader, *others = run.pids
    cgroup = cgroup_of(leader)
    os.kill(run.supervisor, signal.SIGKILL)
    assert wait_gone(run.supervisor)
    # PR_SET_PDEATHSIG(SIGKILL): the command's leader dies with its supervisor...
    assert wait_gone(leader)
    # ... and nothing else does: the backstop reaches the direct child only.
    assert all(alive(pid) for pid in others)
    if mode == "cgroup":
        # They are still in the run's cgroup, where one write ends them all.
        assert all(cgroup_of(pid) == cgroup for pid in others)
        (directory,) = run_cgroups(run.supervisor)
        (directory / "cgroup.kill").write_text("1")
        assert all(wait_gone(pid) for pid in others)
        # Another supervisor's sweep of stale cgroups may have removed it first:
        # its creator is gone.
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()
    else:
        for pid in others:
            os.kill(pid, signal.SIGKILL)
        assert all(wait_gone(pid) for pid in others)
    run.caller.wait(timeout=BOUND)
    # The dead supervisor's children came to the test (the seed caller's too); reap them.
    adopter.expected.update(run.pids)
    assert adopter.leftovers() == []


# -- a stopped command ---------------------------------------------------------


def test_a_stopped_command_is_stopped_cleanly(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    command = fixture("tree", str(ready.path), "--group", "2", "--handle-term", "--stop")
    run = start(adopter, ready, tmp_path, mode, command, "--grace", "60")
    assert ready.line() == ["stopped"]
    assert all(state_of(pid) == "T" for pid in run.pids[1:])
    run.caller.send_signal(signal.SIGTERM)
    # Every process ran its SIGTERM handler, so SIGCONT reached it: a grace
    # of 60 s cannot have run out within the bound of this wait.
    handled = {ready.line()[1] for _ in run.pids}
    assert handled == {str(pid) for pid in run.pids}
    data = finish(adopter, run, status=130)
    assert data["escalated_to_sigkill"] is False
    assert signal_names(data) == ["SIGTERM", "SIGCONT"]


# -- escapes that are not escapes ---------------------------------------------


def test_a_descendant_that_changes_its_uid_is_still_stopped(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can make a descendant change its uid")
    script = (
        "import os, signal, sys\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    os.setsid()\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "    fifo = os.open(sys.argv[1], os.O_WRONLY)\n"
        "    os.setgid(65534); os.setuid(65534)\n"
        "    os.write(fifo, f'ready {os.getppid()} {os.getpid()}\\n'.encode())\n"
        "    while True: signal.pause()\n"
        "os.waitpid(child, 0)\n"
    )
    command = [sys.executable, "-c", script, str(ready.path)]
    run = start(adopter, ready, tmp_path, mode, command, "--grace", "0.2")
    assert os.stat(f"/proc/{run.pids[1]}").st_uid == 65534
    run.caller.kill()
    data = finish(adopter, run, status=None)
    assert data["escalated_to_sigkill"] is True


def test_a_descendant_in_a_new_pid_namespace_is_still_stopped(
    adopter: Adopter, ready: ReadyPipe, tmp_path: Path, mode: str
) -> None:
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=BOUND, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode().strip()}")
    # tree.py runs as init of the new namespace; the pids it announces are the
    # namespace's own, so the test finds the tree by its FIFO path instead.
    command = [
        "unshare",
        "--pid",
        "--fork",
        "--",
        *fixture("tree", str(ready.path), "--setsid", "1", "--daemon", "1"),
    ]
    env = {**os.environ, "TETHER_CONTAINMENT": mode}
    record = tmp_path / "run.json"
    with no_survivors(str(ready.path)):
        caller = adopter.processes.start(
            tether_argv("run", "--record", str(record), "--grace", "0.3", "--", *command),
            env=env,
            stdout=subprocess.DEVNULL,
        )
        assert ready.ready_pids()[0] == 1
        # The caller's command line names the FIFO too, and so does its forked supervisor's.
        tether_line = cmdline(caller.pid)
        tree = [pid for pid in running_with(str(ready.path)) if cmdline(pid) != tether_line]
        # unshare, the namespace's init (tree.py) and its three descendants.
        assert len(tree) == 5
        (leader,) = [pid for pid in tree if parent_of(pid) not in tree]
        supervisor = parent_of(leader)
        assert supervisor is not None
        adopter.expected.add(supervisor)
        run = Run(caller=caller, supervisor=supervisor, record=record, mode=mode, pids=tree)
        caller.kill()
        data = finish(adopter, run, status=None)
        assert running_with(str(ready.path)) == []
    assert data["reason"] == "parent_lost"
    # The namespace's init ignores a SIGTERM it has no handler for, even from
    # outside (and unshare ignores SIGTERM while it waits): only SIGKILL ends
    # them, and the init's death ends its whole namespace.
    assert data["escalated_to_sigkill"] is True


# -- choosing the containment ---------------------------------------------------


def test_an_unknown_containment_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    record = tmp_path / "r.json"
    result = subprocess.run(
        tether_argv("run", "--record", str(record), "--", "touch", str(marker)),
        env={**os.environ, "TETHER_CONTAINMENT": "jail"},
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert result.returncode == 125
    assert "TETHER_CONTAINMENT must be one of auto, sweep, cgroup" in result.stderr
    assert not marker.exists()
    assert read_json(record)["reason"] == "launch_failed"

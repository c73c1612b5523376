"""The supervisor keeps its promise whatever goes wrong inside it: real processes, real faults.

* **Too few descriptors.** Under a low ``RLIMIT_NOFILE`` (the caller's, which
  the supervisor shares so that the command gets it), a supervisor either
  refuses to start the command (too few free to watch it and walk its tree)
  or stops every process of the tree, by pid where no pidfd can be had, and
  says so in the record (``signals_without_pidfd``). The reserve of spare
  descriptors and the walk's honesty (a walk it could not read is not an empty
  tree) are shown on their own, in a process whose table is full.
* **A failure inside.** An exception in the loop (injected by replacing one
  method in a wrapper process, since no environment switch in the product
  may trigger it), or a real full disk under the record and event log: the
  tree, a ``setsid()`` escapee included, is SIGKILLed, the run exits 125
  with one line on stderr and no traceback, and no cgroup is left.
* **Junk on the lifeline.** A mebibyte of bytes that are not requests costs
  the event log a few lines, and a request buried in it is still honoured.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    fixture,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.core.machine import DEFAULT_SETTLE_SECONDS
from tether.linux.cgroup import own_cgroup
from tether.shared.lifeline import LifelineDecoder
from tether.supervisor import last_resort

#: A mebibyte of bytes that are no request (see tether.shared.protocol).
_NOT_REQUESTS = bytes(byte for byte in range(0x80) if byte not in b"ckztr")
JUNK = (_NOT_REQUESTS * ((1 << 20) // len(_NOT_REQUESTS) + 1))[: 1 << 20]

#: Replace one method of the loop with a fault, then run the seed door as
#: ``python -m tether.supervisor`` would: no switch in the product is needed.
INJECT_FAULT = """
import runpy
import tether.supervisor.loop as loop

def fault(self, now):
    raise RuntimeError("injected fault")

loop.Supervision._observe_tree = fault
runpy.run_module("tether.supervisor", run_name="__main__", alter_sys=True)
"""


def run_cgroups(supervisor: int) -> list[Path]:
    """The cgroups a supervisor made beside the test's own (none once it is done)."""
    _path, directory = own_cgroup()
    return sorted(Path(directory).glob(f"tether-{supervisor}-*"))


def descriptor_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that lowers the open-file limit (soft and hard) to ``limit``."""

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


@dataclass
class SeedRun:
    """One run through the seed door, with the test as the worker holding the lifeline."""

    supervisor: subprocess.Popen[bytes]
    lifeline: int
    record: Path
    stderr: Path

    @property
    def events(self) -> Path:
        return self.record.with_name(self.record.stem + ".events.jsonl")

    def write(self, data: bytes) -> None:
        """Write all of ``data`` on the lifeline (blocking while the supervisor reads it)."""
        while data:
            data = data[os.write(self.lifeline, data) :]

    def close_lifeline(self) -> None:
        if self.lifeline >= 0:
            os.close(self.lifeline)
            self.lifeline = -1

    def event_lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.events.read_text().splitlines()]

    def stderr_lines(self) -> list[str]:
        return self.stderr.read_text().splitlines()


@pytest.fixture
def seed(processes: Processes, tmp_path: Path) -> Iterator[Callable[..., SeedRun]]:
    """Start seed-door runs (``python -m tether.supervisor``); their lifelines close at teardown."""
    runs: list[SeedRun] = []

    def start(
        command: list[str],
        *,
        mode: str = "sweep",
        limit: int | None = None,
        record: Path | None = None,
        grace: str = "0.2",
        inject_fault: bool = False,
        flags: tuple[str, ...] = (),
    ) -> SeedRun:
        number = len(runs)
        record = record or tmp_path / f"records-{number}" / "run.json"
        stderr = tmp_path / f"stderr-{number}.txt"
        read_end, write_end = os.pipe()
        options = ["--variant", "faults", "--parent-fd", str(read_end), "--record", str(record)]
        options += flags
        options += ["--deadline-seconds", "0", "--grace-seconds", grace, "--", *command]
        if inject_fault:
            argv = [sys.executable, "-c", INJECT_FAULT, *options]
        else:
            argv = [sys.executable, "-m", "tether.supervisor", *options]
        env = {
            **os.environ,
            "TETHER_CONTAINMENT": mode,
            "HOME": str(tmp_path),
            "XDG_STATE_HOME": str(tmp_path),
        }
        with stderr.open("wb") as sink:
            supervisor = processes.start(
                argv,
                pass_fds=(read_end,),
                env=env,
                stderr=sink,
                preexec_fn=None if limit is None else descriptor_limit(limit),
            )
        os.close(read_end)
        run = SeedRun(supervisor=supervisor, lifeline=write_end, record=record, stderr=stderr)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.close_lifeline()


def ready_or_exit(ready: ReadyPipe, supervisor: subprocess.Popen[bytes]) -> list[int] | None:
    """The pids on the command's ``ready`` line, or ``None`` if the supervisor exited first."""
    pidfd = os.pidfd_open(supervisor.pid)
    try:
        fifo = os.open(ready.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            readable, _, _ = select.select([fifo, pidfd], [], [], BOUND)
        finally:
            os.close(fifo)
    finally:
        os.close(pidfd)
    if readable == [pidfd]:
        return None
    return ready.ready_pids()


def escapee_tree(ready: ReadyPipe) -> list[str]:
    """A command whose child stays in its group and whose grandchild calls ``setsid()``.

    Every process but the leader ignores SIGTERM, so the grandchild must be
    found, and SIGKILLed, outside the group.
    """
    return fixture("tree", str(ready.path), "--setsid", "1", "--ignore-term")


def assert_all_gone(pids: list[int]) -> None:
    still = [pid for pid in pids if not wait_gone(pid)]
    assert still == [], f"still running: {still}"


def assert_one_line_no_traceback(run: SeedRun, starting: str) -> None:
    lines = run.stderr_lines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(starting), lines
    assert "Traceback" not in run.stderr.read_text()


# -- too few descriptors ------------------------------------------------------


#: The lowest open-file limit under which the seed door starts a command, per mode.
_floors: dict[str, int] = {}


def _interpreter_holds() -> int:
    """Descriptors the interpreter itself keeps once the supervisor has loaded ``_ctypes``.

    A libffi with static trampolines (Debian's 3.5, under its Python 3.14 and 3.15)
    keeps its own library open from then on; older ones keep nothing.
    """
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; before = len(os.listdir('/proc/self/fd')); import _ctypes; "
            "print(len(os.listdir('/proc/self/fd')) - before)",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=BOUND,
    )
    return int(probe.stdout)


#: Where the search starts: stdin, stdout, stderr, the lifeline, what the interpreter
#: keeps for itself, and one to import with. Under fewer, the interpreter cannot load
#: the supervisor at all. From here every limit is the supervisor's to refuse,
#: including one that leaves no descriptor for its signal pipe.
_FEWEST = 5 + _interpreter_holds()


def start_at_the_floor(
    seed: Callable[..., SeedRun], ready: ReadyPipe, mode: str
) -> tuple[SeedRun, list[int]]:
    """Start the escapee tree under the lowest open-file limit the seed door accepts.

    Searched rather than written down, so that one more descriptor in the
    supervisor does not make the tests lie. Every lower limit must be a clean
    refusal: status 125, no command, no traceback, the refusal in one line (and in
    the event log, where a descriptor was left to open it).
    """
    for limit in range(_floors.get(mode, _FEWEST), 32):
        run = seed(escapee_tree(ready), mode=mode, limit=limit)
        pids = ready_or_exit(ready, run.supervisor)
        if pids is not None:
            _floors[mode] = limit
            return run, pids
        assert run.supervisor.wait(timeout=BOUND) == 125
        said = run.stderr.read_text()
        assert "Traceback" not in said
        assert said.count("\n") == 1
        assert "too few file descriptors" in said
        # The event log says it too, where there was a descriptor left to open it.
        if run.events.exists():
            (refusal,) = [line for line in run.event_lines() if line["event"] == "launch_failed"]
            assert "too few file descriptors" in str(refusal["error"])
    pytest.fail("the seed door started nothing under any open-file limit below 32")


def stop_and_check(run: SeedRun, pids: list[int]) -> dict[str, object]:
    """Close the lifeline; check the whole tree is gone; return the record."""
    run.close_lifeline()
    assert run.supervisor.wait(timeout=BOUND) == 130
    assert_all_gone(pids)
    assert run_cgroups(run.supervisor.pid) == []
    data = read_json(run.record)
    validate_record(data)
    assert (data["reason"], data["unkillable"]) == ("parent_lost", False)
    by_pid = [line for line in run.event_lines() if line["event"] == "signal_by_pid"]
    assert data["signals_without_pidfd"] == len(by_pid)
    return data


def test_under_the_lowest_limit_accepted_the_escapee_is_still_stopped(
    seed: Callable[..., SeedRun], ready: ReadyPipe, processes: Processes, mode: str
) -> None:
    """At the floor, the setsid() grandchild that ignores SIGTERM is found and SIGKILLed.

    Whether a pidfd could be had for it depends on how many descriptors the
    supervisor holds while watching (one per pidfd and one for its check);
    a signal sent by pid is counted and logged either way (``stop_and_check``),
    and the fall back itself is shown with a full descriptor table in
    ``test_a_full_table_borrows_from_the_reserve_and_never_reads_as_an_empty_tree``.
    """
    run, pids = start_at_the_floor(seed, ready, mode)
    processes.track(*pids)
    data = stop_and_check(run, pids)
    by_pid = {line["pid"] for line in run.event_lines() if line["event"] == "signal_by_pid"}
    assert by_pid <= {pids[2]}
    assert data["escalated_to_sigkill"] is True


@pytest.mark.parametrize("above_the_floor", [1, 3, 1000])
def test_above_the_lowest_limit_accepted_the_whole_tree_is_stopped(
    seed: Callable[..., SeedRun],
    ready: ReadyPipe,
    processes: Processes,
    mode: str,
    above_the_floor: int,
) -> None:
    if mode not in _floors:
        floor_run, floor_pids = start_at_the_floor(seed, ready, mode)
        processes.track(*floor_pids)
        stop_and_check(floor_run, floor_pids)
    run = seed(escapee_tree(ready), mode=mode, limit=_floors[mode] + above_the_floor)
    pids = ready.ready_pids()
    processes.track(*pids)
    data = stop_and_check(run, pids)
    if above_the_floor == 1000:
        assert data["signals_without_pidfd"] == 0


#: Run in a process whose descriptor table the script itself fills: the tree
#: below it is three processes out of its leader's group (two children, one
#: in a session of its own, and a grandchild); each answer is one JSON line.
FULL_TABLE = """
import json, os, resource, signal, sys
from tether.linux.prctl import set_child_subreaper
from tether.supervisor.process_tree import UNSEEN, ProcessTree
from tether.supervisor.reserve import DescriptorReserve

resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

def pause_for_ever():
    while True:
        signal.pause()

def child(body, *, own_group=False):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    if own_group:
        # The parent too, as a shell does: the group exists when fork returns,
        # not whenever the child gets round to its own setpgid.
        os.setpgid(pid, pid)
    return pid

report_r, report_w = os.pipe()

def leader():
    os.setpgid(0, 0)
    pause_for_ever()

def middle():
    os.setsid()
    os.write(report_w, f"{child(pause_for_ever)}\\n".encode())
    pause_for_ever()

def sessionless():
    os.setsid()
    pause_for_ever()

# As the supervisor is: orphans come back to this process.
set_child_subreaper()
pids = [child(leader, own_group=True), child(sessionless), child(middle)]
with os.fdopen(report_r) as reports:
    pids.append(int(reports.readline()))
print(json.dumps(pids), flush=True)
leader_pid = pids[0]
pidfd = os.pidfd_open(leader_pid)

def fill():
    filler = []
    try:
        while True:
            filler.append(os.dup(0))
    except OSError:
        return filler

def tree(spares):
    return ProcessTree(leader=leader_pid, pgid=leader_pid, pidfd=pidfd, reserve=spares)

blind = tree(DescriptorReserve())
filler = fill()
answers = {"blind": blind.others()}
for fd in filler:
    os.close(fd)

reserve = DescriptorReserve.take(2, leave=0)
filler = fill()
seeing = tree(reserve)
answers["seeing"] = seeing.others()
answers["spares_after"] = len(reserve)
for fd in filler:
    os.close(fd)

reserve = DescriptorReserve.take(1, leave=0)
filler = fill()
killing = tree(reserve)
killing.signal(signal.SIGKILL)
answers["without_pidfd"] = killing.signals_without_pidfd
for fd in filler:
    os.close(fd)
answers["unseen"] = UNSEEN
print(json.dumps(answers), flush=True)
"""


def test_a_full_table_borrows_from_the_reserve_and_never_reads_as_an_empty_tree(
    processes: Processes,
) -> None:
    script = processes.script(FULL_TABLE)
    assert script.stdout is not None
    pids = json.loads(script.stdout.readline())
    processes.track(*pids)
    leader, *others = pids
    out, err = script.communicate(timeout=BOUND)
    assert script.returncode == 0, err.decode()
    answers = json.loads(out)
    # A walk that could open nothing is "something unseen", never "nothing left".
    assert answers["blind"] == [answers["unseen"]]
    # With spares, the walk borrows one and sees everything; the spares come back.
    assert answers["seeing"] == sorted(others)
    assert answers["spares_after"] == 2
    # With one spare, a pidfd and its check cannot both be had: each escapee
    # is signalled by its pid, checked first, and dies.
    assert answers["without_pidfd"] == 3
    assert_all_gone(pids)
    assert not alive(leader)


# -- a failure inside the supervisor ------------------------------------------


def test_the_last_resort_waits_as_long_as_the_core() -> None:
    assert last_resort.SETTLE_SECONDS == DEFAULT_SETTLE_SECONDS


def test_a_crash_in_the_loop_still_stops_the_tree(
    seed: Callable[..., SeedRun], ready: ReadyPipe, processes: Processes, mode: str
) -> None:
    command = [*escapee_tree(ready), "--exit", "0"]
    run = seed(command, mode=mode, inject_fault=True)
    pids = ready.ready_pids()
    processes.track(*pids)
    # The leader's exit is looked at by the replaced method, which raises.
    assert run.supervisor.wait(timeout=BOUND) == 125
    assert_all_gone(pids)
    assert run_cgroups(run.supervisor.pid) == []
    assert_one_line_no_traceback(
        run, "tether: internal error in the supervisor (RuntimeError: injected fault)"
    )
    assert "every process of the run was killed" in run.stderr_lines()[0]
    assert "internal_error" in [line["event"] for line in run.event_lines()]
    assert not run.record.exists()


class SmallDisk:
    """A directory on a 64 KiB tmpfs of its own, filled to the last block on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> None:
        with contextlib.suppress(OSError), (self.path / "filler").open("wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        timeout=BOUND,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield SmallDisk(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], timeout=BOUND)


def test_a_disk_full_under_the_event_log_still_stops_the_tree_at_the_seed_door(
    seed: Callable[..., SeedRun],
    ready: ReadyPipe,
    processes: Processes,
    small_disk: SmallDisk,
    mode: str,
) -> None:
    run = seed(escapee_tree(ready), mode=mode, record=small_disk.path / "records" / "run.json")
    pids = ready.ready_pids()
    processes.track(*pids)
    # Full once the run is watched: the next line of the event log, and the
    # record, meet ENOSPC.
    small_disk.fill()
    run.close_lifeline()
    # Whether the loop fails on the event log or carries on to a record that
    # cannot be written, the run is tether's failure and nothing survives it.
    assert run.supervisor.wait(timeout=BOUND) == 125
    assert_all_gone(pids)
    assert run_cgroups(run.supervisor.pid) == []
    assert_one_line_no_traceback(run, "tether: ")
    assert "No space left on device" in run.stderr_lines()[0]


def test_a_disk_full_under_the_event_log_still_stops_the_tree_through_tether_run(
    ready: ReadyPipe, processes: Processes, small_disk: SmallDisk, tmp_path: Path, mode: str
) -> None:
    record = small_disk.path / "records" / "run.json"
    stderr = tmp_path / "stderr.txt"
    env = {
        **os.environ,
        "TETHER_CONTAINMENT": mode,
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path),
    }
    with stderr.open("wb") as sink:
        caller = processes.start(
            tether_argv("run", "--record", str(record), "--", *escapee_tree(ready)),
            env=env,
            stderr=sink,
            stdout=subprocess.DEVNULL,
        )
    pids = ready.ready_pids()
    processes.track(*pids)
    small_disk.fill()
    caller.send_signal(signal.SIGINT)  # Ctrl-C: a cancel request on the lifeline
    assert caller.wait(timeout=BOUND) == 125
    assert_all_gone(pids)
    lines = stderr.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tether: "), lines
    assert "No space left on device" in lines[0]


# -- junk on the lifeline -----------------------------------------------------


def test_lifeline_bytes_are_requests_once_and_junk_counted() -> None:
    tally = LifelineDecoder()
    assert tally.decode(b"xxkyycqqc") == [b"k", b"c"]
    assert tally.decode(b"ckc") == []
    assert tally.unknown == 6
    assert tally.unknown_report_due()
    assert not tally.unknown_report_due()
    tally.decode(b"?" * 6)
    assert tally.unknown_report_due()  # 12: past twice 6
    tally.decode(b"?" * 11)
    assert not tally.unknown_report_due()  # 23: short of twice 12
    tally.decode(b"?")
    assert tally.unknown_report_due()


def test_a_mebibyte_of_junk_on_the_lifeline_keeps_the_log_small(
    seed: Callable[..., SeedRun], ready: ReadyPipe, processes: Processes
) -> None:
    run = seed(fixture("sleeper", str(ready.path)))
    processes.track(*ready.ready_pids())
    run.write(JUNK)
    run.close_lifeline()
    assert run.supervisor.wait(timeout=BOUND) == 130
    assert read_json(run.record)["reason"] == "parent_lost"
    assert run.events.stat().st_size < 64 * 1024
    lines = run.event_lines()
    (closed,) = [line for line in lines if line["event"] == "lifeline_closed"]
    assert closed["unknown_bytes"] == len(JUNK)
    assert not [line for line in lines if line["event"] == "lifeline_request"]


def test_a_request_buried_in_junk_is_honoured_once(
    seed: Callable[..., SeedRun], ready: ReadyPipe, processes: Processes
) -> None:
    run = seed(fixture("sleeper", str(ready.path), "--note-term"), grace="60")
    (pid,) = ready.ready_pids()
    processes.track(pid)
    half = len(JUNK) // 2
    run.write(JUNK[:half] + b"c" + JUNK[half:] + b"c" * 1000)
    assert ready.line() == ["term", str(pid)]
    run.write(b"k")
    assert run.supervisor.wait(timeout=BOUND) == 130
    data = read_json(run.record)
    assert (data["reason"], data["escalated_to_sigkill"]) == ("cancelled", True)
    assert run.events.stat().st_size < 64 * 1024
    lines = run.event_lines()
    assert [line["request"] for line in lines if line["event"] == "lifeline_request"] == ["c", "k"]

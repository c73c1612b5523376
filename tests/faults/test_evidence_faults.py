"""The evidence under attack and under faults: never a way in, never the cost of a run.

Real callers (``tether run``, the seed door), real commands, real file
systems: a record directory swapped for a link while the command runs, a
stranger's link on the path, a FIFO at the event log's name, a tmpfs that is
full, a descriptor table that is. Each test checks the three things that must
hold whatever happens to the files: the command's tree is stopped, nothing is
written anywhere but where it was meant to go, and what went wrong is said in
one line with a documented status.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    FIXTURES,
    Processes,
    ReadyPipe,
    fixture,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.caller.request import build_request
from tether.caller.start import send_spec, spawn_supervisor
from tether.core.redaction import Redactor
from tether.shared.record_file import (
    RecordError,
    check_record_path,
    hold_record_directory,
    write_record,
)

running_as_root = os.geteuid() == 0
NOBODY = 65534


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every door here: never the real home."""
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}


class Run:
    """One run through a door, as its caller: the process, its stderr, and how to stop it."""

    def __init__(self, process: subprocess.Popen[bytes], stderr: Path, lifeline: int | None):
        self.process = process
        self.stderr = stderr
        self.lifeline = lifeline

    def cancel(self) -> None:
        """Ask for a graceful stop, as the door's caller does."""
        if self.lifeline is None:
            self.process.send_signal(signal.SIGINT)  # Ctrl-C: tether run asks for a cancel
        else:
            os.write(self.lifeline, b"c")

    def kill_now(self) -> None:
        """Ask for SIGKILL now (a second Ctrl-C; ``k`` on the seed door's pipe)."""
        if self.lifeline is None:
            self.process.send_signal(signal.SIGINT)
        else:
            os.write(self.lifeline, b"k")

    def finish(self) -> tuple[int, list[str]]:
        """Wait for the door to exit; return its status and its stderr's lines."""
        status = self.process.wait(timeout=BOUND)
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        return status, self.stderr.read_text().splitlines()


class Door:
    """``tether run`` or the seed door, started the same way by every test."""

    def __init__(self, name: str, processes: Processes, env: dict[str, str], tmp_path: Path):
        self.name = name
        self.processes = processes
        self.env = env
        self.tmp_path = tmp_path
        self.runs = 0

    @property
    def refusal_prefix(self) -> str:
        """How the door starts a refusal before anything started."""
        return "tether: " if self.name == "run" else "python -m tether.supervisor: error: "

    def start(
        self, record: Path, command: list[str], *, deadline: str = "0", grace: str = "5"
    ) -> Run:
        self.runs += 1
        stderr = self.tmp_path / f"stderr-{self.name}-{self.runs}.txt"
        with stderr.open("wb") as err:
            if self.name == "run":
                argv = tether_argv(
                    "run", "--record", str(record), "--deadline", deadline, "--grace", grace
                )
                process = self.processes.start(
                    [*argv, "--", *command],
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env=self.env,
                )
                return Run(process, stderr, None)
            read_end, write_end = os.pipe()
            argv = [sys.executable, "-m", "tether.supervisor", "--variant", "faults"]
            argv += ["--parent-fd", str(read_end), "--record", str(record)]
            argv += ["--deadline-seconds", deadline, "--grace-seconds", grace]
            process = self.processes.start(
                [*argv, "--", *command],
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=self.env,
                pass_fds=(read_end,),
            )
            os.close(read_end)
            return Run(process, stderr, write_end)


@pytest.fixture(params=["run", "seed"])
def door(
    request: pytest.FixtureRequest, processes: Processes, env: dict[str, str], tmp_path: Path
) -> Door:
    return Door(request.param, processes, env, tmp_path)


def started(ready: ReadyPipe, processes: Processes) -> list[int]:
    """Wait until the command announces itself; track it; return its pids."""
    pids = ready.ready_pids()
    processes.track(*pids)
    return pids


def announce_loop_running(door: Door) -> ReadyPipe:
    """Have the door's supervisor say ``running PID`` once its loop (not the sentry) watches.

    Through the test hook ``fixtures/slow_loop``; for tests whose point is what
    the loop does with a request, not what the sentry does before it runs.
    """
    running = ReadyPipe(door.tmp_path / f"running-{door.runs}.fifo")
    door.env["PYTHONPATH"] = os.pathsep.join(
        path for path in (str(FIXTURES / "slow_loop"), door.env.get("PYTHONPATH")) if path
    )
    door.env["TETHER_TEST_LOOP_RUNNING"] = str(running.path)
    return running


def wait_for_the_loop(running: ReadyPipe) -> None:
    try:
        assert running.line()[0] == "running"
    finally:
        running.close()


def all_gone(pids: list[int]) -> bool:
    return all(wait_gone(pid) for pid in pids)


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def events_of(record: Path) -> Path:
    return record.with_name(record.stem + ".events.jsonl")


def log_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- the record's directory is held, not looked up again ---------------------------


def a_victim(workdir: Path, holds: str = "target.json") -> Path:
    """A directory the attacker would like tether to write into, and its precious file."""
    victim = workdir / "victim"
    victim.mkdir(parents=True)
    (victim / holds).write_text("precious\n")
    return victim


def untouched(victim: Path, holds: str = "target.json") -> bool:
    return sorted(os.listdir(victim)) == [holds] and (victim / holds).read_text() == "precious\n"


def test_a_directory_swapped_for_a_link_during_the_run_is_never_written_through(
    door: Door, ready: ReadyPipe, processes: Processes, tmp_path: Path
) -> None:
    """``rm -rf runs; ln -s victim runs`` while the command runs: the victim keeps its file."""
    workdir = tmp_path / "work"
    victim = a_victim(workdir)
    runs = workdir / "runs"
    record = runs / "target.json"
    run = door.start(record, fixture("sleeper", str(ready.path)))
    pids = started(ready, processes)
    shutil.rmtree(runs)
    runs.symlink_to("victim")
    run.cancel()
    status, lines = run.finish()
    assert status == 125
    assert len(lines) == 1
    said = f"tether: cannot write the record: {record}: its directory was removed"
    assert lines[0].startswith(said), lines
    # The log was opened before the swap (and written to the removed directory)
    # or after it (and refused): through the link, never.
    assert lines[0].endswith(
        ("(the record is not written anywhere else)", ": its directory was removed")
    ), lines
    assert all_gone(pids)
    assert untouched(victim)


def test_a_directory_removed_during_the_run_is_not_made_again(
    door: Door, ready: ReadyPipe, processes: Processes, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    record = runs / "r.json"
    run = door.start(record, fixture("sleeper", str(ready.path), "--children", "1"))
    pids = started(ready, processes)
    shutil.rmtree(runs)
    run.cancel()
    status, lines = run.finish()
    assert status == 125
    assert len(lines) == 1
    assert "its directory was removed" in lines[0]
    assert all_gone(pids)
    assert not runs.exists()


def test_a_directory_renamed_during_the_run_keeps_its_record_under_the_new_name(
    door: Door, ready: ReadyPipe, processes: Processes, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    record = runs / "r.json"
    run = door.start(record, fixture("sleeper", str(ready.path)))
    pids = started(ready, processes)
    moved = tmp_path / "runs.old"
    runs.rename(moved)
    run.cancel()
    status, lines = run.finish()
    assert (status, lines) == (130, [])
    assert all_gone(pids)
    data = read_json(moved / "r.json")
    validate_record(data)
    assert data["reason"] == "cancelled"
    assert data["event_log_lines_dropped"] == 0
    assert log_lines(events_of(moved / "r.json"))[-1]["event"] == "record_written"
    assert not runs.exists()


def test_a_lost_supervisors_fallback_record_is_not_written_through_a_swapped_directory(
    env: dict[str, str], ready: ReadyPipe, processes: Processes, tmp_path: Path
) -> None:
    """The caller writes its own record through the directory it has held since the start."""
    workdir = tmp_path / "work"
    victim = a_victim(workdir, holds="passwd")  # nothing at the record's name to stop it
    runs = workdir / "runs"
    run = Door("run", processes, env, tmp_path).start(
        runs / "target.json", fixture("sleeper", str(ready.path))
    )
    pids = started(ready, processes)
    supervisor = parent_of(pids[0])
    assert supervisor is not None
    shutil.rmtree(runs)
    runs.symlink_to("victim")
    os.kill(supervisor, signal.SIGKILL)
    status, lines = run.finish()
    assert status == 125
    assert lines == ["tether: the supervisor was lost before it reported how the run ended"]
    assert all_gone(pids)
    assert untouched(victim, holds="passwd")


# -- links on the way to the record ---------------------------------------------


@pytest.mark.skipif(not running_as_root, reason="giving a link to another user needs root")
def test_a_strangers_link_on_the_way_is_refused_before_anything_starts(
    door: Door, tmp_path: Path
) -> None:
    """A link owned by uid 65534 in the record's path: refused, the command never runs."""
    workdir = tmp_path / "work"
    victim = a_victim(workdir)
    link = workdir / "runs"
    link.symlink_to("victim")
    os.lchown(link, NOBODY, NOBODY)
    marker = tmp_path / "ran"
    run = door.start(link / "sub" / "target.json", ["touch", str(marker)])
    status, lines = run.finish()
    assert status == 125
    assert lines == [
        f"{door.refusal_prefix}cannot write the record: {link} is a symbolic link owned by "
        f"uid {NOBODY}, neither root nor you (refusing to follow it)"
    ]
    assert not marker.exists()
    assert untouched(victim)


@pytest.mark.parametrize("target", ["relative", "absolute"])
def test_a_link_of_root_or_your_own_is_followed(door: Door, tmp_path: Path, target: str) -> None:
    """``/home -> /usr/home``, or an operator's own link: the record lands where it points."""
    real = tmp_path / "disk" / "runs"
    real.mkdir(parents=True)
    link = tmp_path / "runs"
    link.symlink_to("disk/runs" if target == "relative" else real)
    assert os.lstat(link).st_uid == os.geteuid()
    run = door.start(link / "new" / "r.json", ["true"])
    assert run.finish() == (0, [])
    data = read_json(real / "new" / "r.json")
    assert data["reason"] == "completed"
    assert (real / "new" / "r.events.jsonl").is_file()
    assert (os.stat(real / "new").st_mode & 0o777) == 0o700


def a_record() -> dict[str, object]:
    return {"schema_version": "tether.record.v1", "reason": "completed"}


def write(path: Path, *, directory_fd: int | None = None) -> None:
    write_record(path, a_record(), redactor=Redactor(), directory_fd=directory_fd)


def test_a_held_directory_is_written_to_whatever_became_of_its_path(tmp_path: Path) -> None:
    """In process: the descriptor, not the name, decides where the record goes."""
    victim = a_victim(tmp_path, holds="passwd")
    runs = tmp_path / "runs"
    held = hold_record_directory(runs / "r.json")
    try:
        runs.rename(tmp_path / "moved")
        runs.symlink_to("victim")
        write(runs / "r.json", directory_fd=held)
    finally:
        os.close(held)
    assert read_json(tmp_path / "moved" / "r.json")["reason"] == "completed"
    assert untouched(victim, holds="passwd")


def test_a_removed_held_directory_fails_in_one_line_and_is_not_made_again(
    tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    held = hold_record_directory(runs / "r.json")
    try:
        runs.rmdir()
        with pytest.raises(RecordError) as caught:
            write(runs / "r.json", directory_fd=held)
    finally:
        os.close(held)
    assert str(caught.value) == (
        f"cannot write the record: {runs / 'r.json'}: its directory was removed "
        "(the record is not written anywhere else)"
    )
    assert not runs.exists()


def test_links_are_followed_through_chains_and_dots(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to(tmp_path / "real" / "." / "sub" / ".." / "sub")
    write(tmp_path / "a" / "r.json")
    assert read_json(tmp_path / "real" / "sub" / "r.json")["reason"] == "completed"


def test_a_loop_of_links_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(RecordError) as caught:
        check_record_path(tmp_path / "a" / "r.json")
    assert str(caught.value) == (
        f"cannot write the record: directory {tmp_path / 'a'}: Too many levels of symbolic links"
    )


@pytest.mark.skipif(not running_as_root, reason="giving a link to another user needs root")
def test_a_strangers_link_is_refused_wherever_it_is_and_nothing_is_made_behind_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "d").mkdir()
    link = tmp_path / "d" / "link"
    link.symlink_to(tmp_path / "target")
    os.lchown(link, NOBODY, NOBODY)
    for path in (link / "r.json", link / "deeper" / "r.json"):
        with pytest.raises(RecordError, match=f"owned by uid {NOBODY}, neither root nor you"):
            check_record_path(path)
        with pytest.raises(RecordError, match="refusing to follow it"):
            write(path)
    assert os.listdir(tmp_path / "target") == []


@pytest.mark.skipif(not running_as_root, reason="giving a link to another user needs root")
def test_a_strangers_link_at_the_last_step_of_a_followed_link_is_refused(tmp_path: Path) -> None:
    """Trust is checked for every link on the way, those reached through other links too."""
    (tmp_path / "target").mkdir()
    (tmp_path / "stranger").symlink_to(tmp_path / "target")
    os.lchown(tmp_path / "stranger", NOBODY, NOBODY)
    (tmp_path / "mine").symlink_to("stranger")
    with pytest.raises(RecordError, match=f"{tmp_path / 'stranger'} is a symbolic link owned"):
        check_record_path(tmp_path / "mine" / "r.json")


# -- what sits at the event log's name -------------------------------------------


def plant(kind: str, path: Path, tmp_path: Path) -> socket.socket | None:
    """Put a non-regular file of ``kind`` at ``path``; return a socket to keep open."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        (tmp_path / "elsewhere").write_text("precious\n")
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "directory":
        path.mkdir()
    else:
        listening = socket.socket(socket.AF_UNIX)
        listening.bind(str(path))
        return listening
    return None


KINDS = {
    "fifo": "not a regular file (a FIFO)",
    "symlink": "a symbolic link (refusing to replace or follow it)",
    "directory": "a directory",
    "socket": "not a regular file (a socket)",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_something_else_at_the_event_logs_name_is_refused_before_anything_starts(
    door: Door, tmp_path: Path, kind: str
) -> None:
    """``mkfifo r.events.jsonl`` used to hang the supervisor for ever; now nothing starts."""
    record = tmp_path / "r.json"
    events = events_of(record)
    kept = plant(kind, events, tmp_path)
    marker = tmp_path / "ran"
    try:
        run = door.start(record, ["touch", str(marker)], deadline="1")
        status, lines = run.finish()
    finally:
        if kept is not None:
            kept.close()
    assert status == 125
    assert lines == [f"{door.refusal_prefix}cannot write the event log: {events} is {KINDS[kind]}"]
    assert not marker.exists()
    assert not record.exists()
    if kind == "symlink":
        assert (tmp_path / "elsewhere").read_text() == "precious\n"


def test_a_fifo_that_appears_after_the_check_means_no_log_not_a_hang(
    tmp_path: Path, env: dict[str, str], processes: Processes, ready: ReadyPipe
) -> None:
    """The supervisor's own guard: the FIFO is made between the check and the log's opening.

    The request is checked and the supervisor spawned (it then waits for its
    spec), the FIFO is made, and only then does the supervisor get its spec,
    start the command and open the log.
    """
    record = tmp_path / "r.json"
    spec = build_request(
        fixture("sleeper", str(ready.path)),
        asked_at=time.monotonic(),
        # Kept from the start, even while the supervisor loads: time enough for the
        # command (a Python program) to announce itself first, under load.
        deadline=3,
        record=record,
        env=env,
    )
    with open(os.devnull, "r+b") as nowhere:
        # Spawned, not forked by a zygote: it waits for its spec while the FIFO is made.
        spawn = spawn_supervisor(spec, stdin=nowhere, stdout=nowhere, stderr=nowhere, zygote=False)
    os.mkfifo(events_of(record))
    send_spec(spawn)
    assert spawn.intermediate.wait(timeout=BOUND) == 0
    started(ready, processes)
    end = time.monotonic() + BOUND
    while spawn.status.finished is None and time.monotonic() < end:
        spawn.status.wait(timeout=end - time.monotonic())
    spawn.lifeline.release()
    spawn.status.close()
    finished = spawn.status.finished
    assert finished is not None
    assert (finished.reason, finished.exit_status) == ("deadline_exceeded", 124)
    assert finished.message == f"cannot write the event log {events_of(record)}: it is a FIFO"
    data = read_json(record)
    validate_record(data)
    assert data["event_log_lines_dropped"] is None  # no log was kept
    assert os.path.exists(events_of(record))


def test_a_reused_record_path_gets_this_runs_log_only(door: Door, tmp_path: Path) -> None:
    """``tether show`` must not print run 2's verdict over run 1's timeline."""
    record = tmp_path / "r.json"
    other = tmp_path / "other-file"
    for attempt in (1, 2):
        assert door.start(record, ["true"]).finish() == (0, [])
        if attempt == 1:  # a hard link at the log's name is unlinked, never truncated
            other.write_text("precious\n")
            events_of(record).unlink()
            os.link(other, events_of(record))
    lines = log_lines(events_of(record))
    assert [line["event"] for line in lines].count("launched") == 1
    assert lines[0]["supervisor_pid"] == read_json(record)["supervisor_pid"]
    assert other.read_text() == "precious\n"


# -- a full disk ------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs of the test's own, unmounted at the end."""
    if not running_as_root:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        unmounted = subprocess.run(["umount", str(mount)], timeout=BOUND, check=False)
        if unmounted.returncode != 0:  # still held by a process that is on its way out
            subprocess.run(["umount", "-l", str(mount)], timeout=BOUND, check=False)


def fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte; return the file that takes the room."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="No space left on device"):
        (disk / "probe").write_bytes(b"x")
    (disk / "probe").unlink(missing_ok=True)
    return filler


def test_a_full_disk_costs_the_record_never_the_stop(
    door: Door, small_disk: Path, ready: ReadyPipe, processes: Processes
) -> None:
    """ENOSPC from the first line on: the whole tree, escapees included, is still stopped.

    The sweep is forced, so the ``setsid`` grandchild and the daemon can only
    be found by a supervisor that is still alive to look.
    """
    door.env["TETHER_CONTAINMENT"] = "sweep"
    record = small_disk / "runs" / "r.json"
    record.parent.mkdir()
    fill(small_disk)
    run = door.start(
        record, fixture("tree", str(ready.path), "--setsid", "1", "--daemon", "1"), grace="5"
    )
    pids = started(ready, processes)
    run.cancel()
    status, lines = run.finish()
    assert status == 125
    assert len(lines) == 1
    assert re.fullmatch(
        rf"tether: cannot write the record: {re.escape(str(record))}: No space left on device; "
        rf"the event log {re.escape(str(events_of(record)))} is incomplete: \d+ line\(s\) "
        r"could not be written \(No space left on device\)",
        lines[0],
    ), lines
    assert all_gone(pids)
    assert not record.exists()
    assert leftovers(record.parent) == []
    assert events_of(record).read_bytes() == b""  # whole lines or nothing


def test_lines_lost_to_a_full_disk_are_counted_in_the_record_and_said_once(
    door: Door, small_disk: Path, ready: ReadyPipe, processes: Processes
) -> None:
    """The disk is full while the stop begins, and has room again for the record.

    The cancel is sent once the loop runs (it says so on a FIFO of its own,
    through ``fixtures/slow_loop``): a cancel the sentry acts on while the
    loop is still loading is logged only later, when the disk may have room.
    """
    record = small_disk / "runs" / "r.json"
    record.parent.mkdir()
    filler = fill(small_disk)
    running = announce_loop_running(door)
    run = door.start(record, fixture("sleeper", str(ready.path), "--note-term"), grace="60")
    (pid,) = started(ready, processes)
    wait_for_the_loop(running)
    run.cancel()
    assert ready.line() == ["term", str(pid)]  # the stop's lines were due, and lost
    filler.unlink()
    run.kill_now()
    status, lines = run.finish()
    assert status == 130
    assert wait_gone(pid)
    assert len(lines) == 1
    found = re.fullmatch(
        rf"tether: the event log {re.escape(str(events_of(record)))} is incomplete: (\d+) "
        r"line\(s\) could not be written \(No space left on device\)",
        lines[0],
    )
    assert found, lines
    dropped = int(found.group(1))
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "cancelled"
    assert data["event_log_lines_dropped"] == dropped >= 2
    events = log_lines(events_of(record))  # every line whole
    assert events[0]["event"] != "launched"  # the story's start is what was lost
    assert events[-1] == {
        **events[-1],
        "event": "event_log_incomplete",
        "lines_dropped": dropped,
        "error": "No space left on device",
    }


# -- running out of descriptors ------------------------------------------------------


def limited_to(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` that gives the child ``limit`` descriptors at most."""

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return limit_descriptors


def tether_starts_with(limit: int) -> bool:
    """Whether Python and tether can start at all with ``limit`` descriptors."""
    result = subprocess.run(
        tether_argv("--version"),
        capture_output=True,
        preexec_fn=limited_to(limit),
        timeout=BOUND,
        check=False,
    )
    return result.returncode == 0


def test_tether_run_under_any_descriptor_limit_runs_whole_or_refuses_in_one_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """From the lowest limit tether starts with up to one that is enough, every run ends well.

    Either the run is complete (record and log), or it is refused with one
    line and status 125 and nothing was left in the record's directory: no
    command run, no half-written file.
    """
    limit = next(n for n in range(4, 64) if tether_starts_with(n))
    outcomes: list[str] = []
    while "ran" not in outcomes:
        assert limit < 128, outcomes
        runs = tmp_path / f"limit-{limit}"
        marker = tmp_path / f"ran-{limit}"
        result = subprocess.run(
            tether_argv("run", "--record", str(runs / "r.json"), "--", "touch", str(marker)),
            capture_output=True,
            text=True,
            env=env,
            preexec_fn=limited_to(limit),
            timeout=BOUND,
            check=False,
        )
        lines = result.stderr.splitlines()
        if result.returncode == 0:
            assert lines == []
            assert marker.exists()
            assert read_json(runs / "r.json")["reason"] == "completed"
            assert (runs / "r.events.jsonl").is_file()
            outcomes.append("ran")
        else:
            assert result.returncode == 125, result.stderr
            assert len(lines) == 1, result.stderr
            assert lines[0].startswith("tether: cannot ")
            assert lines[0].endswith("Too many open files")
            assert not marker.exists()
            assert not runs.exists() or os.listdir(runs) == []
            outcomes.append("refused")
        limit += 1
    assert "refused" in outcomes


def test_descriptors_running_out_mid_run_cost_the_record_not_the_stop(
    env: dict[str, str], processes: Processes, ready: ReadyPipe, tmp_path: Path
) -> None:
    """The supervisor's descriptor limit drops below what it holds while it is stopping the tree."""
    record = tmp_path / "r.json"
    door = Door("seed", processes, env, tmp_path)
    running = announce_loop_running(door)
    run = door.start(record, fixture("sleeper", str(ready.path), "--note-term"), grace="60")
    (pid,) = started(ready, processes)
    wait_for_the_loop(running)  # everything it needs is loaded
    run.cancel()
    assert ready.line() == ["term", str(pid)]
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.prlimit(run.process.pid, resource.RLIMIT_NOFILE, (3, hard))
    run.kill_now()
    status, lines = run.finish()
    assert wait_gone(pid)
    assert status == 125
    assert lines == [f"tether: cannot write the record: {record}: Too many open files"]
    assert leftovers(tmp_path) == []

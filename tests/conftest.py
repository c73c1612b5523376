"""Shared helpers for tests that start real processes.

Every wait here is bounded and event-driven: a FIFO the command announces
itself on, a pidfd that becomes readable when a process exits. Every process a
test learns about is registered with :class:`Processes`, which SIGKILLs
whatever is still alive at teardown, by pid, so a failing test does not leak.

No test writes into the real home: :func:`private_home` points ``HOME`` and
``XDG_STATE_HOME`` at a temporary directory for every test (and so for every
process a test starts with this process's environment), and
:func:`real_state_unchanged` fails the session if the real record directory
changed while it ran, whatever a test did to escape the first fixture.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

EVENTS_SUFFIX = ".events.jsonl"
ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SCHEMA = ROOT / "src" / "tether" / "schema" / "record.v1.json"

#: The upper bound of every wait in the tests (a bound, not an expectation).
BOUND = 15.0


#: The start of a script that plays a supervisor over a small tree (tests of
#: :class:`~tether.supervisor.process_tree.ProcessTree`): as a child subreaper it
#: forks a leader in a group of its own, with one member of that group and one
#: child that left it with ``setsid()``; it prints ``[leader, member, escapee]``
#: as JSON and waits for a line on stdin (the test has tracked the pids). The
#: script goes on from there, with ``leader``, ``member`` and ``escapee`` bound.
SMALL_TREE_SCRIPT = """
import json, os, signal, sys
from tether.linux.prctl import set_child_subreaper
from tether.supervisor.process_tree import ProcessTree

def pause_for_ever():
    while True:
        signal.pause()

set_child_subreaper(True)
report_r, report_w = os.pipe()
leader = os.fork()
if leader == 0:
    os.setpgid(0, 0)
    member = os.fork()
    if member == 0:
        pause_for_ever()
    os.write(report_w, f"member {member}\\n".encode())
    if os.fork() == 0:
        os.setsid()  # reported once it has left the group, never before
        os.write(report_w, f"escapee {os.getpid()}\\n".encode())
        pause_for_ever()
    pause_for_ever()
try:
    os.setpgid(leader, leader)
except OSError:
    pass
reported = {}
with os.fdopen(report_r, "rb") as reports:
    while len(reported) < 2:
        kind, pid = reports.readline().split()
        reported[kind] = int(pid)
member, escapee = reported[b"member"], reported[b"escapee"]
print(json.dumps([leader, member, escapee]), flush=True)
sys.stdin.readline()  # the test has tracked the pids
"""

#: Every field of the seed supervisor's record, which must keep its name and meaning.
SEED_FIELDS = (
    "schema_version",
    "variant",
    "reason",
    "started_at",
    "finished_at",
    "elapsed_seconds",
    "deadline_seconds",
    "grace_seconds",
    "supervisor_pid",
    "eval_pid",
    "eval_process_group",
    "eval_exit_code",
    "supervisor_exit_code",
    "escalated_to_sigkill",
    "shutdown_seconds",
)

#: A value for every field of RunSpec, each unlike its default: a field declared without
#: one here fails test_values, which then checks it survives the pipe and replace().
EVERY_SPEC_FIELD: dict[str, object] = {
    "argv": ("sleep", "1"),
    "deadline_seconds": 5.0,
    "grace_seconds": math.inf,
    "asked_at": 12.5,
    "record_path": "/records/run.json",
    "label": "nightly",
    "cwd": "/work",
    "env": {"PATH": "/bin"},
    "umask": 0o27,
    "stop_signal": "SIGRTMIN+2",
    "no_record_reason": "no home",
    "record_argv": True,
    "ignored_signals": (1, 2),
    "join_group": 4242,
    "limits": {"memory_max": 1 << 30, "cpu_max": 1.5},
    "idle_seconds": 30.0,
    "fds": {"lifeline": 3, "status": 4, "stdin": 5, "stdout": 6, "stderr": 7},
}


def pytest_configure(config: pytest.Config) -> None:
    """Give the suite a person's terminal: SIGINT and SIGQUIT at their defaults.

    A suite started as a background job of a non-interactive shell (``cmd &``,
    as a CI harness may) inherits both ignored (POSIX), and every process it
    starts would too, as ``subprocess`` and tether hand ignored signals on:
    the tests of Ctrl-C and of a signal passed on mean a terminal's.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def fixture(name: str, *args: str) -> list[str]:
    """The argv that runs ``fixtures/<name>.py`` with this interpreter."""
    return [sys.executable, str(FIXTURES / f"{name}.py"), *args]


def hooked_env(home: Path, hook: str, **variables: str) -> dict[str, str]:
    """The environment of a process whose interpreters load the test hook ``fixtures/HOOK``
    (its ``sitecustomize``), with a private home and ``variables`` set."""
    paths = [str(FIXTURES / hook), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "HOME": str(home),
        "XDG_STATE_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(path for path in paths if path),
        **variables,
    }


def api_env(home: Path, *, zygote: bool = True) -> dict[str, str]:
    """The environment of a Python program using the API in ``home`` (its records there),
    with its zygote (the default, whatever this run of the tests says) or without."""
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home)}
    env.pop("TETHER_ZYGOTE", None)
    if not zygote:
        env["TETHER_ZYGOTE"] = "0"
    return env


def api_caller(
    args: list[str], home: Path, timeout: float = BOUND * 3
) -> subprocess.CompletedProcess[str]:
    """Run a Python program using the API (``python ARGS``) with its zygote, in ``home``; it
    must succeed, without a traceback."""
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=api_env(home),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def seed_door_true(lifeline: int, record: Path, command: tuple[str, ...] = ("true",)) -> list[str]:
    """The seed door running ``true`` (or ``command``) with a record and a deadline, on the
    pipe ``lifeline``."""
    return [
        sys.executable,
        "-m",
        "tether.supervisor",
        "--variant",
        "v1",
        "--parent-fd",
        str(lifeline),
        "--record",
        str(record),
        "--deadline-seconds",
        "30",
        "--grace-seconds",
        "5",
        "--",
        *command,
    ]


def tether_argv(*args: str) -> list[str]:
    """The argv of the ``tether`` command, run from this interpreter."""
    return [sys.executable, "-m", "tether", *args]


def state_of(pid: int) -> str | None:
    """The process state letter from /proc (``Z`` zombie), ``None`` if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()[0]


def wait_for_state(pid: int, wanted: str) -> None:
    """Wait until ``pid``'s state letter is ``wanted`` (a signal's stop or continue is taken
    when the process next runs, not when ``kill`` returns); fail after :data:`BOUND`."""
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        if state_of(pid) == wanted:
            return
        time.sleep(0.01)
    pytest.fail(f"{pid} is {state_of(pid)}, never {wanted}")


def alive(pid: int) -> bool:
    """Whether ``pid`` is running (a zombie is not: ``kill(pid, 0)`` would say it is)."""
    return state_of(pid) not in (None, "Z")


def parent_of(pid: int) -> int | None:
    """The parent pid from /proc, ``None`` if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rindex(")") + 2 :].split()[1])


def wait_gone(pid: int, timeout: float = BOUND) -> bool:
    """Wait (on a pidfd) until ``pid`` has exited; return whether it did in time."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        end = time.monotonic() + timeout
        while alive(pid):
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            select.select([pidfd], [], [], remaining)
            # A pidfd is readable once the process exited, zombie or not.
            if select.select([pidfd], [], [], 0)[0]:
                return True
        return True
    finally:
        os.close(pidfd)


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (``/proc/<pid>/stat`` field 22, clock ticks since boot); ``None``
    if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2 :].split()[19])


def wait_gone_since(pid: int, ticks: int, timeout: float = BOUND) -> bool:
    """Wait until the process ``pid`` that started at ``ticks`` has exited (not a reuse of it).

    A pidfd pins the process it was opened for: the start time read after
    opening it is that process's, so a pid taken over meanwhile is never
    waited for. Return whether it ended in time.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        if start_ticks(pid) != ticks:
            return True  # the one we want is gone; another has its pid
        return bool(select.select([pidfd], [], [], timeout)[0])
    finally:
        os.close(pidfd)


class ReadyPipe:
    """A FIFO a command writes ``ready PID ...`` lines to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        # Opened for writing too, so the FIFO never reports end of file between
        # writers and select() only wakes for data.
        self._fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._buffer = b""

    def line(self, timeout: float = BOUND) -> list[str]:
        """Return the next line's words; fail the test if none comes within ``timeout``."""
        end = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = end - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"nothing announced on {self.path} within {timeout}s")
            readable, _, _ = select.select([self._fd], [], [], remaining)
            if readable:
                self._buffer += os.read(self._fd, 4096)
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode().split()

    def ready_pids(self, timeout: float = BOUND) -> list[int]:
        """Wait for a ``ready`` line; return the pids it names."""
        words = self.line(timeout)
        assert words[0] == "ready", words
        return [int(word) for word in words[1:]]

    def close(self) -> None:
        os.close(self._fd)


class Processes:
    """Every process a test started or learned about, killed by pid at teardown."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.popens: list[subprocess.Popen[bytes]] = []

    def track(self, *pids: int) -> None:
        self.pids.update(pids)

    def start(self, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        popen: subprocess.Popen[bytes] = subprocess.Popen(argv, **kwargs)  # type: ignore[call-overload]
        self.popens.append(popen)
        self.track(popen.pid)
        return popen

    def api_program(self, args: list[str], home: Path) -> subprocess.Popen[bytes]:
        """Start a Python program using the API (``python ARGS``) with its zygote, in ``home``,
        its stdin and stdout on pipes: one that says what it started, then waits."""
        return self.start(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=api_env(home),
        )

    def script(self, source: str, *, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        """Start ``python -c source`` with its stdout and stderr on pipes, unbuffered.

        Unbuffered: ``communicate()`` reads the pipes itself, so a buffered
        ``readline()`` that read ahead (answers already written, on a loaded
        machine) would lose them.
        """
        return self.start(
            [sys.executable, "-c", source],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )

    def small_tree(self, script: str) -> tuple[subprocess.Popen[bytes], list[int], Any]:
        """Run a :data:`SMALL_TREE_SCRIPT` script: track its tree, let it go on, read its answer.

        Returns the script (still running, for ``communicate()``), the pids
        ``[leader, member, escapee]``, and the JSON line it answers with.
        """
        started = self.script(script, stdin=subprocess.PIPE)
        assert started.stdin is not None
        assert started.stdout is not None
        pids = json.loads(started.stdout.readline())
        self.track(*pids)
        started.stdin.write(b"go\n")
        return started, pids, json.loads(started.stdout.readline())

    def cleanup(self) -> list[int]:
        """Kill what is left; return the pids that were still alive (a leak)."""
        leaked = [pid for pid in self.pids if alive(pid)]
        for pid in leaked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for popen in self.popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=BOUND)
        return leaked


def state_snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` by relative name: its size and modification time (ns).

    Empty if the directory does not exist. Links are not followed; directories
    count only through what they hold.
    """
    snapshot: dict[str, tuple[int, int]] = {}
    if not directory.is_dir():
        return snapshot
    for root, dirs, files in os.walk(directory):
        for name in files + [d for d in dirs if Path(root, d).is_symlink()]:
            path = Path(root, name)
            with contextlib.suppress(OSError):
                info = path.lstat()
                snapshot[str(path.relative_to(directory))] = (info.st_size, info.st_mtime_ns)
    return snapshot


def snapshot_changes(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    """What differs between two :func:`state_snapshot` results, one line per entry."""
    changes = [f"added {name}" for name in sorted(after.keys() - before.keys())]
    changes += [f"removed {name}" for name in sorted(before.keys() - after.keys())]
    changes += [
        f"changed {name}"
        for name in sorted(before.keys() & after.keys())
        if before[name] != after[name]
    ]
    return changes


def _real_state_directory() -> Path:
    """The record directory of the user running the tests, as tether would choose it.

    Only ``runs``: the benchmark keeps its scratch records beside it, and may
    be running (``python -m benchmarks``) while the tests do.
    """
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "tether" / "runs"


def ours(directory: Path, name: str, places: tuple[Path, ...]) -> bool:
    """Whether the run ``name`` in the real record directory was started from one of ``places``.

    This machine may be shared: another program of the same user may run
    ``tether run`` while the suite does, and its records are not the suite's
    doing. A record says where its command ran (``cwd``, since tether 0.2);
    every test runs its commands from this checkout or the session's
    temporary directories. A record without ``cwd`` (an older tether) is not
    this suite's; an event log is judged by its record, and one without a
    record (a run still going) is left out.
    """
    stem = name.removesuffix(EVENTS_SUFFIX).removesuffix(".json")
    try:
        record = json.loads((directory / f"{stem}.json").read_text())
    except (OSError, ValueError):
        return False
    cwd = record.get("cwd") if isinstance(record, dict) else None
    return isinstance(cwd, str) and any(Path(cwd).is_relative_to(place) for place in places)


@pytest.fixture(scope="session", autouse=True)
def real_state_unchanged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session (an error at its last teardown) if the real record directory changed.

    Taken before any test has moved ``HOME``, so it watches the operator's
    own ``~/.local/state/tether/runs`` (or ``$XDG_STATE_HOME/tether/runs``).
    Runs that other programs start meanwhile on a shared machine are told
    apart by where they ran (:func:`ours`); a removal is always the suite's.
    """
    directory = _real_state_directory()
    places = (ROOT, tmp_path_factory.getbasetemp())
    before = state_snapshot(directory)
    yield
    after = state_snapshot(directory)
    mine = {name for name in after if ours(directory, name, places)}
    changes = snapshot_changes(
        {name: info for name, info in before.items() if name in mine or name not in after},
        {name: info for name, info in after.items() if name in mine},
    )
    if changes:
        shown = "; ".join(changes[:5]) + (f"; and {len(changes) - 5} more" if changes[5:] else "")
        pytest.fail(f"the test session wrote into the real state directory {directory}: {shown}")


@pytest.fixture(autouse=True)
def private_home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home of the test's own, with ``XDG_STATE_HOME`` inside it; returned for tests to use.

    Outside ``tmp_path``, so a test that lists its own temporary directory
    sees only what it made there.
    """
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    return home


@pytest.fixture
def ready(tmp_path: Path) -> Iterator[ReadyPipe]:
    pipe = ReadyPipe(tmp_path / "ready.fifo")
    yield pipe
    pipe.close()


@pytest.fixture
def processes() -> Iterator[Processes]:
    tracked = Processes()
    yield tracked
    tracked.cleanup()


def read_json(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def validate_record(record: dict[str, object]) -> None:
    """Fail unless ``record`` validates against the shipped JSON Schema."""
    import jsonschema

    jsonschema.validate(record, json.loads(SCHEMA.read_text()))


#: The two ways a supervisor can hold a tree (``TETHER_CONTAINMENT``), for tests run under both.
MODES = ("sweep", "cgroup")


@functools.cache
def cgroup_problem() -> str | None:
    """Why no cgroup of a run's own can be made here, or ``None`` if one can."""
    from tether.linux.cgroup import CgroupUnavailable, V2Cgroup

    try:
        probe = V2Cgroup.create()
    except CgroupUnavailable as why:
        return str(why)
    probe.discard()
    return None


def skip_without_cgroup() -> None:
    """Skip the calling test, saying why, where no cgroup of a run's own can be made."""
    problem = cgroup_problem()
    if problem is not None:
        pytest.skip(f"no writable cgroup v2 hierarchy here: {problem}")


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Each containment mode in turn; ``cgroup`` skips where no cgroup can be made."""
    chosen: str = request.param
    if chosen == "cgroup":
        skip_without_cgroup()
    return chosen


#: What a command-line reader returned (or ``("exit", status)``), and its stdout and stderr.
Outcome = tuple[object, str, str]


def outcome_of(read: Callable[[], object]) -> Outcome:
    """What ``read`` returned (or its exit status), and what it wrote on stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result = read()
        except SystemExit as stop:
            result = ("exit", stop.code)
    return result, out.getvalue(), err.getvalue()

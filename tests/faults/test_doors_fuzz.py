"""Fuzzing the doors' command lines: any argv is a run or a one-line refusal, nothing more.

Command lines are drawn from each door's real options and from values chosen
to hurt: ``--`` and ``=``, empty and blank words, ``nan``, ``inf``, ``-0``,
``1e309``, ``1e-10000``, ``0x10``, digit strings of hundreds of digits,
digits of other scripts (``٣``), signal names and numbers, undecodable bytes,
and paths to a FIFO, a directory and ``/dev/full``.

Two speeds. The parsers that start nothing (``tether run``'s and ``tether
timeout``'s ``_request``, the request builder, the durations) are called in
this process, many times. Each door is also started for real, fewer times
(about 0.2 s per start), with a command that announces its pid and then
sleeps: whatever the command line, the door must end (by itself, or when its
caller is killed or its lifeline closed) with a documented status, at most a
few lines on stderr and no traceback, with the command gone, and with no
file created outside the record directories (and the names the command line
itself gave as records).

``DOORS_FUZZ_EXAMPLES=200`` (with ``--timeout=1200``) runs many more real
examples per door, for a longer hunt than the suite's.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import (
    BOUND,
    Processes,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.caller.request import MAX_LABEL_CHARACTERS, RequestError, build_request
from tether.core.durations import DurationError, duration_seconds, parse_duration
from tether.core.spec import RunSpec
from tether.shared.paths import events_path_for
from tether.shared.record_file import RecordError

# -- the vocabulary ------------------------------------------------------------------

#: Values that hurt parsers, in any position. Paths are relative to the sandbox's
#: working directory or inside the sandbox: running as root, a record path such
#: as /etc/passwd would be replaced, so none may point outside.
HOSTILE: tuple[str, ...] = (
    "--",
    "=",
    "",
    " ",
    "\t5\n",
    "nan",
    "inf",
    "-inf",
    "-0",
    "0",
    "0.15",
    "5m",
    "1e309",
    "1e-10000",
    "0x10",
    "1_0",
    "-1",
    "9" * 400,
    "\u0663",  # Arabic-Indic three
    "\uff15",  # fullwidth five
    "TERM",
    "SIGKILL",
    "9",
    "65",
    "two\nlines",
    "\x1b[31m",
    "\udcff\udcfe",  # undecodable argv bytes, as Python sees them
    "AKIAIOSFODNN7EXAMPLE",
    "r.json",
    "../cwd/r.json",
    "-v",
)

#: Record paths (besides the relative ones above), inside the sandbox or harmless devices.
PATHS: tuple[str, ...] = ("@records/r.json", "@records/new/r.json", "@fifo", "@dir", "/dev/full")

#: Stop signals whose default action ends ``sleep``. The others (CHLD, CONT,
#: STOP, TSTP, URG, WINCH...) leave it running after a killed ``tether
#: timeout`` without ``-k``: see the strict xfail in test_doors_breaks.py.
SIGNALS: tuple[str, ...] = ("TERM", "kill", "SIGHUP", "9", "1", "0", "65", "BOGUS", "RTMIN", "")

values = st.sampled_from(HOSTILE + PATHS)

#: Values each option is meant to take, among them the edge cases that must work.
durations = st.sampled_from(["0", "5m", "0.15", "1e-10000", "1e308", " 5 ", "+5", "1.5h", "2d"])
records = st.sampled_from(["@records/r.json", "@records/new/r.json", "r.json"])
labels = st.sampled_from(["", "night-eval", "two\nlines", "\udcff", "x" * 4096, "--"])
signals = st.sampled_from(SIGNALS)

Options = dict[str, st.SearchStrategy[str] | None]

#: Each door's options, with the values they take (``None``: a flag, no value).
RUN_OPTIONS: Options = {
    "--deadline": durations,
    "--dead": durations,  # argparse takes a unique prefix
    "--grace": durations,
    "--record": records,
    "--no-record": None,
    "--name": labels,
    "-v": None,
    "--help": None,
}
TIMEOUT_OPTIONS: Options = {
    "-k": durations,
    "--kill-after": durations,
    "--kill": durations,  # getopt takes a unique prefix too
    "-s": signals,
    "--signal": signals,
    "-p": None,
    "--preserve-status": None,
    "-v": None,
    "--verbose": None,
    "--foreground": None,
    "--record": records,
    "--no-record": None,
    "--version": None,
}
SEED_OPTIONS: Options = {
    "--variant": labels,
    "--parent-fd": st.sampled_from(["0", "1", "2147483648", "\u0663", "3_0"]),
    "--record": records,
    "--deadline-seconds": durations,
    "--grace-seconds": durations,
}


def pieces(options: Options) -> st.SearchStrategy[list[str]]:
    """One piece of a command line: a flag, an option and a value, ``--opt=value``, a stray word.

    An option's value is one it is meant to take or a hostile one, about as often.
    """
    choices: list[st.SearchStrategy[list[str]]] = [values.map(lambda word: [word])]
    for name, meant in options.items():
        if meant is None:
            choices.append(st.just([name]))
        else:
            choices += _with_value(name, st.one_of(meant, values))
    return st.one_of(choices)


def _with_value(name: str, value: st.SearchStrategy[str]) -> list[st.SearchStrategy[list[str]]]:
    return [value.map(lambda word: [name, word]), value.map(lambda word: [f"{name}={word}"])]


def seed_changes() -> st.SearchStrategy[tuple[str, str | None]]:
    """A change to a worker's command line: an option dropped (``None``) or given another value."""

    def changed(name: str) -> st.SearchStrategy[tuple[str, str | None]]:
        meant = SEED_OPTIONS[name]
        assert meant is not None
        return st.tuples(st.just(name), st.one_of(st.none(), meant, values))

    return st.sampled_from(sorted(SEED_OPTIONS)).flatmap(changed)


def command_lines(options: Options, most: int = 5) -> st.SearchStrategy[list[str]]:
    return st.lists(pieces(options), max_size=most).map(
        lambda parts: [word for part in parts for word in part]
    )


# -- the sandbox ---------------------------------------------------------------------


@dataclass
class Sandbox:
    """Where a door may write: its state and records directories, and names it was given."""

    root: Path
    cwd: Path = field(init=False)
    state: Path = field(init=False)
    records: Path = field(init=False)

    def __post_init__(self) -> None:
        self.cwd = self.root / "cwd"
        self.state = self.root / "state"
        self.records = self.root / "records"
        for directory in (self.cwd, self.records, self.root / "home", self.root / "dir"):
            directory.mkdir(parents=True, exist_ok=True)
        if not (self.root / "fifo").exists():
            os.mkfifo(self.root / "fifo")

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.root / "home"),
            "XDG_STATE_HOME": str(self.state),
            "LC_ALL": "C.UTF-8",
        }

    def resolve(self, words: list[str]) -> list[str]:
        """Words with the sandbox's paths filled in (``@fifo`` -> ``<root>/fifo``)."""
        return [self._resolve(word) for word in words]

    def _resolve(self, word: str) -> str:
        for path in PATHS:
            if path.startswith("@"):
                word = word.replace(path, str(self.root / path[1:]))
        return word

    def snapshot(self) -> set[Path]:
        return set(self.root.rglob("*"))

    def allowed(self, path: Path) -> bool:
        """Whether a door may have created ``path``: a record directory, or a name it was given."""
        if path.is_relative_to(self.state) or path.is_relative_to(self.records):
            return True
        return path in self._given_names()

    def _given_names(self) -> set[Path]:
        given: set[Path] = set()
        for word in HOSTILE:
            if not word or "\0" in word:
                continue
            record = Path(os.path.normpath(self.cwd / word))
            given |= {record, events_path_for(record)}
        return {path for path in given if path.is_relative_to(self.root)}

    def check_after(self, before: set[Path]) -> None:
        """Nothing new outside the allowed places; every new record validates; no temp file."""
        created = self.snapshot() - before
        outside = sorted(str(path) for path in created if not self.allowed(path))
        assert outside == [], f"created outside the record directories: {outside}"
        for path in created:
            assert not path.name.endswith(".tmp"), f"a temporary file was left: {path}"
            if path.suffix == ".json" and path.is_file():
                validate_record(read_json(path))
        assert (self.root / "fifo").is_fifo()
        assert (self.root / "dir").is_dir()


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path / "sandbox")


@contextlib.contextmanager
def inside(sandbox: Sandbox) -> Iterator[io.StringIO]:
    """Run in-process parsers as a door would run there; yield what they said on stderr."""
    said = io.StringIO()
    with (
        mock.patch.dict(os.environ, sandbox.env),
        contextlib.chdir(sandbox.cwd),
        contextlib.redirect_stderr(said),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        yield said


def assert_few_lines(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert len(stderr.splitlines()) <= 3, stderr


def assert_fit_to_send(spec: RunSpec) -> None:
    """Whatever a door accepts, the supervisor accepts too: the spec survives its pipe."""
    spec.check()
    assert RunSpec.from_json(spec.to_json()) == spec
    assert spec.argv
    assert spec.label is None or len(spec.label) <= MAX_LABEL_CHARACTERS
    assert spec.record_path is None or os.path.isabs(spec.record_path)


IN_PROCESS = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


# -- in process: the parsers ---------------------------------------------------------


@IN_PROCESS
@given(command_lines(RUN_OPTIONS, most=6), st.booleans(), command_lines({"--": values}, 2))
def test_run_reads_any_command_line_or_refuses_it_in_one_line(
    sandbox: Sandbox, words: list[str], separated: bool, after: list[str]
) -> None:
    from tether.cli.run import _request

    argv = sandbox.resolve([*words, *(["--"] if separated else []), *after])
    before = sandbox.snapshot()
    status: object = None
    with inside(sandbox) as said:
        try:
            spec, _verbose = _request(argv, 0.0)
        except SystemExit as end:
            status = end.code
    assert_few_lines(said.getvalue())
    sandbox.check_after(before)
    if status is None:
        assert said.getvalue() == ""
        assert_fit_to_send(spec)
        return
    assert status in (0, 125), said.getvalue()  # 0: --help
    if status == 125:
        assert said.getvalue().strip(), "a refusal says why"
        created = sandbox.snapshot() - before
        assert not [path for path in created if path.is_file()], "a refusal left a file"


@IN_PROCESS
@given(
    command_lines(TIMEOUT_OPTIONS, most=5),
    st.lists(values, max_size=3),
)
def test_timeout_reads_any_command_line_or_refuses_it_like_gnu(
    sandbox: Sandbox, words: list[str], rest: list[str]
) -> None:
    from tether.cli.timeout import request_for

    argv = sandbox.resolve([*words, *rest])
    status: object = None
    with inside(sandbox) as said:
        try:
            _options, spec = request_for(argv, 0.0)
        except SystemExit as end:
            status = end.code
    assert_few_lines(said.getvalue())
    if status is None:
        # A record that cannot be kept is said, and the command runs without one.
        assert said.getvalue() == "" or said.getvalue().endswith("running without a record\n")
        assert_fit_to_send(spec)
        return
    assert status in (0, 125), said.getvalue()  # 0: --help, --version
    if status == 125:
        assert said.getvalue().startswith(("tether timeout: ", "Try 'tether timeout --help'"))


#: Anything a program might pass through the API, right or wrong.
api_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**5000), max_value=10**5000),
    st.floats(),
    st.builds(timedelta, seconds=st.floats(min_value=-1e9, max_value=1e9)),
    values,
    st.text(max_size=8),
    st.lists(st.text(max_size=3), max_size=2),
)

requests = st.fixed_dictionaries(
    {
        "deadline": api_values,
        "grace": api_values,
        "label": st.one_of(api_values, st.text(min_size=MAX_LABEL_CHARACTERS, max_size=5000)),
        "record": st.one_of(
            st.sampled_from((False, None, True, "@records/r.json", "@fifo", "@dir")), values
        ),
    }
)


@IN_PROCESS
@given(st.lists(st.one_of(values, st.text(max_size=6)), max_size=4), requests)
def test_the_request_builder_raises_only_what_it_documents(
    sandbox: Sandbox, argv: list[str], request: dict[str, object]
) -> None:
    """A value that cannot be a request is a RequestError; a wrong type, a TypeError; never more."""
    if isinstance(request["record"], str):
        request["record"] = sandbox.resolve([request["record"]])[0]
    refused: Exception | None = None
    with inside(sandbox):
        try:
            spec = build_request(argv, asked_at=0.0, **request)  # type: ignore[arg-type]
        except (RequestError, RecordError, TypeError) as error:
            refused = error
    if refused is None:
        assert_fit_to_send(spec)
    elif isinstance(refused, TypeError):
        # Only for what no command line can give: a value that is not text.
        texts = [request[name] for name in ("deadline", "grace", "label")]
        assert not all(isinstance(value, str | None) for value in texts)
    else:
        assert "\n" not in str(refused)
        # Short, but for a path given as the record, which is quoted whole.
        assert 0 < len(str(refused)) < 300 + len(str(request["record"])), refused


@settings(max_examples=2000, deadline=None, database=None)
@given(st.one_of(values, st.text(max_size=20), st.text(alphabet="0123456789.e+-smhd \u0663_x")))
def test_a_duration_is_a_finite_ascii_number_or_one_short_line(text: str) -> None:
    message = None
    try:
        seconds = parse_duration(text, flag="--deadline")
    except DurationError as error:
        message = str(error)
    if message is None:
        assert math.isfinite(seconds)
        assert seconds >= 0
        assert text.strip().isascii()
    else:
        assert message.startswith("--deadline: invalid duration ")
        assert "\n" not in message
        assert len(message) < 200


@settings(max_examples=500, deadline=None, database=None)
@given(api_values)
def test_a_duration_from_a_program_is_seconds_or_a_documented_error(value: object) -> None:
    refused: Exception | None = None
    try:
        seconds = duration_seconds(value, flag="deadline")
    except (DurationError, TypeError) as error:
        refused = error
    if refused is None:
        assert math.isfinite(seconds)
        assert seconds >= 0
        return
    if isinstance(refused, TypeError):
        assert isinstance(value, bool | list | type(None))
    assert len(str(refused)) < 200


# -- real processes: every door, started ---------------------------------------------


@dataclass
class Ending:
    """How one door's process ended, and what the harness had to do to end it."""

    status: int
    stderr: str
    ended_by: str  # "itself", or how the harness ended it: "kill", "term", "lifeline"


class Announcements:
    """A FIFO the command writes ``ready PID`` to; read without blocking, whole lines only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        # Open for writing too: no end of file between writers, select() wakes for data only.
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self._buffer = b""

    def pids(self) -> list[int]:
        """The pids announced since the last call."""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.fd, 4096):
                self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        return [int(line.split()[1]) for line in lines if line.startswith(b"ready ")]

    def close(self) -> None:
        os.close(self.fd)


class Lifeline:
    """The write end of a seed door's pipe, closed once (its number may be reused after)."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class Harness:
    """Starts a door with a command that announces itself, and ends whatever it started.

    The command's parent at the time it announces itself is its supervisor;
    both must be gone at the end (the supervisor once the record is written).
    """

    def __init__(self, root: Path, processes: Processes) -> None:
        self.root = root
        self.processes = processes
        self.announcements = Announcements(root / "ready.fifo")
        self.count = 0

    def command(self) -> list[str]:
        """A command that says ``ready PID`` on the FIFO and then waits to be stopped."""
        return ["sh", "-c", f'echo "ready $$" > "{self.announcements.path}"; exec sleep 60']

    def start(
        self,
        argv: list[str],
        sandbox: Sandbox,
        *,
        ending: str,
        lifeline: Lifeline | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> Ending:
        """Run ``argv`` to its end; if the command starts, end it the way ``ending`` says."""
        self.count += 1
        stderr_path = self.root / f"stderr-{self.count}"
        with open(stderr_path, "wb") as stderr:
            door = self.processes.start(
                argv,
                cwd=sandbox.cwd,
                env=sandbox.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=pass_fds,
            )
        started = self._wait_for_door_or_command(door)
        ended_by = "itself"
        if started and door.poll() is None:
            ended_by = ending
            if ending == "lifeline":
                assert lifeline is not None
                lifeline.close()
            else:
                door.send_signal(signal.SIGKILL if ending == "kill" else signal.SIGTERM)
        status = door.wait(timeout=BOUND)
        started += self._started()
        for pid in started:
            assert wait_gone(pid), f"{pid} outlived {argv[2:6]}... (ended by {ended_by})"
        stderr_text = stderr_path.read_bytes().decode(errors="backslashreplace")
        event(f"ended by {ended_by}, status {status}")  # --hypothesis-show-statistics
        return Ending(status, stderr_text, ended_by)

    def _wait_for_door_or_command(self, door: subprocess.Popen[bytes]) -> list[int]:
        pidfd = os.pidfd_open(door.pid)
        try:
            end = time.monotonic() + BOUND
            while time.monotonic() < end:
                readable, _, _ = select.select(
                    [pidfd, self.announcements.fd], [], [], end - time.monotonic()
                )
                started = self._started()
                if started or pidfd in readable:
                    return started
            pytest.fail(f"neither the door nor its command came within {BOUND}s")
        finally:
            os.close(pidfd)

    def _started(self) -> list[int]:
        """Commands announced since the last call, and their supervisors."""
        pids = self.announcements.pids()
        supervisors = [parent_of(pid) for pid in pids]
        started = pids + [pid for pid in supervisors if pid is not None and pid > 1]
        self.processes.track(*started)
        return started


@pytest.fixture
def harness(tmp_path: Path, processes: Processes) -> Iterator[Harness]:
    started = Harness(tmp_path, processes)
    yield started
    started.announcements.close()


REAL = settings(
    max_examples=int(os.environ.get("DOORS_FUZZ_EXAMPLES", "25")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

#: A short deadline may pass between the command's announcement and the harness's move.
DEADLINE_RACE = 124

#: Signal statuses tether timeout may end with, as GNU does: 128+N, or dying of N itself.
BY_SIGNAL = {128 + number for number in range(1, 65)} | {-number for number in range(1, 65)}


@REAL
@given(
    command_lines(RUN_OPTIONS, most=3),
    st.sampled_from([["--"], [], ["--", "--"], ["--", ""]]),
    st.sampled_from(["kill", "term"]),
)
def test_tether_run_ends_as_documented_whatever_its_command_line(
    sandbox: Sandbox, harness: Harness, words: list[str], separator: list[str], ending: str
) -> None:
    argv = tether_argv("run", *sandbox.resolve(words), *separator, *harness.command())
    before = sandbox.snapshot()
    end = harness.start(argv, sandbox, ending=ending)
    assert_few_lines(end.stderr)
    expected = {
        "itself": {0, 124, 125, 126, 127},  # 0: --help
        "kill": {-signal.SIGKILL, DEADLINE_RACE},
        "term": {130, DEADLINE_RACE},
    }[end.ended_by]
    assert end.status in expected, end
    sandbox.check_after(before)


@REAL
@given(
    command_lines(TIMEOUT_OPTIONS, most=3),
    st.sampled_from(["5m", "0.15", "0", "nan", "\u0663", "--", ""]),
    st.sampled_from(["kill", "term"]),
)
def test_tether_timeout_ends_as_documented_whatever_its_command_line(
    sandbox: Sandbox, harness: Harness, words: list[str], duration: str, ending: str
) -> None:
    argv = tether_argv("timeout", *sandbox.resolve(words), duration, *harness.command())
    before = sandbox.snapshot()
    end = harness.start(argv, sandbox, ending=ending)
    assert_few_lines(end.stderr)
    if end.ended_by == "kill":
        assert end.status in {-signal.SIGKILL, DEADLINE_RACE} | BY_SIGNAL, end
    else:
        assert end.status in {0, 124, 125, 126, 127} | BY_SIGNAL, end
    sandbox.check_after(before)


@REAL
@given(
    st.lists(seed_changes(), max_size=2),
    command_lines(SEED_OPTIONS, most=1),
    st.sampled_from([["--"], ["--"], [], ["--", "--"]]),
)
def test_the_seed_door_ends_as_documented_whatever_its_command_line(
    sandbox: Sandbox,
    harness: Harness,
    changes: list[tuple[str, str | None]],
    extra: list[str],
    separator: list[str],
) -> None:
    """A worker's command line: the five options, some values replaced or dropped, extra words."""
    read_end, write_end = os.pipe()
    lifeline = Lifeline(write_end)
    try:
        options = {
            "--variant": "v",
            "--parent-fd": str(read_end),
            "--record": str(sandbox.records / "seed.json"),
            "--deadline-seconds": "0",
            "--grace-seconds": "1",
        }
        for option, value in changes:
            if value is None:
                options.pop(option, None)
            else:
                options[option] = value
        words = [word for pair in options.items() for word in pair] + extra
        argv = [
            sys.executable,
            "-m",
            "tether.supervisor",
            *sandbox.resolve(words),
            *separator,
            *harness.command(),
        ]
        before = sandbox.snapshot()
        end = harness.start(
            argv, sandbox, ending="lifeline", lifeline=lifeline, pass_fds=(read_end,)
        )
    finally:
        os.close(read_end)
        lifeline.close()
    assert_few_lines(end.stderr)
    expected = {"itself": {0, 124, 125, 126, 127}, "lifeline": {130, DEADLINE_RACE}}[end.ended_by]
    assert end.status in expected, end
    sandbox.check_after(before)

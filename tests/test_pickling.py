"""Everything tether hands a program pickles: an ``Outcome`` and every exception it raises.

A Ray task, a ``multiprocessing`` worker or a ``concurrent.futures`` process
pool returns its result (or raises its exception) to another process through
:mod:`pickle`. An exception whose ``__init__`` takes keywords, or something
other than its message, pickles fine and then fails to *unpickle* there, far
from the bug. So every exception class the package defines is found by
walking the package (none can be forgotten), built, and round-tripped.
"""

from __future__ import annotations

import dataclasses
import errno
import importlib
import inspect
import pickle
import pkgutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import hypothesis.strategies as st
from hypothesis import given

import tether
from tether.api.handle import _decode_error
from tether.api.outcome import CommandFailed, Outcome, OutputDecodeError, TimeoutExpired
from tether.caller.fingerprint import Unreadable
from tether.caller.launch_errors import CommandNotExecutable, CommandNotFound, LaunchError
from tether.caller.request import LimitsUnavailable, RequestError
from tether.cli.seed_options import UsageError
from tether.cli.timeout_options import OptionError
from tether.core.durations import DurationError
from tether.core.limits import LimitError
from tether.core.machine import IllegalEvent
from tether.core.spec import SpecError
from tether.linux import UnsupportedPlatform
from tether.linux.cgroup import CgroupUnavailable
from tether.linux.clone3 import CloneUnavailable
from tether.linux.systemd_scope import BusGarbled
from tether.review._text import ReviewError
from tether.shared.record_file import JSONRefused, RecordError
from tether.supervisor.cgroup_choice import _Deferred
from tether.supervisor.command import CommandNotStarted
from tether.supervisor.spawn import SpawnFailed

T = TypeVar("T")

_moments = st.none() | st.datetimes(timezones=st.just(UTC))
_texts = st.none() | st.text(max_size=40)
_ints = st.none() | st.integers(min_value=-(2**31), max_value=2**31)

#: A strategy for every field of Outcome (a test checks none is missing).
OUTCOME_FIELDS: dict[str, st.SearchStrategy[Any]] = dict(
    reason=st.sampled_from(tether.Reason),
    exit_status=st.integers(min_value=0, max_value=255),
    returncode=_ints,
    escalated_to_sigkill=st.booleans(),
    record_path=st.none() | st.text(min_size=1, max_size=30).map(Path),
    message=_texts,
    label=_texts,
    pid=_ints,
    supervisor_pid=_ints,
    started_at=_moments,
    finished_at=_moments,
    elapsed_seconds=st.none() | st.floats(allow_nan=False),
    argv=st.lists(st.text(max_size=10), max_size=4).map(tuple),
    stdout=st.none() | st.binary(max_size=50) | st.text(max_size=50),
    stderr=st.none() | st.binary(max_size=50) | st.text(max_size=50),
    stdout_dropped=st.integers(min_value=0),
    stderr_dropped=st.integers(min_value=0),
    oom_killed=st.none() | st.booleans(),
    cpu_seconds=st.none() | st.floats(min_value=0, allow_nan=False),
    memory_peak_bytes=st.none() | st.integers(min_value=0),
    memory_max=st.none() | st.integers(min_value=1),
    no_record_reason=_texts,
    deadline_seconds=st.none() | st.floats(min_value=0, allow_nan=False),
    processes_stopped=st.none() | st.integers(min_value=0),
    outside_group=st.none() | st.integers(min_value=0),
    shutdown_seconds=st.none() | st.floats(min_value=0, allow_nan=False),
)
outcomes = st.builds(Outcome, **OUTCOME_FIELDS)


def round_trip(value: T) -> T:
    copy: T = pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return copy


def same_exception(original: BaseException, copy: BaseException) -> None:
    """Equal as far as an exception can be: type, args, message and every attribute."""
    assert type(copy) is type(original)
    assert copy.args == original.args
    assert str(copy) == str(original)
    assert vars(copy) == vars(original)


def test_every_field_of_an_outcome_is_generated() -> None:
    assert {field.name for field in dataclasses.fields(Outcome)} == set(OUTCOME_FIELDS)


@given(outcomes)
def test_an_outcome_pickles_equal(outcome: Outcome) -> None:
    assert round_trip(outcome) == outcome


@given(outcomes)
def test_command_failed_pickles_with_its_outcome(outcome: Outcome) -> None:
    failure = CommandFailed(outcome)
    copy = round_trip(failure)
    same_exception(failure, copy)
    assert copy.outcome == outcome


@given(
    st.text(max_size=60),
    st.none() | st.sampled_from(sorted(errno.errorcode)),
    st.none() | st.integers(min_value=0, max_value=255),
    st.none() | st.text(min_size=1, max_size=20).map(Path),
)
def test_a_launch_error_pickles_equal(
    message: str, number: int | None, status: int | None, record: Path | None
) -> None:
    error = LaunchError(message, errno=number, exit_status=status, record_path=record)
    same_exception(error, round_trip(error))


@given(st.text(max_size=60), st.text(min_size=1, max_size=20), _ints)
def test_a_record_error_pickles_equal(message: str, path: str, number: int | None) -> None:
    error = RecordError(message, path=Path(path), error_number=number)
    same_exception(error, round_trip(error))


@given(st.text(max_size=60), st.text(max_size=20))
def test_request_errors_pickle_equal(message: str, option: str) -> None:
    for kind in (RequestError, LimitsUnavailable):
        error = kind(message, option=option)
        same_exception(error, round_trip(error))


def test_timeout_expired_pickles_without_its_handle() -> None:
    with tether.launch(["sleep", "30"], record=False) as job:
        try:
            job.wait(timeout=0.01)
        except TimeoutExpired as caught:
            error = caught
        job.kill()
    copy = round_trip(error)
    assert (type(copy), copy.args, str(copy), copy.timeout, copy.cmd) == (
        TimeoutExpired,
        error.args,
        str(error),
        0.01,
        ["sleep", "30"],
    )
    assert error.tether is job
    assert copy.tether is None  # a handle's descriptors mean nothing in another process
    assert isinstance(copy, TimeoutError)
    assert isinstance(copy, subprocess.TimeoutExpired)


@given(
    st.lists(st.text(max_size=10), min_size=1, max_size=4),
    st.floats(min_value=0, allow_nan=False),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=20),
    st.none() | outcomes,
)
def test_a_run_timeout_pickles_with_its_output_and_outcome(
    cmd: list[str], timeout: float, output: bytes | None, stderr: bytes | None, outcome: Any
) -> None:
    error = TimeoutExpired(cmd, timeout, output, stderr, outcome=outcome)
    copy = round_trip(error)
    same_exception(error, copy)
    assert (copy.stdout, copy.stderr, copy.outcome) == (output, stderr, outcome)


@given(
    st.sampled_from([CommandNotFound, CommandNotExecutable]),
    st.text(max_size=60),
    st.none() | st.text(min_size=1, max_size=20),
)
def test_a_named_launch_error_pickles_as_itself(
    kind: type[LaunchError], message: str, program: str | None
) -> None:
    error = kind(message, errno=errno.ENOENT, exit_status=127, filename=program)
    copy = round_trip(error)
    same_exception(error, copy)
    assert copy.filename == program


#: One instance of every exception class tether defines, built the way tether builds it.
EXAMPLES: dict[type[BaseException], Callable[[], BaseException]] = {
    LaunchError: lambda: LaunchError("failed", errno=errno.ENOENT, exit_status=127),
    TimeoutExpired: lambda: TimeoutExpired(["sleep", "9"], 1.5, b"so far"),
    CommandNotFound: lambda: CommandNotFound("nope", errno=errno.ENOENT, filename="nope"),
    CommandNotExecutable: lambda: CommandNotExecutable("no", errno=errno.EACCES, filename="./x"),
    CommandFailed: lambda: CommandFailed(
        Outcome(tether.Reason.CANCELLED, 130, -15, False, None, started_at=datetime.now(UTC))
    ),
    RecordError: lambda: RecordError("cannot", path=Path("/x"), error_number=errno.EACCES),
    JSONRefused: lambda: JSONRefused("holds NaN"),
    RequestError: lambda: RequestError("bad", option="deadline"),
    LimitsUnavailable: lambda: LimitsUnavailable("no cgroup", option="limits"),
    ReviewError: lambda: ReviewError("nothing"),
    UnsupportedPlatform: lambda: UnsupportedPlatform("not Linux"),
    CgroupUnavailable: lambda: CgroupUnavailable("no v2", errno.EACCES),
    CloneUnavailable: lambda: CloneUnavailable("no clone3 here"),
    LimitError: lambda: LimitError("--memory-max: no"),
    SpecError: lambda: SpecError("empty"),
    IllegalEvent: lambda: IllegalEvent("no"),
    _Deferred: _Deferred,
    DurationError: lambda: DurationError("soon"),
    CommandNotStarted: lambda: CommandNotStarted(errno.EACCES, "denied", "exec"),
    SpawnFailed: lambda: SpawnFailed("exec", errno.ENOENT, "no such file"),
    UsageError: lambda: UsageError("argument --record: expected one argument"),
    OptionError: lambda: OptionError("unrecognized option '--bogus'"),
    Unreadable: lambda: Unreadable("[Errno 13] Permission denied: '/proc/self/status'"),
    BusGarbled: lambda: BusGarbled("a message of 70000 bytes"),
    OutputDecodeError: lambda: _decode_error(
        Outcome(tether.Reason.COMPLETED, 0, 0, False, None, stdout=b"\xff"),
        "stdout",
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    ),
}


def defined_exceptions() -> set[type[BaseException]]:
    """Every exception class defined in a module of the package (not imported into it)."""
    found: set[type[BaseException]] = set()
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == info.name:
                found.add(value)
    return found


def test_every_exception_class_has_an_example() -> None:
    assert defined_exceptions() - set(EXAMPLES) == set()


def test_every_exception_pickles_equal() -> None:
    for kind, build in EXAMPLES.items():
        error = build()
        assert type(error) is kind
        copy = round_trip(error)
        same_exception(error, copy)

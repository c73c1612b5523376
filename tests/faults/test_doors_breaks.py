"""Hostile input at the doors that start a command: each break once found, as a test.

``tether run``, ``tether timeout`` and the seed door (``python -m
tether.supervisor``) must answer any command line with the command's run or
one line on stderr and a documented status: never a traceback, never a
command left running, never a file outside the record directory. Each test
here started as a real break (a traceback, a wrong status, a record that
failed its schema) or checks one that an adversarial review reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    alive,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)
from tether.caller.request import MAX_LABEL_CHARACTERS, RequestError, build_request
from tether.linux.prctl import SUPERVISOR_NAME
from tether.linux.proctree import stat_of

GNU_TIMEOUT = shutil.which("timeout")
SEED = [sys.executable, "-m", "tether.supervisor"]

Argv = list[str | bytes]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every door started here: its home and state inside ``tmp_path``."""
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


@pytest.fixture
def lifeline() -> Iterator[tuple[int, int]]:
    """A pipe for the seed door: the read end to pass as ``--parent-fd``, the write end kept."""
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):  # a test may have closed one
            os.close(fd)


def door(
    argv: Sequence[str | bytes], env: dict[str, str], **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run a door to its end (bounded); text output, undecodable bytes escaped."""
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        argv,
        env=env,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=BOUND,
        **kwargs,
    )


def seed_argv(
    fd: int | str,
    record: Path | str,
    *command: str | bytes,
    variant: str | bytes = "v",
    deadline: str = "10",
    grace: str = "1",
) -> Argv:
    return [
        *SEED,
        "--variant",
        variant,
        "--parent-fd",
        str(fd),
        "--record",
        str(record),
        "--deadline-seconds",
        deadline,
        "--grace-seconds",
        grace,
        "--",
        *command,
    ]


def assert_one_line_refusal(result: subprocess.CompletedProcess[str], needle: str) -> None:
    """One line saying what was wrong; a usage error adds GNU's pointer to the help."""
    assert result.returncode == 125, result.stderr
    assert "Traceback" not in result.stderr
    first, *rest = result.stderr.strip().splitlines()
    assert rest in ([], ["Try 'tether run --help' for more information."]), result.stderr
    assert needle in first


def created_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


# -- "--" given as an option's value -------------------------------------------


@pytest.mark.parametrize("option", ["--deadline", "--grace"])
def test_a_duration_of_double_dash_is_refused_naming_the_flag(
    tmp_path: Path, env: dict[str, str], option: str
) -> None:
    marker = tmp_path / "started"
    result = door(tether_argv("run", f"{option}=--", "--", "touch", str(marker)), env)
    assert_one_line_refusal(result, f"{option}: invalid duration '--'")
    assert not marker.exists()
    assert created_files(tmp_path) == []


def test_a_label_of_double_dash_is_a_label(tmp_path: Path, env: dict[str, str]) -> None:
    record = tmp_path / "r.json"
    result = door(tether_argv("run", "--name=--", "--record", str(record), "--", "true"), env)
    assert result.returncode == 0, result.stderr
    data = read_json(record)
    validate_record(data)
    assert data["variant"] == "--"


def test_the_seed_door_takes_double_dash_as_a_value(
    tmp_path: Path, env: dict[str, str], lifeline: tuple[int, int]
) -> None:
    read_end, _ = lifeline
    base = seed_argv(read_end, tmp_path / "r.json", "true")
    split = base.index("--")
    # --record=-- is a record named "--" in the working directory; --variant=-- a label.
    options = [*base[:split], "--record=--", "--variant=--", "--"]
    result = door([*options, "true"], env, cwd=tmp_path, pass_fds=(read_end,))
    assert result.returncode == 0, result.stderr
    data = read_json(tmp_path / "--")
    validate_record(data)
    assert data["variant"] == "--"

    refused = door(
        [*base[:split], "--deadline-seconds=--", "--", "true"], env, pass_fds=(read_end,)
    )
    assert_one_line_refusal(refused, "--deadline-seconds: invalid duration '--'")


# -- --parent-fd ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("2147483648", "not an open file descriptor"),
        ("18446744073709551616", "not a descriptor number"),
        ("9" * 5000, "not a descriptor number"),
        ("\u0663", "not a descriptor number"),  # Arabic-Indic three: int() reads 3
        (" 3", "not a descriptor number"),
        ("+3", "not a descriptor number"),
        ("1_0", "not a descriptor number"),  # int() reads ten
        ("-1", "not a descriptor number"),
        ("", "not a descriptor number"),
        ("--", "expected one argument"),
    ],
)
def test_a_parent_fd_that_is_no_descriptor_is_refused(
    tmp_path: Path, env: dict[str, str], value: str, needle: str
) -> None:
    marker = tmp_path / "started"
    record = tmp_path / "r.json"
    argv = seed_argv(value, record, "touch", str(marker))
    if value == "--":  # as its own word, "--" ends the options: --parent-fd has no value
        argv = [*SEED, "--variant", "v", "--record", str(record), "--parent-fd", "--", "true"]
    result = door(argv, env)
    assert_one_line_refusal(result, needle)
    assert not marker.exists()
    assert not record.exists()


# -- a deleted working directory ---------------------------------------------------


def _in_deleted_directory(tmp_path: Path) -> Callable[[], None]:
    """A ``preexec_fn`` that leaves the child in a directory removed under it."""
    gone = tmp_path / "gone"

    def enter() -> None:
        os.mkdir(gone)
        os.chdir(gone)
        os.rmdir(gone)

    return enter


@pytest.mark.parametrize("which", ["run", "timeout", "seed"])
def test_a_deleted_working_directory_is_where_the_command_runs(
    tmp_path: Path, env: dict[str, str], lifeline: tuple[int, int], which: str
) -> None:
    """GNU ``timeout`` runs the command in the removed directory; so does every door."""
    out = tmp_path / "cwd.txt"
    command = ["sh", "-c", f'readlink "/proc/$$/cwd" > "{out}"']
    record = tmp_path / "r.json"
    read_end, _ = lifeline
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": tether_argv("run", "--record", str(record), "--", *command),
        "timeout": tether_argv("timeout", "--record", str(record), "5", *command),
        "seed": seed_argv(read_end, record, *command),
    }
    argv: Argv = list(argvs[which])
    result = door(argv, env, pass_fds=(read_end,), preexec_fn=_in_deleted_directory(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert out.read_text().strip() == f"{tmp_path / 'gone'} (deleted)"
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "completed"


@pytest.mark.parametrize("which", ["run", "timeout", "seed"])
def test_a_relative_record_path_without_a_working_directory_is_refused(
    tmp_path: Path, env: dict[str, str], lifeline: tuple[int, int], which: str
) -> None:
    marker = tmp_path / "started"
    read_end, _ = lifeline
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": tether_argv("run", "--record", "r.json", "--", "touch", str(marker)),
        "timeout": tether_argv("timeout", "--record", "r.json", "5", "touch", str(marker)),
        "seed": seed_argv(read_end, "r.json", "touch", str(marker)),
    }
    argv: Argv = list(argvs[which])
    result = door(argv, env, pass_fds=(read_end,), preexec_fn=_in_deleted_directory(tmp_path))
    assert_one_line_refusal(result, "the current directory is gone")
    assert not marker.exists()


# -- a very low limit on open files ------------------------------------------------


def _marker_pids(marker: str) -> list[int]:
    """The processes whose command line holds ``marker`` (the command, wherever it went)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _left_running(marker: str) -> list[int]:
    """The processes holding ``marker`` once the door's supervisor, if still there, is gone.

    ``tether run`` and ``tether timeout`` fork their supervisor without an
    ``exec``: it carries its caller's command line, marker included, and may
    still be on its way out (closing its log, exiting) when its caller has
    heard that the run ended and returned. It is waited for, within the
    bound; a supervisor that stays, or a command left running, is still found.
    """
    for pid in _marker_pids(marker):
        stat = stat_of(pid)
        if stat is not None and stat.name == SUPERVISOR_NAME:
            wait_gone(pid)
    return _marker_pids(marker)


def _open_files_limit(limit: int) -> Callable[[], None]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return lower


@pytest.mark.parametrize("limit", [8, 10, 12, 16, 24])
@pytest.mark.parametrize("which", ["run", "timeout", "seed"])
def test_a_low_open_files_limit_is_a_refusal_or_a_run(  # noqa: PLR0917 - fixtures
    tmp_path: Path,
    env: dict[str, str],
    lifeline: tuple[int, int],
    processes: Processes,
    which: str,
    limit: int,
) -> None:
    """Under ``ulimit -n`` as low as 8: one line and 125, or the run, never a traceback or a leak.

    The command is a ``sleep`` with a duration no other process has, found in
    ``/proc`` afterwards: under such a limit it cannot be trusted to announce
    itself (a shell cannot even redirect).
    """
    marker = f"61.{os.getpid()}{limit}{len(which)}"
    record = tmp_path / "r.json"
    read_end, _ = lifeline
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": tether_argv("run", "--record", str(record), "--deadline", "0.3", "--"),
        "timeout": tether_argv("timeout", "--record", str(record), "0.3"),
        "seed": seed_argv(read_end, record, deadline="0.3"),
    }
    argv: Argv = list(argvs[which])
    argv += ["sleep", marker]
    try:
        result = door(argv, env, pass_fds=(read_end,), preexec_fn=_open_files_limit(limit))
    finally:
        leaked = _left_running(marker)
        processes.track(*leaked)
    assert "Traceback" not in result.stderr
    assert leaked == [], f"left running under ulimit -n {limit}: {leaked}"
    # 126: the command itself could not be executed ("Too many open files").
    assert result.returncode in (124, 125, 126), result.stderr
    if result.returncode != 124:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    if record.exists():
        validate_record(read_json(record))


# -- the empty command name --------------------------------------------------------


@pytest.mark.parametrize("which", ["run", "timeout", "seed"])
def test_an_empty_command_name_is_not_found(
    tmp_path: Path, env: dict[str, str], lifeline: tuple[int, int], which: str
) -> None:
    """``timeout 1 ''`` is 127 in GNU (``execvp("")`` is ENOENT); tether said 126."""
    record = tmp_path / "r.json"
    read_end, _ = lifeline
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": tether_argv("run", "--record", str(record), "--", ""),
        "timeout": tether_argv("timeout", "--record", str(record), "1", ""),
        "seed": seed_argv(read_end, record, ""),
    }
    argv: Argv = list(argvs[which])
    result = door(argv, env, pass_fds=(read_end,))
    assert result.returncode == 127, result.stderr
    assert result.stderr.strip().endswith("failed to run command '': No such file or directory")
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "launch_failed"
    assert data["launch_error"] == {
        "errno": 2,
        "errno_name": "ENOENT",
        "message": "No such file or directory",
    }


@pytest.mark.skipif(GNU_TIMEOUT is None, reason="GNU timeout is not installed")
@pytest.mark.parametrize("args", [["1", ""], ["\u0663", "true"], ["-s", "\u0663", "1", "true"]])
def test_like_gnu_timeout_for_empty_names_and_foreign_digits(
    tmp_path: Path, env: dict[str, str], args: list[str]
) -> None:
    assert GNU_TIMEOUT is not None
    gnu = door(["timeout", *args], {**env, "LC_ALL": "C"}, executable=GNU_TIMEOUT)
    ours = door(tether_argv("timeout", "--no-record", *args), env)
    assert ours.returncode == gnu.returncode, ours.stderr
    assert "Traceback" not in ours.stderr


# -- labels ------------------------------------------------------------------------

LABELS: list[str | bytes] = [
    "",
    "two\nlines",
    "\x01\x1b[31mred\x7f\t",
    b"not utf-8: \xff\xfe",  # reaches Python as lone surrogates
    "AKIAIOSFODNN7EXAMPLE",
    "password=hunter2",
    "x" * MAX_LABEL_CHARACTERS,
]


@pytest.mark.parametrize("label", LABELS, ids=range(len(LABELS)))
@pytest.mark.parametrize("which", ["run", "seed"])
def test_any_label_makes_a_record_that_validates(
    tmp_path: Path,
    env: dict[str, str],
    lifeline: tuple[int, int],
    which: str,
    label: str | bytes,
) -> None:
    record = tmp_path / "r.json"
    read_end, _ = lifeline
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": [*tether_argv("run", "--record", str(record), "--name"), label, "--", "true"],
        "seed": seed_argv(read_end, record, "true", variant=label),
    }
    argv: Argv = list(argvs[which])
    result = door(argv, env, pass_fds=(read_end,))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    data = read_json(record)
    validate_record(data)
    expected = os.fsdecode(label)
    variant = data["variant"]
    assert isinstance(variant, str)
    # As given, or with its secrets redacted ("password=[redacted]", or all of it).
    assert variant == expected or "[redacted]" in variant
    log = record.with_name("r.events.jsonl").read_text()
    for line in log.splitlines():
        json.loads(line)
    if variant != expected:  # then the secret is nowhere else either
        assert expected not in record.read_text()
        assert expected not in log
        assert "hunter2" not in record.read_text() + log


@pytest.mark.parametrize("which", ["run", "seed"])
def test_a_label_too_long_for_a_record_is_refused(
    tmp_path: Path, env: dict[str, str], lifeline: tuple[int, int], which: str
) -> None:
    """100 kB fits in one argv word (128 kB), but not in a label: one line naming the flag."""
    record = tmp_path / "r.json"
    marker = tmp_path / "started"
    read_end, _ = lifeline
    label = "x" * 100_000
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": tether_argv("run", "--record", str(record), "--name", label, "--"),
        "seed": seed_argv(read_end, record, variant=label),
    }
    argv: Argv = list(argvs[which])
    argv += ["touch", str(marker)]
    result = door(argv, env, pass_fds=(read_end,))
    flag = {"run": "--label", "seed": "--variant"}[which]
    assert_one_line_refusal(result, f"{flag}: a label of 100000 characters is too long")
    assert len(result.stderr) < 200
    assert not marker.exists()
    assert not record.exists()


def test_the_api_refuses_a_label_of_a_megabyte() -> None:
    """Through the API a label has no argv limit: 1 MB made a record ``tether show`` refused."""
    with pytest.raises(RequestError, match=r"^label: a label of 1000000 characters") as caught:
        build_request(["true"], asked_at=0.0, record=False, label="x" * 1_000_000)
    assert caught.value.option == "label"


# -- command words -----------------------------------------------------------------


@pytest.mark.parametrize("which", ["run", "timeout", "seed"])
def test_empty_words_a_second_double_dash_and_a_huge_argv_reach_the_command(
    env: dict[str, str], lifeline: tuple[int, int], which: str
) -> None:
    """Close to ``ARG_MAX`` (2 MiB here, with tether's own words and the environment)."""
    read_end, _ = lifeline
    words = ["", "--", "", *["w" * 100_000] * 15]
    command = ["sh", "-c", 'printf "%s|" "$#" "$1" "$2" "$3"', "sh", *words]
    argvs: dict[str, Sequence[str | bytes]] = {
        "run": tether_argv("run", "--no-record", "--", *command),
        "timeout": tether_argv("timeout", "--no-record", "5", *command),
        "seed": seed_argv(read_end, Path(env["XDG_STATE_HOME"], "r.json"), *command),
    }
    argv: Argv = list(argvs[which])
    result = door(argv, env, pass_fds=(read_end,))
    assert result.returncode == 0, result.stderr[:500]
    assert result.stdout == f"{len(words)}||--||"


# -- streams that cannot be written --------------------------------------------------

HELP_ARGVS = [["run", "--help"], ["timeout", "--help"], ["timeout", "--version"], ["--version"]]


@pytest.mark.parametrize("args", HELP_ARGVS, ids=" ".join)
def test_help_to_a_full_stdout_is_a_write_error(env: dict[str, str], args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            tether_argv(*args), env=env, stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=BOUND,
        )  # fmt: skip
    assert_one_line_refusal(result, "write error: No space left on device")


@pytest.mark.parametrize("args", [*HELP_ARGVS, ["seed"]], ids=" ".join)
def test_help_to_a_closed_stdout_is_a_write_error(env: dict[str, str], args: list[str]) -> None:
    argv = [*SEED, "--help"] if args == ["seed"] else tether_argv(*args)
    result = door(["sh", "-c", 'exec "$@" >&-', "sh", *argv], env)
    assert_one_line_refusal(result, "write error: Bad file descriptor")


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["run", "--deadline", "x", "--", "true"], 125),
        (["run", "--bogus", "--", "true"], 125),
        (["run", "--", "/nonexistent/command"], 127),
        (["timeout", "x", "true"], 125),
        # GNU timeout's own status when its "failed to run command" cannot be written.
        (["timeout", "1", "/nonexistent/command"], 125),
        (["bogus"], 125),
        ([], 125),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_a_closed_or_full_stderr_keeps_the_status_and_stdout_clean(
    env: dict[str, str], args: list[str], status: int
) -> None:
    """A message with nowhere to go is dropped: not a traceback (status 1), not on stdout;
    `tether timeout` then exits as GNU's does (125, a write error)."""
    argv = tether_argv(*args)
    closed = door(["sh", "-c", 'exec "$@" 2>&-', "sh", *argv], env)
    assert (closed.returncode, closed.stdout) == (status, "")
    full = door(["sh", "-c", 'exec "$@" 2>/dev/full', "sh", *argv], env)
    assert (full.returncode, full.stdout) == (status, "")


def test_timeout_dies_like_its_command_with_stdout_and_stderr_closed(env: dict[str, str]) -> None:
    """It flushes both streams before raising the command's signal: neither may be there."""
    argv = tether_argv("timeout", "--no-record", "5", "sh", "-c", "kill -TERM $$")
    result = door(["sh", "-c", '"$@" >&- 2>&-; echo "$?"', "sh", *argv], env)
    assert result.stdout.strip() == str(128 + signal.SIGTERM)


# -- an endless grace and a lost caller ------------------------------------------------


def test_timeout_without_kill_after_stops_a_command_whose_caller_died(
    tmp_path: Path, env: dict[str, str], processes: Processes, ready: ReadyPipe
) -> None:
    """Without -k the grace is endless (GNU), but a lost caller bounds it: the default grace."""
    record = tmp_path / "lost.json"
    script = f'echo "ready $$" > "{ready.path}"; exec sleep 60'
    caller = processes.start(
        tether_argv("timeout", "--record", str(record), "-s", "CHLD", "100", "sh", "-c", script),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (command,) = ready.ready_pids()
    supervisor = parent_of(command)
    assert supervisor is not None
    processes.track(command, supervisor)
    caller.kill()
    caller.wait(timeout=BOUND)
    assert wait_gone(command, timeout=BOUND)
    assert wait_gone(supervisor)
    data = read_json(record)
    assert (data["reason"], data["escalated_to_sigkill"]) == ("parent_lost", True)
    signals = data["signals"]
    assert isinstance(signals, list)
    assert [sent["signal"] for sent in signals] == ["SIGCHLD", "SIGCONT", "SIGKILL"]

"""``tether timeout`` against what coreutils' own test suite checks of GNU ``timeout``.

``scripts/gnu-timeout-suite`` runs coreutils' tests themselves; this file
ports their checks into tether's suite. Where the machine's GNU ``timeout``
(9.1 here) behaves the same, a case runs both and compares; where newer GNU
(9.4 to 9.11, and coreutils HEAD) changed the behaviour and the old one on
the machine would disagree, the case is named ``newer_gnu`` and checks
tether alone against the newer behaviour.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from conftest import BOUND, Processes, ReadyPipe, read_json, wait_gone

GNU_TIMEOUT = shutil.which("timeout", path="/usr/bin:/bin")
TETHER_SCRIPT = Path(sys.executable).with_name("tether")
needs_gnu = pytest.mark.skipif(GNU_TIMEOUT is None, reason="GNU timeout is not installed")


@pytest.fixture
def as_timeout(tmp_path: Path) -> str:
    """A ``timeout`` that is a symlink to the ``tether`` script, as a user would install it."""
    if not TETHER_SCRIPT.exists():
        pytest.skip(f"no tether script beside {sys.executable}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "timeout").symlink_to(TETHER_SCRIPT)
    return str(bin_dir / "timeout")


def run(program: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``program`` as a shell finds it on PATH: with argv[0] ``timeout``."""
    return subprocess.run(
        ["timeout", *args],
        executable=program,
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "LC_ALL": "C"},
    )


def shell_status(returncode: int) -> int:
    """``$?`` for a return code: 128+N for death by signal N."""
    return returncode if returncode >= 0 else 128 - returncode


# -- what GNU 9.1 on this machine does too ------------------------------------------------

AGREED = [
    # timeout-parameters.sh, timeout-large-parameters.sh, timeout.sh
    (["invalid", "sleep", "0"], 125),
    ([" -0.1", "sleep", "0"], 125),
    (["--kill-after=invalid", "1", "sleep", "0"], 125),
    (["42D", "sleep", "0"], 125),
    (["10.34", "sleep", "0"], 0),
    (["9.999999999", "sleep", "0"], 0),
    (["--signal=invalid", "1", "sleep", "0"], 125),
    (["10", "no_such"], 127),
    (["10", "."], 126),
    (["4294967296", "sleep", "0"], 0),
    (["9223372036854775808d", "sleep", "0"], 0),
    (["2.34e+5d", "sleep", "0"], 0),
    (["1.189731495357231765e+4932", "sleep", "0"], 0),
    (["--", "-1.189731495357231765e+4932", "sleep", "0"], 125),
    (["1d", "true"], 0),
    (["0", "true"], 0),
    (["-s0", "-k.3", ".3", "sleep", "10"], 137),
    (["--foreground", "-s0", "-k.3", ".3", "sleep", "10"], 137),
    # strtod's reading: what scripts already pass
    (["inf", "true"], 0),
    (["0x10", "true"], 0),
    ([" 5", "true"], 0),
    (["5 ", "true"], 125),
    (["nan", "true"], 125),
    (["1e5000", "true"], 0),
    (["-s", "RTMIN+1", ".3", "sleep", "10"], 124),
    (["-s", "40", ".3", "sleep", "10"], 124),
]


@needs_gnu
@pytest.mark.parametrize(("args", "status"), AGREED, ids=[" ".join(a) for a, _ in AGREED])
def test_same_as_gnu(as_timeout: str, args: list[str], status: int) -> None:
    assert GNU_TIMEOUT is not None
    gnu, ours = run(GNU_TIMEOUT, args), run(as_timeout, args)
    assert (shell_status(gnu.returncode), shell_status(ours.returncode)) == (status, status)
    assert ours.stderr == gnu.stderr.replace("\u2018", "'").replace("\u2019", "'")


@needs_gnu
@pytest.mark.parametrize("option", ["-/", "--thisoptiondoesnotexist", "-k", "--signal"])
def test_usage_errors_read_as_gnu(as_timeout: str, option: str) -> None:
    # invalid-opt.pl and usage_vs_getopt.sh: the same two lines, naming the program as invoked.
    assert GNU_TIMEOUT is not None
    gnu, ours = run(GNU_TIMEOUT, [option]), run(as_timeout, [option])
    assert ours.returncode == gnu.returncode == 125
    assert ours.stderr == gnu.stderr
    assert ours.stderr.endswith("Try 'timeout --help' for more information.\n")


def test_tether_timeout_names_itself_as_invoked() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tether", "timeout", "-/"],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert result.returncode == 125
    assert result.stderr == (
        "tether timeout: invalid option -- '/'\nTry 'tether timeout --help' for more information.\n"
    )


@needs_gnu
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("option", ["--help", "--version"])
def test_help_and_version_to_a_full_device_fail(as_timeout: str, option: str) -> None:
    # help-version.sh
    assert GNU_TIMEOUT is not None
    for program in (GNU_TIMEOUT, as_timeout):
        with open("/dev/full", "w") as full:
            result = subprocess.run(
                [program, option], stdout=full, stderr=subprocess.PIPE, text=True, timeout=BOUND
            )
        assert result.returncode == 125, program
        assert ": write error: " in result.stderr, program


def test_every_option_in_the_help_is_accepted(as_timeout: str) -> None:
    # usage_vs_getopt.sh: OPTION --help --help prints the help.
    help_text = run(as_timeout, ["--help"]).stdout
    options = [
        word.split("=")[0].rstrip(",")
        for line in help_text.splitlines()
        if line.startswith("  ") and line.lstrip().startswith("-")
        for word in line.split()[:2]
        if word.startswith("-") and word not in ("--help", "--version")
    ]
    assert "--record" in options
    assert "-f" in options
    for option in options:
        result = run(as_timeout, [option, "--help", "--help"])
        if result.returncode == 0:
            assert result.stdout == help_text, option
        else:  # an option that takes --help as its argument, and refuses it
            assert "unrecognized" not in result.stderr, option
            assert "invalid option" not in result.stderr, option


@needs_gnu
def test_a_sigchld_ignored_by_the_caller_changes_nothing(as_timeout: str) -> None:
    for program in (GNU_TIMEOUT, as_timeout):
        result = subprocess.run(
            ["sh", "-c", 'trap "" CHLD; exec "$0" 10 true', str(program)], timeout=BOUND
        )
        assert result.returncode == 0


@needs_gnu
def test_verbose_to_a_closed_pipe_is_newer_gnu_but_timed_out_is_124(as_timeout: str) -> None:
    # timeout.sh: { timeout -v .1 sleep 10 2>&1; echo $?; } | :
    # GNU 9.1 dies of SIGPIPE (141); newer GNU, and tether, still say 124.
    script = '{ "$0" -v .3 sleep 10 2>&1; echo $? >"$1"; } | :'
    status_file = Path(as_timeout).parent / "status"
    subprocess.run(["sh", "-c", script, as_timeout, str(status_file)], timeout=BOUND, check=True)
    assert status_file.read_text() == "124\n"


def _run_bytes(
    program: str, args: list[bytes], locale: str, stderr: IO[bytes] | int = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    """``run``, with arguments and stderr as bytes, in ``locale``."""
    return subprocess.run(
        [b"timeout", *args],
        executable=program,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        timeout=BOUND,
        env={**os.environ, "LC_ALL": locale},
        check=False,
    )


def _locales() -> list[str]:
    said = subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False).stdout
    utf8 = [name for name in ("C.UTF-8", "C.utf8") if name in said.split()]
    return ["C", *utf8[:1]]


NOT_UTF8 = [
    [b"10", b"\xff"],  # failed to run command '\377' (quote)
    [b"10", b"name\xfe\x01\xc3\xa9'"],  # octal, control, a valid character, a quote
    [b"--\xff", b"1", b"true"],  # unrecognized option '--' and the byte itself (getopt)
    [b"-\xff", b"1", b"true"],  # invalid option -- the byte itself (getopt)
    [b"\xff", b"true"],  # invalid time interval '\377' (quote)
    [b"-s", b"\xff", b"1", b"true"],  # '\377': invalid signal (quote)
]


@needs_gnu
@pytest.mark.parametrize("locale", _locales())
@pytest.mark.parametrize("args", NOT_UTF8, ids=[repr(b" ".join(a)) for a in NOT_UTF8])
def test_bytes_that_are_not_utf8_are_said_as_gnu_says_them(
    as_timeout: str, args: list[bytes], locale: str
) -> None:
    # Issue 35 item 10: Python's '\udcff' where GNU writes '\377', or the byte as given.
    assert GNU_TIMEOUT is not None
    gnu, ours = _run_bytes(GNU_TIMEOUT, args, locale), _run_bytes(as_timeout, args, locale)
    assert ours.returncode == gnu.returncode
    # In a UTF-8 locale GNU quotes with U+2018 and U+2019; tether keeps ' (and so escapes ').
    curly = gnu.stderr.replace("\u2018".encode(), b"'").replace("\u2019".encode(), b"'")
    if locale != "C":
        curly = curly.replace(b"\xa9'", b"\xa9\\'")
    assert ours.stderr == curly


@needs_gnu
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("args", [[b"10", b"no_such"], [b"10", b"."]], ids=["127", "126"])
def test_a_message_that_cannot_be_written_is_a_failure_as_for_gnu(
    as_timeout: str, args: list[bytes]
) -> None:
    # GNU's close_stdout at exit: a message lost to a closed or full stderr makes it 125.
    assert GNU_TIMEOUT is not None
    for program in (GNU_TIMEOUT, as_timeout):
        with open("/dev/full", "wb") as full:
            assert _run_bytes(program, args, "C", stderr=full).returncode == 125, program
        closed = subprocess.run(
            ["sh", "-c", '"$0" "$@" 2>&-', program, *map(os.fsdecode, args)],
            timeout=BOUND,
            check=False,
        )
        assert closed.returncode == 125, program


# -- what newer GNU does and the machine's 9.1 does not ------------------------------------


def test_newer_gnu_verbose_with_stderr_closed_after_the_deadline_is_124(as_timeout: str) -> None:
    # coreutils 9.10 (commit 86061ddbb): once the deadline has passed, a -v message that
    # cannot be written leaves the status 124 (9.1 on this machine says 125). Before it, 125:
    # the test above.
    for args, status in (("-v .3 sleep 10", 124), ("-v -s INT .3 sleep 10", 124)):
        result = subprocess.run(
            ["sh", "-c", f'"$0" {args} 2>&-', as_timeout], timeout=BOUND, check=False
        )
        assert result.returncode == status, args


def test_newer_gnu_underflow_times_out(as_timeout: str) -> None:
    # timeout-parameters.sh (9.7+): 1e-10000 is the smallest interval, not 0.
    assert run(as_timeout, ["1e-10000", "sleep", "10"]).returncode == 124


def test_newer_gnu_negative_underflow_is_refused(as_timeout: str) -> None:
    result = run(as_timeout, [" -1e-10000", "sleep", "0"])
    assert result.returncode == 125
    assert result.stderr.startswith("timeout: invalid time interval ' -1e-10000'\n")


def test_newer_gnu_verbose_names_signal_zero(as_timeout: str) -> None:
    # timeout.sh (9.5+): "sending signal 0", where 9.1 says "EXIT".
    result = run(as_timeout, ["-v", "-s0", "-k", ".3", ".3", "sleep", "10"])
    assert shell_status(result.returncode) == 137
    assert result.stderr.splitlines()[:2] == [
        "timeout: sending signal 0 to command 'sleep'",
        "timeout: sending signal KILL to command 'sleep'",
    ]


def _as_gnu_does(check: Callable[[str], None], gnu: str) -> None:
    """GNU ``timeout``'s side of a comparison: the reference, allowed three tries.

    On a loaded machine GNU ``timeout`` 9.1 itself sometimes loses the race
    between a signal and its own bookkeeping (130 instead of dying of SIGINT,
    138 instead of 124 for SIGALRM); that is the reference's flake, not
    tether's. tether's side of the same test gets one try.
    """
    for attempt in range(3):
        try:
            check(gnu)
        except AssertionError:
            if attempt == 2:
                raise
        else:
            return


def _started(
    program: str, args: list[str], ready: ReadyPipe, processes: Processes
) -> tuple[subprocess.Popen[bytes], int]:
    command = ["sh", "-c", f'echo ready $$ >"{ready.path}"; exec sleep 30']
    caller = processes.start([program, *args, *command])
    (pid,) = ready.ready_pids()
    processes.track(pid)
    wait_for_exec(pid, "sleep")
    return caller, pid


def wait_for_exec(pid: int, name: str) -> None:
    """Wait (bounded) until ``pid`` runs ``name``: a signal before its exec would hit the shell."""
    end = time.monotonic() + BOUND
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                return
        except OSError:
            break
        time.sleep(0.01)
    pytest.fail(f"{pid} never ran {name}")


@needs_gnu
@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM])
def test_a_signal_is_passed_on_as_itself(
    as_timeout: str, ready: ReadyPipe, processes: Processes, number: int
) -> None:
    # Ctrl-C: the command dies of SIGINT, and timeout with it (130 in a shell), not 143.
    assert GNU_TIMEOUT is not None

    def passed_on(program: str) -> None:
        caller, pid = _started(program, ["20"], ready, processes)
        caller.send_signal(number)
        assert caller.wait(timeout=BOUND) == -number, program
        assert wait_gone(pid), program

    _as_gnu_does(passed_on, GNU_TIMEOUT)
    passed_on(as_timeout)


@pytest.mark.parametrize("number", [signal.SIGUSR1, signal.SIGUSR2, signal.SIGRTMIN])
def test_newer_gnu_passes_on_more_signals(
    as_timeout: str, ready: ReadyPipe, processes: Processes, number: int
) -> None:
    # term-sig.h at HEAD: GNU 9.1 dies of SIGUSR1 itself and leaves the command running.
    caller, pid = _started(as_timeout, ["20"], ready, processes)
    caller.send_signal(number)
    assert caller.wait(timeout=BOUND) == -number
    assert wait_gone(pid)


@needs_gnu
def test_sigalrm_is_timeouts_own_timer(
    as_timeout: str, ready: ReadyPipe, processes: Processes
) -> None:
    assert GNU_TIMEOUT is not None

    def timed_out(program: str) -> None:
        caller, pid = _started(program, ["-s", "USR1", "20"], ready, processes)
        caller.send_signal(signal.SIGALRM)
        assert caller.wait(timeout=BOUND) == 124, program
        assert wait_gone(pid)

    _as_gnu_does(timed_out, GNU_TIMEOUT)
    timed_out(as_timeout)


def test_nested_timeouts_leave_the_inner_command_to_the_inner_timeout(
    as_timeout: str, tmp_path: Path, ready: ReadyPipe, processes: Processes
) -> None:
    # timeout-group.sh: timeout -sALRM 30 timeout -sUSR1 25 cmd; ALRM to the outer.
    note = tmp_path / "got"
    command = [
        "sh",
        "-c",
        f'trap "echo USR1 >{note}; exit 0" USR1; echo ready $$ >"{ready.path}"; '
        "while :; do sleep 0.05; done",
    ]
    caller = processes.start([as_timeout, "-sALRM", "30", as_timeout, "-sUSR1", "25", *command])
    (pid,) = ready.ready_pids()
    processes.track(pid)
    caller.send_signal(signal.SIGALRM)
    assert caller.wait(timeout=BOUND) == 124
    assert note.read_text() == "USR1\n"


def test_newer_gnu_a_killed_timeout_takes_its_command_along(
    as_timeout: str, ready: ReadyPipe, processes: Processes
) -> None:
    # timeout-group.sh (9.10+, PR_SET_PDEATHSIG): tether stops the whole tree, always.
    caller, pid = _started(as_timeout, ["20"], ready, processes)
    caller.kill()
    assert wait_gone(pid)


def test_ignored_signals_stay_ignored_for_the_command(as_timeout: str) -> None:
    # timeout.sh: "we don't catch/propagate ignored signals" (INT here: see
    # docs/timeout.md for PIPE, which the interpreter hides).
    script = 'trap "" INT; exec "$0" 10 sh -c "kill -INT \\$\\$; echo survived"'
    result = subprocess.run(
        ["sh", "-c", script, as_timeout], capture_output=True, text=True, timeout=BOUND
    )
    assert (result.returncode, result.stdout) == (0, "survived\n")


def test_no_record_by_default_and_one_on_request(as_timeout: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state), "HOME": str(tmp_path)}
    assert subprocess.run([as_timeout, "5", "true"], env=env, timeout=BOUND).returncode == 0
    assert not state.exists()
    record = tmp_path / "r.json"
    result = subprocess.run(
        [as_timeout, "--record", str(record), "5", "true"], env=env, timeout=BOUND
    )
    assert result.returncode == 0
    assert read_json(record)["reason"] == "completed"


def test_an_unusable_record_path_is_said_and_the_command_runs(
    as_timeout: str, tmp_path: Path
) -> None:
    result = run(as_timeout, ["--record", str(tmp_path), "5", "sh", "-c", "exit 3"])
    assert result.returncode == 3
    assert result.stderr.startswith("timeout: ")
    assert result.stderr.endswith("running without a record\n")


# -- the launcher: an inherited ignored SIGPIPE, which the interpreter hides ---------------

LAUNCHER = Path(sys.executable).with_name("tether-timeout")
needs_launcher = pytest.mark.skipif(
    not LAUNCHER.exists(), reason=f"no tether-timeout launcher beside {sys.executable}"
)


@pytest.fixture
def launcher_as_timeout(tmp_path: Path) -> str:
    bin_dir = tmp_path / "launcher-bin"
    bin_dir.mkdir()
    (bin_dir / "timeout").symlink_to(LAUNCHER)
    return str(bin_dir / "timeout")


@needs_gnu
@needs_launcher
def test_an_ignored_sigpipe_is_inherited_through_the_launcher(launcher_as_timeout: str) -> None:
    # timeout.sh, env-signal-handler.sh: (trap '' PIPE && timeout 10 yes | :) says "Broken pipe".
    script = '(trap "" PIPE && "$0" 10 yes | :) 2>&1 | grep -c "Broken pipe"'
    for program in (GNU_TIMEOUT, launcher_as_timeout):
        result = subprocess.run(
            ["bash", "-c", script, str(program)], capture_output=True, text=True, timeout=BOUND
        )
        assert result.stdout.strip() not in ("", "0"), program


@needs_launcher
def test_a_default_sigpipe_stays_default_through_the_launcher(launcher_as_timeout: str) -> None:
    result = subprocess.run(
        ["bash", "-c", '"$0" 10 yes | head -c1 >/dev/null; echo "${PIPESTATUS[0]}"',
         launcher_as_timeout],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )  # fmt: skip
    assert result.stdout.strip() == str(128 + signal.SIGPIPE)  # died of it, as GNU's does


@needs_launcher
def test_the_launchers_word_reaches_neither_the_command_nor_a_stranger(
    launcher_as_timeout: str, as_timeout: str
) -> None:
    seen = run(launcher_as_timeout, ["5", "sh", "-c", 'echo "[$TETHER_LAUNCHER]"'])
    assert seen.stdout == "[]\n"
    # A value left in an environment (not this process's pid) is no evidence.
    forged = subprocess.run(
        ["bash", "-c", '(trap "" PIPE && "$0" 10 yes | :) 2>&1 | grep -c "Broken pipe"',
         as_timeout],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "TETHER_LAUNCHER": "1:ffffffffffffffff"},
    )  # fmt: skip
    assert forged.stdout.strip() == "0"


# -- the launcher's own way in: the interpreter, not the console script ---------------------------


@needs_launcher
def test_the_launcher_becomes_the_interpreter_on_tethers_entry_point(
    launcher_as_timeout: str,
) -> None:
    # The command's parent is the caller's fork: it shows the caller's command line.
    seen = run(launcher_as_timeout, ["5", "sh", "-c", 'tr "\\0" " " </proc/$PPID/cmdline'])
    assert seen.returncode == 0, seen.stderr
    interpreter = (TETHER_SCRIPT.read_text().splitlines() or [""])[0].removeprefix("#!")
    assert seen.stdout.startswith(f"{interpreter} -P -c "), (interpreter, seen.stdout)
    assert "timeout_program" in seen.stdout


@needs_launcher
def test_no_file_where_the_command_runs_stands_in_for_a_module(
    launcher_as_timeout: str, tmp_path: Path
) -> None:
    cwd = tmp_path / "hostile"
    cwd.mkdir()
    for module in ("signal", "tether", "os", "select"):
        (cwd / f"{module}.py").write_text("raise SystemExit('shadowed')\n")
    result = subprocess.run(
        ["timeout", "5", "sh", "-c", "echo ran"],
        executable=launcher_as_timeout,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "ran\n", "")


@needs_launcher
def test_a_console_script_without_a_plain_interpreter_line_is_run_as_before(
    tmp_path: Path,
) -> None:
    # pip writes ``#!/bin/sh`` and an ``exec`` for an interpreter path with spaces or too long.
    bin_dir = tmp_path / "odd bin"
    bin_dir.mkdir()
    shutil.copy(LAUNCHER, bin_dir / "tether-timeout")
    script = bin_dir / "tether"
    script.write_text(f"#!/bin/sh\nexec '{sys.executable}' -m tether \"$@\"\n")
    script.chmod(0o755)
    (tmp_path / "timeout").symlink_to(bin_dir / "tether-timeout")
    seen = run(str(tmp_path / "timeout"), ["5", "sh", "-c", 'tr "\\0" " " </proc/$PPID/cmdline'])
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.startswith(f"{sys.executable} -m tether timeout 5 sh -c "), seen.stdout
    refused = run(str(tmp_path / "timeout"), ["-+"])
    assert (refused.returncode, refused.stderr.splitlines()[0]) == (
        125,
        "timeout: invalid option -- '+'",
    )

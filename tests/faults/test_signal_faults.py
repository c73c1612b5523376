"""Signals at the doors that were tracebacks or wrong deaths: SIGPIPE, real-time signals, Ctrl-C.

A request to a run that is over never kills a program that keeps SIGPIPE at its default;
``tether timeout`` dies of a real-time signal as its command did, as GNU does; a Ctrl-C
while tether is still loading ends it by the signal, quietly.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    tether_argv,
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every door started here: its home and state inside ``tmp_path``."""
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


# -- a request to a run that is over ------------------------------------------------


def test_cancelling_a_run_that_is_over_is_harmless_with_sigpipe_at_its_default(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``cancel()`` is "harmless once the run is over", but the request was written to a
    channel whose supervisor had exited: a program with SIGPIPE at its default (as command
    line tools set it, to end quietly in ``| head``) died of it, status 141."""
    program = (
        "import signal, time, tether\n"
        "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
        "handle = tether.launch(['true'], record=False)\n"
        "time.sleep(0.2)\n"
        "while handle.supervisor_pid and __import__('os').path.exists(\n"
        "    f'/proc/{handle.supervisor_pid}'):\n"
        "    time.sleep(0.02)\n"
        "handle.cancel()\n"
        "handle.kill()\n"
        "print(handle.wait().reason)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=BOUND
    )
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.strip() == "completed"


# -- a command that dies of a real-time signal --------------------------------------


@pytest.mark.parametrize("number", [signal.SIGRTMIN + 6, signal.SIGRTMAX - 1])
def test_timeout_dies_of_a_real_time_signal_like_its_command(
    env: dict[str, str], number: int
) -> None:
    """``tether timeout`` dies of the signal its command died of, as GNU does; for a
    real-time signal (``SIGRTMIN+6``) ``signal.Signals(40)`` raised, and a traceback reached
    the person, status 1."""
    script = f"kill -s {number} $$"
    result = subprocess.run(
        tether_argv("timeout", "--no-record", "5", "sh", "-c", script),
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert "Traceback" not in result.stderr
    assert result.returncode == -number, result.stderr
    if shutil.which("timeout"):
        gnu = subprocess.run(["timeout", "5", "sh", "-c", script], timeout=BOUND)
        assert gnu.returncode == result.returncode


# -- Ctrl-C while tether is still loading -------------------------------------------


@pytest.mark.parametrize(
    "words", [("run", "--", "sleep", "60"), ("timeout", "60", "sleep", "60"), ("ls",)]
)
def test_ctrl_c_while_tether_loads_ends_it_quietly(
    env: dict[str, str], words: tuple[str, ...]
) -> None:
    """A Ctrl-C before a door had installed its handler (while Python imported the
    subcommand: tens of milliseconds) showed a KeyboardInterrupt traceback. It now ends
    tether as it ends a C program, by the signal, quietly; nothing had been started."""
    program = (
        "import os, signal, sys\n"
        "import tether.cli.main as cli\n"
        "real_main = cli.main\n"
        "def main(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # the person's Ctrl-C, while loading\n"
        "    return real_main(*args, **kwargs)\n"
        "cli.main = main\n"
        f"sys.argv = ['tether', *{list(words)!r}]\n"
        "sys.exit(cli.console_main())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=BOUND
    )
    assert result.returncode == -signal.SIGINT, result.stderr
    assert result.stderr == ""

"""Descriptors as the CLI's users expect, and closing that is complete.

* ``tether timeout`` and ``tether run`` hand the command every descriptor they
  inherited, with its number, as GNU ``timeout`` and a shell do
  (``tether timeout 5 sh -c 'cat <&3' 3<file`` prints the file), the
  ``tether-timeout`` launcher too; the detached supervisor holds none of them
  once the command has them (a pipe's write end that someone waits on for
  end of file must not stay open in it).
* The API keeps ``subprocess``'s ``close_fds=True``: the command gets its
  three streams and nothing else, even a descriptor above the soft
  ``RLIMIT_NOFILE`` (closing went only up to the soft limit).
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import BOUND, ReadyPipe, tether_argv, wait_gone
from tether.linux.descriptors import close_all_but, open_descriptors

LAUNCHER = Path(sys.executable).with_name("tether-timeout")

#: ``tether timeout``, ``tether run`` and the launcher, each running ``command...``.
DOORS: dict[str, Callable[[list[str]], list[str]]] = {
    "timeout": lambda command: tether_argv("timeout", "5", *command),
    "run": lambda command: tether_argv("run", "--no-record", "--", *command),
    "launcher": lambda command: [str(LAUNCHER), "5", *command],
}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, check=False
    )


def _file(tmp_path: Path, text: str) -> int:
    path = tmp_path / "input.txt"
    path.write_text(text)
    return os.open(path, os.O_RDONLY)


@pytest.mark.parametrize("door", sorted(DOORS))
def test_an_inherited_descriptor_reaches_the_command_as_with_gnu_timeout(
    door: str, tmp_path: Path
) -> None:
    if door == "launcher" and not LAUNCHER.exists():
        pytest.skip(f"no tether-timeout launcher beside {sys.executable}")
    fd = _file(tmp_path, "from descriptor 3\n")
    try:
        done = subprocess.run(
            DOORS[door](["sh", "-c", "cat <&3"]),
            capture_output=True,
            text=True,
            timeout=BOUND,
            preexec_fn=lambda: os.dup2(fd, 3),
            close_fds=False,  # or Popen closes what preexec_fn opened
            check=False,
        )
    finally:
        os.close(fd)
    assert (done.returncode, done.stdout, done.stderr) == (0, "from descriptor 3\n", "")


def test_high_descriptors_above_the_soft_limit_reach_the_command_too(tmp_path: Path) -> None:
    fd = _file(tmp_path, "x")

    def inherit() -> None:
        for number in (500, 3000):
            os.dup2(fd, number)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(7)[1]))

    try:
        done = subprocess.run(
            DOORS["run"](["sh", "-c", "ls /proc/$$/fd"]),
            capture_output=True,
            text=True,
            timeout=BOUND,
            preexec_fn=inherit,
            close_fds=False,
            check=False,
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert {"500", "3000"} <= set(done.stdout.split())


def _held_by(pid: int) -> set[str]:
    """What ``pid``'s descriptors name; one closed between the listing and its reading is gone.

    (The supervisor is still loading while its command runs: the files it opens and
    closes come and go under the listing.)
    """
    held = set()
    for n in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            held.add(os.readlink(f"/proc/{pid}/fd/{n}"))
    return held


def test_the_supervisor_keeps_no_inherited_descriptor_open(tmp_path: Path) -> None:
    ready = ReadyPipe(tmp_path / "ready.fifo")
    read_end, write_end = os.pipe()
    pipe = os.readlink(f"/proc/self/fd/{write_end}")
    caller = subprocess.Popen(
        DOORS["run"](["sh", "-c", f"echo ready $PPID > {ready.path}; exec 3>&-; exec sleep 600"]),
        preexec_fn=lambda: os.dup2(write_end, 3),  # noqa: PLW1509 - a test, no threads
        close_fds=False,
        stdin=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        (supervisor,) = ready.ready_pids()
        assert pipe not in _held_by(supervisor)
    finally:
        caller.terminate()  # a cancel: the command is stopped
        assert caller.wait(timeout=BOUND) == 130
        os.close(read_end)
        ready.close()
    assert wait_gone(supervisor)


def test_an_api_command_gets_no_descriptor_of_the_caller_above_the_soft_limit(
    tmp_path: Path,
) -> None:
    code = (
        "import os, resource, tether\n"
        "fd = os.open(os.devnull, os.O_RDONLY)\n"
        "os.dup2(fd, 3000, inheritable=True)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(7)[1]))\n"
        "out = tether.run(['ls', '/proc/self/fd'], capture_output=True, record=False).stdout\n"
        "print(sorted(int(n) for n in out.split()))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    listed = [int(word) for word in done.stdout.strip("[]\n").split(",")]
    assert max(listed) < 10  # the three streams, and the listing's own


def test_closing_is_complete_above_the_soft_limit() -> None:
    code = (
        "import os, resource\n"
        "from tether.linux.descriptors import close_all_but, open_descriptors\n"
        "fd = os.open(os.devnull, os.O_RDONLY)\n"
        "os.dup2(fd, 3000)\n"
        "os.dup2(fd, 500)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(7)[1]))\n"
        "assert 3000 in open_descriptors(), open_descriptors()\n"
        "close_all_but([500])\n"
        "print(open_descriptors())\n"
    )
    done = _python(code)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[500]\n", "")


def test_open_descriptors_lists_what_is_open() -> None:
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        assert fd in open_descriptors()
        assert all(number >= 3 for number in open_descriptors())
    finally:
        os.close(fd)
    assert fd not in open_descriptors()
    assert callable(close_all_but)

"""The command's ``exec``, searched along ``PATH`` as ``os.execvpe`` searches (``spawn``).

The supervisor works out the candidates in the parent, as ``Popen`` does, so
that the child imports nothing between its fork and its exec
(``os.get_exec_path`` imports ``warnings``). The search must stay
``os.execvpe``'s: the same candidates in the same order (checked against
``os.get_exec_path`` for any ``PATH``), the first executable one run, and a
candidate found but refused reported over one that is not there.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from conftest import BOUND, hooked_env
from tether.supervisor.spawn import exec_candidates

_WORDS = st.text(st.characters(blacklist_characters="\0", codec="utf-8"), max_size=12)


@given(path=st.none() | st.lists(_WORDS, max_size=5).map(os.pathsep.join), name=_WORDS)
def test_the_candidates_are_os_execvpes(path: str | None, name: str) -> None:
    env = {} if path is None else {"PATH": path}
    if os.path.dirname(name):
        expected: tuple[str, ...] = (name,)
    else:
        expected = tuple(os.path.join(directory, name) for directory in os.get_exec_path(env))
    assert exec_candidates(name, env) == expected


def _program(directory: Path, *, executable: bool, says: str) -> None:
    directory.mkdir()
    program = directory / "prog"
    program.write_text(f"#!/bin/sh\necho {says}\n")
    program.chmod(stat.S_IRWXU if executable else stat.S_IRUSR | stat.S_IWUSR)


_SPAWN_PROG = """
import os, sys
from tether.supervisor.spawn import SpawnFailed, spawn
reading, writing = os.pipe()
try:
    pid = spawn(["prog"], env={"PATH": sys.argv[1]}, cwd=None, umask=None,
                stdio=(None, writing, None), prepare=lambda _born_in_cgroup: None)
except SpawnFailed as failed:
    print(f"failed {failed.stage} {failed.errno}")
    raise SystemExit(0)
os.close(writing)
with os.fdopen(reading, "rb") as said:
    print(said.read().decode().strip())
raise SystemExit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def _in_a_fresh_interpreter(program: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``program`` as the launcher runs tether (``python -P -c``; the test's own process
    may have a second thread, and a child forked from it runs Python); what it printed."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", program, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _spawn_prog(path: str) -> str:
    """Start ``prog`` along ``path``; what it printed, or ``failed STAGE ERRNO``."""
    return _in_a_fresh_interpreter(_SPAWN_PROG, path)


def test_a_refused_candidate_is_passed_over_for_an_executable_one(tmp_path: Path) -> None:
    _program(tmp_path / "first", executable=False, says="first")
    _program(tmp_path / "second", executable=True, says="second")
    path = os.pathsep.join(str(tmp_path / name) for name in ("missing", "first", "second"))
    assert _spawn_prog(path) == "second"


def test_a_refusal_is_reported_over_an_absence(tmp_path: Path) -> None:
    # No execute bit at all: refused to root too (execve needs one for anyone).
    _program(tmp_path / "first", executable=False, says="first")
    path = os.pathsep.join(str(tmp_path / name) for name in ("first", "missing"))
    assert _spawn_prog(path) == f"failed exec {errno.EACCES}"


def test_a_directory_is_a_refusal_too(tmp_path: Path) -> None:
    (tmp_path / "first" / "prog").mkdir(parents=True)
    path = os.pathsep.join(str(tmp_path / name) for name in ("first", "missing"))
    assert _spawn_prog(path) == f"failed exec {errno.EACCES}"


def test_nothing_found_is_not_found(tmp_path: Path) -> None:
    assert _spawn_prog(str(tmp_path / "missing")) == f"failed exec {errno.ENOENT}"


def test_the_child_imports_nothing_on_its_way_to_the_exec(tmp_path: Path) -> None:
    """In an interpreter started as the launcher starts it (``-P -c``: no ``runpy``, which
    loads ``warnings`` itself), the child's modules at its exec are its parent's at the fork."""
    snapshots = tmp_path / "modules"
    program = """
import os, sys
from tether.supervisor.spawn import spawn
before = set(sys.modules)
pid = spawn(["true"], env=None, cwd=None, umask=None, stdio=(None, None, None),
            prepare=lambda _born_in_cgroup: None)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
print(" ".join(sorted(before)))
"""
    env = hooked_env(tmp_path, "exec_modules", TETHER_TEST_EXEC_MODULES=str(snapshots))
    before = set(_in_a_fresh_interpreter(program, env=env).split())
    (line,) = snapshots.read_text().splitlines()
    at_exec = set(line.split()[1:])
    assert "warnings" not in before  # or the test could not see it imported
    assert sorted(at_exec - before) == []

"""The record's directory under hostile conditions: no home, a refused call, a umask.

An API call refused for its arguments makes no directory; without an absolute home there
is no default directory (and nothing in the working directory); a umask without the
owner's read still makes a private directory its owner can use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    tether_argv,
)

running_as_root = os.geteuid() == 0
SETPRIV = shutil.which("setpriv")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every door started here: its home and state inside ``tmp_path``."""
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


# -- a refused API call leaves nothing behind ------------------------------------------


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"stdout": 9999}, ValueError),
        ({"stdin": "no such file"}, ValueError),  # a path, and none there
        ({"stdin": b"bytes"}, TypeError),
        ({"stderr": -4}, ValueError),  # -1 to -3 are PIPE, STDOUT and DEVNULL
        ({"env": {"A": 1}}, TypeError),
        ({"env": {1: "a"}}, TypeError),
        ({"cwd": 5}, TypeError),
    ],
)
@pytest.mark.parametrize("where", ["given", "default"])
def test_an_api_call_refused_for_a_bad_argument_makes_no_record_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bad: dict[str, object],
    error: type[Exception],
    where: str,
) -> None:
    """``tether.launch`` checks every argument before it starts anything, but the record's
    directory was made (0700, parents and all) before the streams, ``env`` and ``cwd``
    were looked at: a call refused for them left it behind."""
    import tether

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    record = str(tmp_path / "new" / "deeper" / "r.json") if where == "given" else None
    with pytest.raises(error):
        tether.launch(["true"], record=record, **bad)  # type: ignore[arg-type]
    assert sorted(tmp_path.iterdir()) == []


# -- no home directory --------------------------------------------------------------


@pytest.mark.parametrize("home", ["", "relative/home", "~"])
def test_without_an_absolute_home_there_is_no_default_record_directory(
    monkeypatch: pytest.MonkeyPatch, home: str
) -> None:
    """``HOME=`` put the default records in ``/.local/state`` (root's ``/``), a relative
    ``HOME`` in the working directory: there is no default directory then, and it is said."""
    from tether.shared.paths import default_records_dir
    from tether.shared.record_file import RecordError

    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", home)
    with pytest.raises(RecordError, match="no default directory for records"):
        default_records_dir()


@pytest.mark.skipif(
    not running_as_root or SETPRIV is None,
    reason="needs root and setpriv, to run as a uid the password database does not know",
)
@pytest.mark.parametrize(
    "door",
    [("run", "--", "true"), ("ls",)],
    ids=["run", "ls"],
)
def test_a_user_without_a_home_gets_no_records_in_the_working_directory(
    tmp_path: Path, door: tuple[str, ...]
) -> None:
    """A uid with no password entry and no ``HOME`` (a container run as ``--user 4242``):
    ``~`` stayed ``~``, and the records went to ``./~/.local/state/tether/runs`` in whatever
    directory the job ran in (a checkout, say). The run now goes ahead without a record,
    saying so in one line; ``tether ls`` has nothing to list and says why."""
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    os.chown(workdir, 4242, 4242)
    environment = {
        name: value for name, value in os.environ.items() if name not in ("HOME", "XDG_STATE_HOME")
    }
    result = subprocess.run(
        [
            str(SETPRIV),
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            # Only to reach this interpreter wherever it is installed (a home directory).
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            *tether_argv(*door),
        ],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert result.returncode == (125 if door == ("ls",) else 0), result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 1, result.stderr
    if door[0] != "timeout":  # tether timeout may keep no record by default: nothing to say
        assert "no default directory for records" in result.stderr
    assert list(workdir.iterdir()) == []


# -- a umask that takes the owner's own permissions ---------------------------------


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary directory another user can reach (pytest's own are root's, 0700)."""
    directory = Path(tempfile.mkdtemp(prefix="tether-record-directory-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.skipif(not running_as_root, reason="needs root, to become a user root is not")
@pytest.mark.parametrize("umask", [0o777, 0o477])
def test_a_umask_without_the_owners_read_still_makes_a_private_record_directory(
    shared_tmp: Path, umask: int
) -> None:
    """Under ``umask 0777`` (any umask without the owner's read), ``mkdir(0700)`` made a
    directory its own maker could not open: the run was refused and a mode-000 directory
    was left behind. (Root opens it anyway, so the test runs as another user, in a fork.)"""
    from tether.shared.record_file import RecordError, hold_record_directory

    home = shared_tmp / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    record = home / "state" / "tether" / "runs" / "r.json"
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        answer = "ok"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.umask(umask)
            os.close(hold_record_directory(record))
        except RecordError as error:
            answer = str(error)
        except BaseException as error:
            answer = f"{type(error).__name__}: {error}"
        os.write(write_end, answer.encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as report:
        answer = report.read().decode()
    os.waitpid(child, 0)
    assert answer == "ok"
    modes = {path: path.stat().st_mode & 0o777 for path in sorted(home.rglob("*"))}
    assert set(modes.values()) == {0o700}, modes

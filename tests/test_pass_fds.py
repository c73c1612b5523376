"""The API's ``pass_fds``: descriptors at their numbers in the command, and no other.

Issue 22: ``subprocess``'s ``close_fds=True`` with ``pass_fds``. Each case is
a real caller (``fixtures/api_pass_fds.py``, a process of its own so numbers
as low as 3 are free) through the zygote and through a spawned supervisor:
the command (``fixtures/fd_report.py``) writes through each passed pipe, the
caller reads it and then end of file while the command still runs (nobody
else kept a copy), the command holds exactly 0-2 and the passed numbers (an
inheritable descriptor not passed stays behind), each number being the
caller's own descriptor (same inode). Numbers 3, 4 and 5 clash with the
supervisor's own descriptors in a zygote-forked supervisor.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tether
from conftest import BOUND, FIXTURES


@pytest.fixture(params=["zygote", "spawned"])
def path_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    env["TETHER_ZYGOTE"] = "1" if request.param == "zygote" else "0"
    return env


def _said_by(args: list[str], env: dict[str, str]) -> Any:
    """What the Python program ``python ARGS`` printed as JSON; it must succeed."""
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=BOUND * 3, env=env,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("numbers", [(3, 4, 5, 900), (10, 11, 12, 13), (7,)])
def test_passed_pipes_reach_the_command_at_their_numbers_and_end(
    path_env: dict[str, str], numbers: tuple[int, ...]
) -> None:
    said = _said_by([str(FIXTURES / "api_pass_fds.py"), *map(str, numbers)], path_env)
    assert said["zygote"] is (path_env["TETHER_ZYGOTE"] == "1")
    assert said["exit_status"] == 0
    for number in numbers:
        report = said["said"][str(number)]
        assert report["fds"] == [0, 1, 2, *numbers]  # not the hidden one, nothing of tether's
        assert report["ino"] == said["inodes"][str(number)]
    assert said["hidden"] not in said["said"][str(numbers[0])]["fds"]


def _writes(fd: int, data: bytes) -> list[str]:
    """A command that writes ``data`` to descriptor ``fd`` (a shell stops at 9)."""
    return [sys.executable, "-c", f"import os; os.write({fd}, {data!r})"]


def _closed_descriptor() -> int:
    fd = os.open(os.devnull, os.O_RDONLY)
    os.close(fd)
    return fd


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"pass_fds": (-1,)}, ValueError),
        ({"pass_fds": (1,)}, ValueError),
        ({"pass_fds": ("3",)}, TypeError),
        ({"pass_fds": (True,)}, TypeError),
        ({"pass_fds": 3}, TypeError),
        ({"pass_fds": "3"}, TypeError),
        ({"close_fds": False}, ValueError),
    ],
)
def test_bad_values_are_refused_naming_the_option(
    options: dict[str, object], error: type[Exception], tmp_path: Path
) -> None:
    name = next(iter(options))
    with pytest.raises(error, match=f"^{name}: "):
        tether.launch(["true"], record=tmp_path / "r.json", **options)  # type: ignore[arg-type]
    assert not (tmp_path / "r.json").exists()


def test_a_closed_descriptor_is_an_oserror_as_subprocess_raises(tmp_path: Path) -> None:
    fd = _closed_descriptor()
    with pytest.raises(tether.LaunchError, match=f"^pass_fds: {fd} is not an open") as caught:
        tether.run(["true"], pass_fds=[fd], record=tmp_path / "r.json")
    assert isinstance(caught.value, OSError)
    assert caught.value.errno == 9  # EBADF, as subprocess's OSError
    assert not (tmp_path / "r.json").exists()


def test_another_runs_lifeline_is_never_handed_on(tmp_path: Path) -> None:
    from tether.caller import lifeline as lifelines
    from tether.caller import zygote

    running = tether.launch([sys.executable, "-c", "input()"], stdin=tether.PIPE, record=False)
    try:
        lifeline = running._lifeline._fd
        assert lifeline is not None
        assert lifelines.tethers_own(lifeline)
        with pytest.raises(ValueError, match=f"^pass_fds: {lifeline} is tether's own"):
            tether.run(["true"], pass_fds=(lifeline,), record=False)
        socket = zygote.socket_descriptor()
        assert socket == -1 or lifelines.tethers_own(socket)
    finally:
        running.kill()
        running.wait()


def test_close_fds_true_is_taken_and_run_passes_too(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        outcome = tether.run(
            _writes(write_end, b"through\n"),
            pass_fds=[write_end],
            close_fds=True,
            record=False,
        )
        os.close(write_end)
        write_end = -1
        assert outcome.exit_status == 0
        assert os.read(read_end, 100) == b"through\n"
        assert os.read(read_end, 100) == b""
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_run_async_passes_descriptors() -> None:
    import asyncio

    read_end, write_end = os.pipe()
    try:
        outcome = asyncio.run(
            tether.run_async(_writes(write_end, b"async\n"), pass_fds=(write_end,), record=False)
        )
        assert outcome.exit_status == 0
        assert os.read(read_end, 100) == b"async\n"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_tether_ray_refuses_pass_fds() -> None:
    import tether.ray

    with pytest.raises(ValueError, match=r"^pass_fds: not taken by tether\.ray"):
        tether.ray.run(["true"], pass_fds=(3,))


_ABOVE_THE_LIMIT = """
import json, os, resource, subprocess, sys
import tether

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
read, write = os.pipe()
os.dup2(write, 3000)
os.close(write)
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
probe = [
    sys.executable,
    "-c",
    "import os, resource; os.write(3000, b'through'); "
    "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])",
]
ran = subprocess.run(probe, pass_fds=(3000,), capture_output=True, text=True)
said = {"subprocess": ran.stdout}
said["subprocess_wrote"] = os.read(read, 100).decode()
outcome = tether.run(probe, pass_fds=(3000,), capture_output=True, record=False)
said["tether"] = outcome.stdout.decode()
said["tether_wrote"] = os.read(read, 100).decode()
print(json.dumps(said))
"""


def test_a_passed_descriptor_above_the_soft_limit_reaches_the_command_as_from_subprocess(
    path_env: dict[str, str],
) -> None:
    """Descriptor 3000 under a soft ``RLIMIT_NOFILE`` of 1024: at its number, the limit kept."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 4096:
        pytest.skip("the hard open-file limit is below 4096 here")
    said = _said_by(["-c", _ABOVE_THE_LIMIT], path_env)
    assert said == {
        "subprocess": "1024\n",
        "subprocess_wrote": "through",
        "tether": "1024\n",
        "tether_wrote": "through",
    }

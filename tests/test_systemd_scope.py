"""The user's own systemd scope, against a stand-in manager on a private bus.

This machine has no systemd user manager (and everything runs as root on a
hybrid host), so the scope path never runs on a real kernel here. What runs
is real but for the manager and the kernel: a private ``dbus-daemon``, a
stand-in ``org.freedesktop.systemd1`` on it (``fixtures/stand_in_systemd.py``,
which records what it is asked and makes a directory laid out like cgroupfs
as the scope), tether's own exchange over jeepney, and tether's file-level
logic on that directory. End to end, ``fixtures/user_systemd`` (a test hook)
makes ``tether run`` and the API see a non-root user's session scope on
cgroup v2 with that directory as the hierarchy.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from conftest import BOUND, FIXTURES, hooked_env, read_json, tether_argv, validate_record
from tether.linux import run_cgroups, systemd_scope
from tether.linux.cgroup import CgroupUnavailable
from tether.linux.systemd_scope import run_cgroup_in_scope, start_scope, user_bus_address

# Skipped without dbus-daemon, except under CI=true (.ci/run installs it), where that fails.
pytestmark = pytest.mark.skipif(
    shutil.which("dbus-daemon") is None and os.environ.get("CI") != "true",
    reason="needs dbus-daemon (apt-get install dbus-daemon)",
)

APP_SLICE = "user.slice/user-1000.slice/user@1000.service/app.slice"

_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def _first_line(process: subprocess.Popen[str]) -> str:
    """The first line ``process`` prints, waited for at most :data:`BOUND` seconds."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], BOUND)
    assert ready, "no answer in time"
    return process.stdout.readline().strip()


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=BOUND)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=BOUND)


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[str]:
    """A private session bus of its own (``dbus-daemon``); its address."""
    directory = tmp_path / "bus"
    directory.mkdir()
    config = directory / "bus.conf"
    config.write_text(_CONFIG.format(socket=directory / "socket"))
    daemon = subprocess.Popen(
        ["dbus-daemon", f"--config-file={config}", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield _first_line(daemon)
    finally:
        _stop(daemon)


class Manager:
    """The stand-in manager's side of a test: where its scopes go and what it was asked."""

    def __init__(self, root: Path, log: Path) -> None:
        self.root = root
        self.log = log

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def scope(self, unit: str) -> Path:
        return self.root / APP_SLICE / unit


StartManager = Callable[..., Manager]


@pytest.fixture
def manager(bus: str, tmp_path: Path) -> Iterator[StartManager]:
    """Start the stand-in manager on ``bus``: ``manager(controllers, result="done")``."""
    started: list[subprocess.Popen[str]] = []

    def start(controllers: str = "cpu memory pids", result: str = "done") -> Manager:
        root = tmp_path / "cgroupfs"
        root.mkdir(exist_ok=True)
        log = tmp_path / "manager.jsonl"
        arguments = (controllers, str(log), result)
        process = subprocess.Popen(
            [sys.executable, str(FIXTURES / "stand_in_systemd.py"), bus, str(root), *arguments],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        assert _first_line(process) == "ready"
        return Manager(root, log)

    yield start
    for process in started:
        _stop(process)


# -- the exchange -------------------------------------------------------------------------


def test_the_scope_is_asked_for_as_systemd_run_asks(bus: str, manager: StartManager) -> None:
    """``systemd-run --user --scope -p Delegate=yes``: Description, Delegate, PIDs; mode fail."""
    stand_in = manager()
    start_scope(bus, "tether-123-0123abcd.scope", 4321, description="tether run tether-123")
    (call,) = stand_in.calls()
    assert call["signature"] == "ssa(sv)a(sa(sv))"
    assert call["unit"] == "tether-123-0123abcd.scope"
    assert call["mode"] == "fail"
    assert call["properties"] == [
        ["Description", ["s", "tether run tether-123"]],
        ["Delegate", ["b", True]],
        ["PIDs", ["au", [4321]]],
    ]
    assert call["auxiliary"] == []
    assert stand_in.scope("tether-123-0123abcd.scope").is_dir()


def test_a_job_that_fails_is_a_refusal(bus: str, manager: StartManager) -> None:
    manager(result="failed")
    with pytest.raises(CgroupUnavailable, match=r"could not start tether-1-.*'failed'"):
        start_scope(bus, "tether-1-00000000.scope", 4321, description="d")


def test_a_job_that_never_ends_is_a_refusal_in_bounded_time(
    bus: str, manager: StartManager
) -> None:
    manager(result="never")
    with pytest.raises(CgroupUnavailable, match=r"did not start tether-1-00000000.scope within"):
        start_scope(bus, "tether-1-00000000.scope", 4321, description="d", timeout=0.5)


def test_a_bus_without_a_manager_is_a_refusal(bus: str) -> None:
    with pytest.raises(CgroupUnavailable, match=r"refused the scope: .*ServiceUnknown"):
        start_scope(bus, "tether-1-00000000.scope", 4321, description="d", timeout=BOUND)


def test_a_scope_that_cannot_be_had_is_refused_with_what_would_work(bus: str) -> None:
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroup_in_scope("tether-1-00000000", ("pids",), {}, {"pids_max": "pids"}, address=bus)
    message = str(refused.value)
    assert "ServiceUnknown" in message
    assert message.endswith("systemd-run --user --scope -p Delegate=yes tether ...")


def test_an_unreachable_bus_is_a_refusal(tmp_path: Path) -> None:
    address = f"unix:path={tmp_path / 'nothing'}"
    with pytest.raises(CgroupUnavailable, match=r"cannot reach the user's service manager"):
        start_scope(address, "tether-1-00000000.scope", 4321, description="d")


def test_the_user_bus_is_found_where_a_session_puts_it(bus: str, tmp_path: Path) -> None:
    socket = bus.removeprefix("unix:path=").split(",")[0]
    stale = f"unix:path={tmp_path / 'gone'}"
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    assert user_bus_address({"DBUS_SESSION_BUS_ADDRESS": bus}) == bus
    assert user_bus_address({"DBUS_SESSION_BUS_ADDRESS": stale}) is None
    assert user_bus_address({"XDG_RUNTIME_DIR": str(runtime)}) is None
    (runtime / "bus").symlink_to(socket)
    found = user_bus_address({"DBUS_SESSION_BUS_ADDRESS": stale, "XDG_RUNTIME_DIR": str(runtime)})
    assert found == f"unix:path={runtime / 'bus'}"
    assert user_bus_address({}) is None


# -- inside the scope: the file-level logic ---------------------------------------------------

_KERNEL_FILES = (
    "cgroup.procs",
    "cgroup.kill",
    "cgroup.controllers",
    "cgroup.subtree_control",
    "memory.max",
    "memory.oom.group",
    "cpu.max",
    "pids.max",
)


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The stand-in's cgroupfs behaves like the kernel's: a new cgroup comes with its files,
    and this process is in whichever cgroup ``cgroup.procs`` lists it in."""
    root = tmp_path / "cgroupfs"
    root.mkdir(exist_ok=True)
    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        real_mkdir(path, mode)
        if str(path).startswith(str(root)):
            for name in _KERNEL_FILES:
                Path(path, name).write_text("")

    def own_cgroup() -> tuple[str, str]:
        for listed in root.rglob("cgroup.procs"):
            if str(os.getpid()) in listed.read_text().split():
                return str(listed.parent)[len(str(root)) :], str(listed.parent)
        raise CgroupUnavailable("not in the stand-in's hierarchy")

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(systemd_scope, "own_cgroup", own_cgroup)
    return root


def test_the_supervisor_moves_into_the_scope_and_makes_the_run_cgroup_below_it(
    bus: str, manager: StartManager, kernel: Path
) -> None:
    stand_in = manager("cpu memory pids")
    name = "tether-99-89abcdef"
    run = run_cgroup_in_scope(
        name,
        ("memory", "pids"),
        {"memory.max": "67108864", "memory.oom.group": "1", "pids.max": "50"},
        {"memory_max": "memory", "pids_max": "pids"},
        address=bus,
    )
    try:
        (call,) = stand_in.calls()
        assert call["properties"][2] == ["PIDs", ["au", [os.getpid()]]]
        scope = stand_in.scope(f"{name}.scope")
        assert (scope / "supervisor" / "cgroup.procs").read_text() == "0"  # the move
        assert (scope / "cgroup.subtree_control").read_text() == "+memory +pids"
        assert run.directory == str(scope / name)
        assert run.path == f"/{APP_SLICE}/{name}.scope/{name}"
        assert (scope / name / "memory.max").read_text() == "67108864"
        assert (scope / name / "pids.max").read_text() == "50"
    finally:
        run.close_join()


def test_every_limit_not_delegated_is_refused_before_anything_moves(
    bus: str, manager: StartManager, kernel: Path
) -> None:
    stand_in = manager("memory")
    name = "tether-99-01234567"
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroup_in_scope(
            name,
            ("cpu", "memory", "pids"),
            {"memory.max": "67108864", "cpu.max": "50000 100000", "pids.max": "50"},
            {"memory_max": "memory", "cpu_max": "cpu", "pids_max": "pids"},
            address=bus,
        )
    message = str(refused.value)
    assert "\n" not in message
    assert "no cpu or pids controller" in message
    assert "cpu_max, pids_max cannot be enforced" in message
    assert "memory_max" not in message
    scope = stand_in.scope(f"{name}.scope")
    assert sorted(path.name for path in scope.iterdir()) == [
        "cgroup.controllers",
        "cgroup.procs",
        "cgroup.subtree_control",
    ]
    assert (scope / "cgroup.subtree_control").read_text() == ""


def test_the_callers_fallback_reaches_a_run_cgroup_only_in_its_own_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that lost its supervisor may kill the run's cgroup in the scope made for it:
    the user's manager leaves it the user's, the system's manager root's (any user runs this:
    the directories are this user's, and the caller is told it is that user, or another)."""
    from tether.linux import cgroup

    root = tmp_path / "cgroupfs"
    slice_ = root / APP_SLICE
    name = "tether-5-0123abcd"
    ours = slice_ / f"{name}.scope" / name
    ours.mkdir(parents=True)
    other = slice_ / "tether-5-89abcdef.scope" / name  # a scope named for another run
    other.mkdir(parents=True)
    strangers = slice_ / f"{name}.scope-not-ours" / name
    strangers.mkdir(parents=True)
    owner = ours.parent.stat().st_uid  # Delegate=yes: the scope is its user's
    monkeypatch.setattr(cgroup, "_cgroup2_mounts", lambda: [("/", str(root))])
    monkeypatch.setattr(os, "geteuid", lambda: owner)
    assert cgroup.is_run_cgroup(str(ours))
    assert not cgroup.is_run_cgroup(str(other))
    assert not cgroup.is_run_cgroup(str(strangers))
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # another user's scope
    assert not cgroup.is_run_cgroup(str(ours))
    monkeypatch.setattr(os, "geteuid", lambda: owner)
    monkeypatch.setattr(cgroup, "_cgroup2_mounts", lambda: [("/", str(tmp_path / "elsewhere"))])
    assert not cgroup.is_run_cgroup(str(ours))  # not in a cgroup2 mount


# -- choosing the backend -----------------------------------------------------------------


@pytest.fixture
def session_scope(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A non-root user's session scope on a pure cgroup v2 host: nothing can be enabled below."""
    root = tmp_path / "hierarchy"
    session = root / "user.slice" / "user-1000.slice" / "session-1.scope"
    session.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (session / "cgroup.controllers").write_text("cpu io memory pids\n")
    (session / "cgroup.subtree_control").write_text("")
    (session / "cgroup.type").write_text("domain\n")
    (session / "cgroup.procs").write_text("1234\n5678\n")  # the login's shell, and us
    path = "/user.slice/user-1000.slice/session-1.scope"
    monkeypatch.setattr(run_cgroups, "own_cgroup", lambda: (path, str(session)))
    monkeypatch.setattr(run_cgroups, "find_hierarchies", lambda **_: [])
    monkeypatch.setattr(run_cgroups, "_privileged", lambda: False)
    return root


@pytest.mark.usefixtures("session_scope")
def test_a_user_with_a_bus_gets_the_scope_for_every_controller(bus: str) -> None:
    environ = {"DBUS_SESSION_BUS_ADDRESS": bus}
    backends, _ = run_cgroups.plan_backends(("cpu", "memory", "pids"), environ=environ)
    assert backends == {"cpu": "systemd-scope", "memory": "systemd-scope", "pids": "systemd-scope"}


@pytest.mark.usefixtures("session_scope")
def test_a_user_without_a_bus_is_told_what_would_work(tmp_path: Path) -> None:
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroups.plan_backends(("memory",), environ={"XDG_RUNTIME_DIR": str(tmp_path)})
    message = str(refused.value)
    assert "no user bus" in message
    assert message.endswith("systemd-run --user --scope -p Delegate=yes tether ...")


@pytest.fixture
def no_system_manager(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither the system manager's private socket nor a system bus (a container)."""
    monkeypatch.setattr(systemd_scope, "SYSTEM_MANAGER_SOCKET", str(tmp_path / "no-private"))
    monkeypatch.setattr(systemd_scope, "SYSTEM_BUS_SOCKET", str(tmp_path / "no-system-bus"))


@pytest.mark.usefixtures("no_system_manager")
def test_root_is_never_sent_to_a_user_scope(
    session_scope: Path, bus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_cgroups, "_privileged", lambda: True)
    with pytest.raises(CgroupUnavailable, match=r"holds processes.*entry point") as refused:
        run_cgroups.plan_backends(("memory",), environ={"DBUS_SESSION_BUS_ADDRESS": bus})
    assert "as root" not in str(refused.value)  # root is never told to become root


def test_a_controller_the_v2_hierarchy_lacks_is_no_scope_s_either(
    session_scope: Path, bus: str
) -> None:
    (session_scope / "cgroup.controllers").write_text("memory pids\n")
    environ = {"DBUS_SESSION_BUS_ADDRESS": bus}
    with pytest.raises(CgroupUnavailable, match="holds processes"):
        run_cgroups.plan_backends(("cpu",), environ=environ)
    assert run_cgroups.plan_backends(("memory",), environ=environ)[0] == {"memory": "systemd-scope"}


@pytest.mark.usefixtures("session_scope", "no_system_manager")
def test_root_with_a_system_manager_gets_a_scope_of_the_system_s_for_every_controller(
    bus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Root in a login session, a service or a scope that holds the caller (vm-hosts.md §2):
    the caller's cgroup cannot be divided, so the system's manager is asked, not the user's."""
    monkeypatch.setattr(run_cgroups, "_privileged", lambda: True)
    environ = {"DBUS_SYSTEM_BUS_ADDRESS": bus, "DBUS_SESSION_BUS_ADDRESS": bus}
    backends, _ = run_cgroups.plan_backends(("cpu", "memory", "pids"), environ=environ)
    assert set(backends.values()) == {"systemd-system-scope"}


def test_root_reaches_the_system_manager_as_systemd_run_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bus: str
) -> None:
    """The manager's private socket first (no bus daemon between), then the system bus."""
    import socket

    private = tmp_path / "private"
    monkeypatch.setattr(systemd_scope, "SYSTEM_MANAGER_SOCKET", str(private))
    monkeypatch.setattr(systemd_scope, "SYSTEM_BUS_SOCKET", str(tmp_path / "system_bus_socket"))
    assert systemd_scope.system_manager_address({}) is None
    assert systemd_scope.system_manager_address({"DBUS_SYSTEM_BUS_ADDRESS": bus}) == (bus, False)
    listening = socket.socket(socket.AF_UNIX)
    try:
        listening.bind(str(private))
        found = systemd_scope.system_manager_address({"DBUS_SYSTEM_BUS_ADDRESS": bus})
        assert found == (f"unix:path={private}", True)
    finally:
        listening.close()


def test_the_system_manager_is_asked_for_root_s_scope_and_named_in_refusals(
    bus: str, manager: StartManager, kernel: Path, tmp_path: Path
) -> None:
    stand_in = manager("cpu memory pids")
    name = "tether-98-89abcdef"
    run = run_cgroup_in_scope(
        name, ("pids",), {"pids.max": "20"}, {"pids_max": "pids"}, address=bus, system=True
    )
    try:
        (call,) = stand_in.calls()
        assert call["properties"][1:] == [
            ["Delegate", ["b", True]],
            ["PIDs", ["au", [os.getpid()]]],
        ]
        scope = stand_in.scope(f"{name}.scope")
        assert (scope / "supervisor" / "cgroup.procs").read_text() == "0"
        assert (scope / "cgroup.subtree_control").read_text() == "+pids"
        assert (scope / name / "pids.max").read_text() == "20"
    finally:
        run.close_join()
    with pytest.raises(CgroupUnavailable) as refused:
        run_cgroup_in_scope(
            "tether-98-01234567",
            ("pids",),
            {},
            {"pids_max": "pids"},
            address=f"unix:path={tmp_path / 'nothing'}",
            system=True,
        )
    message = str(refused.value)
    assert "the system's service manager" in message
    assert "as root" not in message
    assert message.endswith("run without limits")


def test_root_speaks_to_the_system_manager_s_private_socket_peer_to_peer(
    tmp_path: Path, kernel: Path
) -> None:
    """``/run/systemd/private``: no bus daemon, so no ``Hello`` and no ``AddMatch`` (the
    stand-in answers them ``UnknownMethod``, as systemd does), and ``JobRemoved`` comes unasked."""
    private = tmp_path / "private"
    log = tmp_path / "manager.jsonl"
    arguments = (f"listen:{private}", str(kernel), "cpu memory pids", str(log))
    process = subprocess.Popen(
        [sys.executable, str(FIXTURES / "stand_in_systemd.py"), *arguments],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert _first_line(process) == "ready"
        name = "tether-97-0123abcd"
        run = run_cgroup_in_scope(
            name,
            ("memory",),
            {"memory.max": "67108864"},
            {"memory_max": "memory"},
            address=f"unix:path={private}",
            direct=True,
            system=True,
        )
        run.close_join()
        (call,) = Manager(kernel, log).calls()
        assert call["unit"] == f"{name}.scope"
        assert call["properties"][2] == ["PIDs", ["au", [os.getpid()]]]
        assert (Manager(kernel, log).scope(f"{name}.scope") / name / "memory.max").exists()
    finally:
        _stop(process)


@pytest.mark.usefixtures("session_scope")
def test_the_zygote_leaves_the_scope_to_its_supervisor(bus: str) -> None:
    """A process that is not the supervisor asks for no scope, and its containment runs nothing."""
    from tether.linux.cgroup import CgroupUnavailable
    from tether.supervisor.cgroup_choice import prepare_run_cgroups

    environ = {"DBUS_SESSION_BUS_ADDRESS": bus}
    containment = prepare_run_cgroups({"pids_max": 10}, environ=environ, supervisor=False)
    assert containment.deferred
    with pytest.raises(CgroupUnavailable, match="never made"):
        containment.take()


# -- end to end: tether run and the API, refused before anything starts ----------------------


def _user_env(home: Path, root: Path, **variables: str) -> dict[str, str]:
    env = hooked_env(home, "user_systemd", TETHER_TEST_USER_SYSTEMD=str(root), **variables)
    env.pop("TETHER_CONTAINMENT", None)
    env.pop("TETHER_ZYGOTE", None)
    return env


def test_tether_run_refuses_a_limit_not_delegated_in_one_line(
    bus: str, manager: StartManager, tmp_path: Path
) -> None:
    stand_in = manager("memory pids")
    marker = tmp_path / "started"
    env = _user_env(tmp_path / "home", stand_in.root, DBUS_SESSION_BUS_ADDRESS=bus)
    caller = subprocess.Popen(
        tether_argv("run", "--memory-max", "64M", "--cpus", "0.5", "--", "touch", str(marker)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _out, err = caller.communicate(timeout=BOUND * 2)
    assert caller.returncode == 125, err
    assert err.count("\n") == 1, err
    assert "delegates no cpu controller" in err
    assert "cpu_max cannot be enforced" in err
    assert not marker.exists()
    (call,) = stand_in.calls()
    ((_name, (_signature, pids)),) = [p for p in call["properties"] if p[0] == "PIDs"]
    assert pids != [caller.pid]  # the supervisor asked for itself, not for its caller
    assert str(call["unit"]).startswith("tether-")
    assert str(call["unit"]).endswith(".scope")
    assert [name for name, _value in call["properties"]] == ["Description", "Delegate", "PIDs"]
    assert call["properties"][1] == ["Delegate", ["b", True]]


_API_CALLER = """
import json
import os
import sys
import tether
try:
    tether.run(["touch", sys.argv[1]], memory_max="64M", cpu_max=0.5, record=False)
except tether.LaunchError as error:
    from tether.caller.zygote import zygote_pid
    print(json.dumps({"caller": os.getpid(), "zygote": zygote_pid()}), file=sys.stderr)
    print(error.exit_status, str(error).count(chr(10)), error)
else:
    print("started")
"""


def test_the_api_raises_launch_error_for_a_limit_not_delegated(
    bus: str, manager: StartManager, tmp_path: Path
) -> None:
    stand_in = manager("memory pids")
    marker = tmp_path / "started"
    env = _user_env(tmp_path / "home", stand_in.root, DBUS_SESSION_BUS_ADDRESS=bus)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_API_CALLER), str(marker)],
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND * 3,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    status, lines, message = result.stdout.split(" ", 2)
    assert (status, lines) == ("125", "0"), result.stdout
    assert "cpu_max cannot be enforced" in message
    assert not marker.exists()
    (call,) = stand_in.calls()
    ((_name, (_signature, pids)),) = [p for p in call["properties"] if p[0] == "PIDs"]
    # The supervisor asked for itself: not the caller, nor the zygote, which outlives the
    # run and serves the caller's next launch.
    seen = json.loads(result.stderr.strip().splitlines()[-1])
    assert pids == [int(str(call["unit"]).split("-")[1])]
    assert pids[0] != seen["caller"]
    assert seen["zygote"] is not None
    assert pids[0] != seen["zygote"]


def test_tether_run_without_a_bus_names_systemd_run(tmp_path: Path) -> None:
    root = tmp_path / "cgroupfs"
    root.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    marker = tmp_path / "started"
    env = _user_env(tmp_path / "home", root, XDG_RUNTIME_DIR=str(runtime))
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    result = subprocess.run(
        tether_argv("run", "--pids-max", "10", "--", "touch", str(marker)),
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND * 2,
        check=False,
    )
    assert result.returncode == 125, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "no user bus" in result.stderr
    assert "systemd-run --user --scope -p Delegate=yes tether" in result.stderr
    assert not marker.exists()


_CALLER_CHECK = """
import sys
import tether
from tether.caller.request import limits_refusal
print(limits_refusal({"memory_max": "64M"}), "jeepney" in sys.modules)
"""


def test_the_caller_checks_for_a_scope_without_loading_jeepney(bus: str, tmp_path: Path) -> None:
    root = tmp_path / "cgroupfs"
    root.mkdir()
    env = _user_env(tmp_path / "home", root, DBUS_SESSION_BUS_ADDRESS=bus)
    result = subprocess.run(
        [sys.executable, "-c", _CALLER_CHECK],
        capture_output=True,
        text=True,
        env=env,
        timeout=BOUND,
        check=True,
    )
    assert result.stdout.split() == ["None", "False"]


def test_the_record_schema_takes_systemd_scope(tmp_path: Path) -> None:
    """A record of a run whose limits a scope enforced validates; a made-up backend does not."""
    import jsonschema

    record = tmp_path / "r.json"
    tether.run(["true"], record=record)
    data: dict[str, Any] = read_json(record)
    data["limits"] = {"memory_max": 67108864, "memory_swap_max": None, "cpu_max": None}
    data["limits"]["pids_max"] = 50
    enforced_by: dict[str, str | None] = {
        "memory_max": "systemd-scope",
        "pids_max": "systemd-scope",
    }
    data["limits_enforced_by"] = {"memory_swap_max": None, "cpu_max": None, **enforced_by}
    validate_record(data)
    data["limits_enforced_by"] = {**data["limits_enforced_by"], "pids_max": "systemd"}
    with pytest.raises(jsonschema.ValidationError):
        validate_record(data)

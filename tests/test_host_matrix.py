"""scripts/host-matrix (the VM host matrix, docs/hosts.md) without booting anything: its
selection of contexts, the lane's skip, how it reads a guest's output and judges it, and the
black-box check's verdicts (tests/hosts/blackbox.py). The guests themselves run only under
`scripts/host-matrix`, as root with qemu and mmdebstrap."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "host-matrix"


def load(name: str, path: Path) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


hm = load("host_matrix", SCRIPT)
blackbox = load("host_blackbox", ROOT / "tests" / "hosts" / "blackbox.py")


def test_list_names_every_context_of_the_issue() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True
    ).stdout
    for ctx in (
        "trixie/root-service",
        "trixie/root-login",
        "trixie/root-delegate",
        "trixie/alice",
        "trixie/podman ",
        "trixie/podman-privileged",
        "bookworm/root-service",
        "bookworm/alice",
        "bookworm-hybrid/root-service",
        "bookworm-hybrid/alice",
    ):
        assert ctx in out


def test_selection_by_boot_context_or_both() -> None:
    assert [(b.name, [c for c, _ in b.contexts]) for b in hm.select("alice", None)] == [
        ("trixie", ["alice"]),
        ("bookworm", ["alice"]),
        ("bookworm-hybrid", ["alice"]),
    ]
    (b,) = hm.select("trixie/podman,trixie/root-login", None)
    assert [c for c, _ in b.contexts] == ["root-login", "podman"]
    assert [b.name for b in hm.select(None, "bookworm")] == ["bookworm", "bookworm-hybrid"]
    assert hm.select("nothing-like-it", None) == []


def test_without_qemu_the_lane_is_skipped_with_the_command_that_enables_it(
    tmp_path: Path,
) -> None:
    # A PATH with git and tar but neither qemu nor mmdebstrap.
    for tool in ("git", "tar", "mkfs.ext4"):
        for d in os.environ["PATH"].split(os.pathsep):
            if (Path(d) / tool).exists():
                (tmp_path / tool).symlink_to(Path(d) / tool)
                break
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--only", "trixie/alice"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path), "CI": "true"},
        check=False,
    )
    assert p.returncode == 0
    assert p.stdout.count("\n") == 1
    assert "skipped" in p.stdout
    assert "apt-get install qemu-system-x86 mmdebstrap" in p.stdout


def blackbox_line(context: str, verdict: str, **extra: Any) -> str:
    doc = {"context": context, "verdict": verdict, "checks": {}, "problems": [], **extra}
    return "TETHER-BLACKBOX " + json.dumps(doc)


def test_a_guest_log_is_read_context_by_context() -> None:
    (boot,) = hm.select("trixie/root-service,trixie/alice,trixie/podman", None)
    text = "\n".join(
        [
            "=== tether-matrix begin 1 uptime=30.5",
            "=== context root-service begin uptime=31",
            "\x1b[32m" + blackbox_line("root-service", "passed") + "\x1b[0m",
            "FAILED tests/test_cgroup.py::test_x - AssertionError",
            "1 failed, 10 passed, 2 skipped in 5.00s",
            "--- pytest rc=1 secs=6",
            "=== context root-service end rc=0 secs=20",
            "=== context alice begin uptime=52",
            blackbox_line("alice", "passed"),
            "11 passed in 4.00s",
            "=== context alice end rc=0 secs=10",
            "=== context podman begin uptime=62",
            blackbox_line("podman", "passed"),
            "=== context podman end rc=0 secs=3",
            "=== tether-matrix end rc=0 uptime=70",
        ]
    )
    service, alice, podman = hm.parse(boot, text, True)
    assert (service.verdict, service.pytest_ok, service.failed_tests, service.secs) == (
        "passed",
        False,
        ["tests/test_cgroup.py::test_x"],
        20,
    )
    assert not hm.ok(service)  # the black-box check passed, a test did not
    assert (alice.verdict, alice.pytest_ok) == ("passed", True)
    assert hm.ok(alice)
    # podman is expected to refuse: a context that enforced there is not a pass, nor is one
    # whose tests printed no summary.
    assert podman.pytest == "no pytest summary"
    assert not hm.ok(podman)


def test_a_context_that_printed_no_end_marker_has_no_result() -> None:
    (boot,) = hm.select("trixie/root-service", None)
    (r,) = hm.parse(boot, "=== context root-service begin uptime=31\n(the guest hung)\n", True)
    assert r.verdict == "no result"
    assert not hm.ok(r)


def refused_cli(lines: int = 1) -> dict[str, Any]:
    return {"outcome": "refused", "status": 125, "stderr_lines": lines, "stderr": "tether: no"}


def test_blackbox_judges_refusals_by_what_the_context_expects() -> None:
    api_refused = {"outcome": "refused", "message": "cannot", "one_line": True, "new_records": []}
    checks = {"api_memory": api_refused, "cli_pids": refused_cli(), "cli_cpus": refused_cli()}
    assert blackbox.judge(checks, "refuse") == []
    assert blackbox.judge(checks, "either") == []
    assert len(blackbox.judge(checks, "enforce")) == 3
    # A refusal of two lines, or one that left a record, is not the documented refusal.
    checks["cli_cpus"] = refused_cli(lines=2)
    checks["api_memory"] = {**api_refused, "new_records": ["/x.json"]}
    assert len(blackbox.judge(checks, "refuse")) == 2


def test_blackbox_judges_enforcement_by_containment() -> None:
    enforced: dict[str, Any] = {"outcome": "enforced", "containment": "cgroup"}
    checks: dict[str, dict[str, Any]] = {
        "api_memory": enforced,
        "cli_pids": enforced,
        "cli_cpus": enforced,
    }
    assert blackbox.judge(checks, "enforce") == []
    assert len(blackbox.judge(checks, "refuse")) == 3
    checks["cli_pids"] = {"outcome": "not-enforced", "status": 125, "stderr": "could not join"}
    (problem,) = blackbox.judge(checks, "enforce")
    assert "could not join" in problem


def _stand_in_qemu(directory: Path, script: str) -> None:
    """A ``qemu-system-x86_64`` on PATH that plays a guest: ``script`` runs in sh with the
    console and results files (qemu's two ``-serial file:`` ports) as $1 and $2."""
    qemu = directory / "qemu-system-x86_64"
    qemu.write_text(f'#!/bin/sh\nset -- $(printf "%s\\n" "$@" | sed -n "s/^file://p")\n{script}\n')
    qemu.chmod(0o755)


def _guest(tmp_path: Path) -> Any:
    logs = tmp_path / "logs"
    logs.mkdir()
    boot = hm.select("trixie/root-service", None)[0]
    return hm.Guest(boot, tmp_path / "d", tmp_path / "k", tmp_path / "i", tmp_path / "s", logs)


def test_a_guest_whose_kernel_panics_ends_its_boot_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    panics = 'echo "Kernel panic - not syncing: Fatal exception" > "$1"'
    _stand_in_qemu(tmp_path, f'echo "=== tether-matrix begin 1 uptime=3" > "$2"\n{panics}')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    _, secs, why = hm.boot_once(_guest(tmp_path), (60, 600), hm.TCG)
    assert why is not None
    assert "panicked" in why
    assert secs < 30


def test_a_guest_that_prints_nothing_for_too_long_is_taken_for_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_qemu(tmp_path, 'echo "=== tether-matrix begin 1 uptime=3" > "$2"\nexec sleep 60')
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(hm, "STALL_LIMIT", 3)
    _, secs, why = hm.boot_once(_guest(tmp_path), (60, 600), hm.TCG)
    assert why == "the guest printed nothing for 3 s"
    assert secs < 30

"""The command cannot tell how it was started: through the zygote, a spawned supervisor, or
``subprocess``.

A differential test, not a list: a caller (``fixtures/state_caller.py``)
starts its zygote, *then* changes its own state (gives up privileges, changes
its scheduling, ignores signals, ...), then runs ``fixtures/process_state.py``
three ways. That program writes down everything Linux shows of its own state
(every line of ``/proc/self/status``, every ``prctl`` getter, the namespaces,
the resource limits, ...), and the three snapshots are compared field by
field, whatever the fields are: an attribute a later kernel adds is compared
too, and shows up here as the first difference. Only what is each process's
own is left out, each for a reason given in :data:`_OWN`.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BOUND, FIXTURES, api_caller, tether_argv

#: Fields that are each process's own, by their flattened name, and why they may differ.
_OWN: dict[str, str] = {
    # Which process this is: its ids, as every new process has its own.
    "status.Pid": "the process's own id",
    "status.Tgid": "the process's own id",
    "status.NSpid": "the process's own id",
    "status.NStgid": "the process's own id",
    "status.PPid": "a tether command's parent is its supervisor, by design",
    # A tether command leads a process group of its own (one signal reaches its
    # whole group), in its supervisor's session (docs/architecture.md), where
    # subprocess's child shares its caller's group and session.
    "status.NSpgid": "the command leads a process group of its own, by design",
    "status.NSsid": "the supervisor's session, by design",
    # Counters of what the process did so far, not state it was given.
    "status.voluntary_ctxt_switches": "a counter",
    "status.nonvoluntary_ctxt_switches": "a counter",
    # The size of the descriptor table copied from the parent: how many
    # descriptors the *parent* ever had open (the supervisor has fewer than a
    # caller with sockets and pipes), not which ones the command holds (``fds``
    # compares that).
    "status.FDSize": "the parent's history of descriptors",
    # The kernel's parent-death signal is tether's backstop for a supervisor
    # SIGKILLed (docs/architecture.md, "Starting the command"); exec keeps it.
    "prctl.pdeathsig": "the backstop, by design",
}

#: Bits of ``SigIgn`` for signals 32 and 33, glibc's own (see :func:`_differences`).
_GLIBC_RESERVED = 1 << 31 | 1 << 32

#: Prefixes of fields that count what the process uses: memory, mostly its own loading.
_OWN_PREFIXES = ("status.Vm", "status.Rss", "status.HugetlbPages")

#: A cgroup tether made for the run, below the caller's own (tether.linux.cgroup).
_RUN_CGROUP = re.compile(r"(?P<parent>.*)/tether-\d+-[0-9a-f]{8}")


def _flat(tree: dict[str, object], prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _cgroups_as_the_callers(lines: list[str], callers: list[str]) -> list[str]:
    """``lines`` with each tether-made run cgroup right below the caller's read as the caller's.

    The run's cgroup is the command's own (the containment tether promises);
    anything else, in any hierarchy, must be the caller's.
    """
    theirs = {line.split(":", 2)[1]: line.split(":", 2)[2] for line in callers}
    read = []
    for line in lines:
        number, controllers, path = line.split(":", 2)
        made = _RUN_CGROUP.fullmatch(path)
        if made and (made["parent"] or "/") == theirs.get(controllers):
            path = theirs[controllers]
        read.append(f"{number}:{controllers}:{path}")
    return read


def _differences(
    command: dict[str, object], reference: dict[str, object], *, also_own: frozenset[str]
) -> dict[str, tuple[object, object]]:
    """Every field where ``command`` differs from ``reference``, but for what is its own."""
    ours, theirs = _flat(command), _flat(reference)
    if isinstance(ours.get("cgroup"), list) and isinstance(theirs.get("cgroup"), list):
        ours["cgroup"] = _cgroups_as_the_callers(ours["cgroup"], theirs["cgroup"])  # type: ignore[arg-type]
    # Signals queued for this user: shared with every process of the user, and racy.
    # What follows the slash is RLIMIT_SIGPENDING, compared.
    for flat in (ours, theirs):
        if isinstance(flat.get("status.SigQ"), str):
            flat["status.SigQ"] = str(flat["status.SigQ"]).partition("/")[2]
        # Signals 32 and 33 are glibc's own (NPTL's SIGCANCEL and SIGSETXID): its
        # sigaction refuses them to every program, and glibc installs its handlers
        # on them as it needs them (which exec then resets), so their disposition is
        # glibc's, not the caller's, and Python cannot hand them on. Seen: a caller
        # started ignoring both (a background job of a tool's shell) passes 33
        # ignored to subprocess's child, not through a supervisor on 3.12 and 3.13.
        if isinstance(flat.get("status.SigIgn"), str):
            mask = int(str(flat["status.SigIgn"]), 16) & ~_GLIBC_RESERVED
            flat["status.SigIgn"] = f"{mask:016x}"
    return {
        name: (ours.get(name), theirs.get(name))
        for name in sorted(ours.keys() | theirs.keys())
        if name not in _OWN
        and name not in also_own
        and not name.startswith(_OWN_PREFIXES)
        and ours.get(name) != theirs.get(name)
    }


def _snapshots(tmp_path: Path, changes: str) -> tuple[dict[str, dict[str, object]], int]:
    """Run the caller with ``changes``: the three snapshots, and how many zygotes it started."""
    done = api_caller([str(FIXTURES / "state_caller.py"), str(tmp_path), changes], tmp_path)
    snapshots = {
        way: json.loads((tmp_path / f"{way}.json").read_text(encoding="utf-8"))
        for way in ("zygote", "plain", "subprocess")
    }
    return snapshots, json.loads(done.stdout)["started"]


#: What the caller changes after its zygote started; whether the zygote can take it on.
_CHANGES = {
    "none": True,
    # What travels with each request: the zygote takes it on.
    "process": True,
    "signals": True,
    # What a fork cannot be handed: a fresh zygote, which inherits it.
    "privileges": False,
    "mdwe": False,
    "scheduling": False,
    # A chroot into a read-only bind mount of / (the same device and inode).
    "jail": False,
    "privileges,scheduling,signals,process": False,
    # A thread's own: its nice value, CPUs, timer slack, capabilities, seccomp.
    "thread:scheduling": False,
    "thread:privileges": False,
}


@pytest.mark.parametrize("changes", list(_CHANGES))
def test_a_command_sees_the_callers_state_as_subprocess_hands_it_on(
    changes: str, tmp_path: Path
) -> None:
    if "privileges" in changes and os.geteuid() != 0:
        pytest.skip("dropping CAP_SYS_ADMIN from the bounding set needs root")
    if "jail" in changes and os.geteuid() != 0:
        pytest.skip("a mount namespace, a bind mount and chroot need root")
    if "mdwe" in changes and ctypes.CDLL(None).prctl(66, 0, 0, 0, 0) < 0:  # PR_GET_MDWE
        pytest.skip("this kernel has no memory-deny-write-execute (Linux 6.3 on)")
    snapshots, started = _snapshots(tmp_path, changes)
    reference = snapshots["subprocess"]
    assert _differences(snapshots["zygote"], reference, also_own=frozenset()) == {}
    # Only there: the variable that turned the zygote off.
    plain_own = frozenset({"environ.TETHER_ZYGOTE"})
    assert _differences(snapshots["plain"], reference, also_own=plain_own) == {}
    # The zygote is kept for what it can take on, and started afresh for what it
    # cannot: once (the last launch, with nothing changed since, reuses it).
    assert started == (1 if _CHANGES[changes] else 2)


_RUN_CALLER = """
import signal, subprocess, sys
for number in (signal.SIGUSR2, signal.SIGQUIT, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(number, signal.SIG_IGN)
out, snapshot, tether = sys.argv[1], sys.argv[2], sys.argv[3:]
subprocess.run([*tether, "--", sys.executable, snapshot, out + "/run.json"], check=True)
subprocess.run([sys.executable, snapshot, out + "/subprocess.json"], check=True)
"""


def test_tether_run_hands_on_the_signals_it_was_started_with_ignored(tmp_path: Path) -> None:
    """``nohup``, ``trap '' INT``, a background job: the command inherits them, as from a shell."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path)}
    subprocess.run(
        [
            sys.executable,
            "-c",
            _RUN_CALLER,
            str(tmp_path),
            str(FIXTURES / "process_state.py"),
            *tether_argv("run", "--no-record"),
        ],
        timeout=BOUND * 2,
        env=env,
        check=True,
    )
    run, reference = (
        json.loads((tmp_path / f"{way}.json").read_text(encoding="utf-8"))
        for way in ("run", "subprocess")
    )
    ignored = int(run["status"]["SigIgn"], 16)
    for number in (signal.SIGUSR2, signal.SIGQUIT, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        assert ignored >> (number - 1) & 1, signal.Signals(number).name
    assert _differences(run, reference, also_own=frozenset()) == {}

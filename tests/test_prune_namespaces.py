"""``tether prune`` never removes a cgroup something still uses, whatever pid namespace made it.

A stale cgroup is one whose creator is gone; the name says the creator's pid,
but a pid is only a pid in its own namespace. A caller in a PID namespace
(``unshare --pid --fork --mount-proc``) has its zygote's spare waiting with the
next run's cgroup made ahead; root runs ``tether prune`` on the host, where the
namespace's pids mean nobody (or somebody else). The spare's cgroup must stay,
and the caller's next launch must still get it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import BOUND, api_env, skip_without_cgroup, tether_argv
from tether.linux.cgroup import own_cgroup

UNSHARE = shutil.which("unshare")

pytestmark = pytest.mark.skipif(
    UNSHARE is None or os.geteuid() != 0, reason="needs root and unshare (a PID namespace)"
)

#: The caller, in its namespace: its pids start above ``argv[1]`` (``ns_last_pid``), one
#: launch leaves a spare with its cgroup made ahead; then, told to, a second launch.
_CALLER = textwrap.dedent(
    """
    import os, sys
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(sys.argv[1])
    import time
    import tether
    from tether.caller import zygote
    from tether.linux.cgroup import own_cgroup
    tether.run(["true"], record=False)
    parent = own_cgroup()[1]
    end = time.monotonic() + 10
    while time.monotonic() < end:  # the spare's, made once it is forked (not the zygote's)
        spares = [
            name for name in os.listdir(parent)
            if name.startswith("tether-")
            and zygote.zygote_pid() < int(name.split("-")[1]) <= int(sys.argv[1]) + 200
        ]
        if spares:
            break
        time.sleep(0.01)
    print(" ".join(spares), flush=True)
    sys.stdin.readline()
    outcome = tether.run(["true"], record=False)
    print("second", outcome.reason.value, flush=True)
    """
)


def _unused_pids_from(start: int, count: int) -> int:
    """A pid at or above ``start`` followed by ``count`` pids no host process has now."""
    pid = start
    while any(os.path.exists(f"/proc/{pid + k}") for k in range(count)):
        pid += count
    return pid


def _run_cgroups(directory: str) -> set[str]:
    return {name for name in os.listdir(directory) if name.startswith("tether-")}


def test_prune_keeps_the_cgroup_of_a_spare_waiting_in_another_pid_namespace(
    tmp_path: Path,
) -> None:
    skip_without_cgroup()
    parent = own_cgroup()[1]
    before = _run_cgroups(parent)
    first = _unused_pids_from(20000, 200)
    env = {**api_env(tmp_path), "TETHER_CONTAINMENT": "cgroup"}
    assert UNSHARE is not None
    caller = subprocess.Popen(
        [UNSHARE, "--pid", "--fork", "--mount-proc", sys.executable, "-c", _CALLER, str(first)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert caller.stdout is not None
        assert caller.stdin is not None
        made = set(caller.stdout.readline().split())
        assert made, "no cgroup made ahead for the spare in the namespace"
        assert made <= _run_cgroups(parent) - before
        pruned = subprocess.run(
            tether_argv("prune"),
            env=api_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=BOUND,
            check=False,
        )
        assert pruned.returncode == 0, pruned.stderr
        assert made <= _run_cgroups(parent), f"prune removed a live spare's cgroup: {pruned.stderr}"
        caller.stdin.write("\n")
        caller.stdin.flush()
        out, err = caller.communicate(timeout=BOUND * 2)
        assert out.strip().endswith("second completed"), err
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait(BOUND)


#: The creator of a run's cgroup (a zygote, say) hands it to a child that will join it
#: later (the supervisor it forked), prints where it is, and exits; the child joins once told.
_CREATOR_GONE_BEFORE_THE_JOIN = textwrap.dedent(
    """
    import os, sys
    from tether.linux.cgroup import V2Cgroup
    cgroup = V2Cgroup.create()
    if os.fork() == 0:
        sys.stdin.readline()
        try:
            cgroup.join()
            print("joined", flush=True)
        except OSError as error:
            print(f"not joined: {error}", flush=True)
        os._exit(0)
    cgroup.close_join()
    print(cgroup.directory, flush=True)
    """
)


def test_a_cgroup_still_held_for_its_join_outlives_its_creator(tmp_path: Path) -> None:
    """The zygote that made a run's cgroup may be gone (abandoned, replaced) before the
    supervisor it forked has its command join: the stale sweep of any other run must not
    take the cgroup from under it (issue 35 item 12's lost launch)."""
    skip_without_cgroup()
    from tether.linux.cgroup import remove_stale

    creator = subprocess.Popen(
        [sys.executable, "-c", _CREATOR_GONE_BEFORE_THE_JOIN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=api_env(tmp_path),
    )
    assert creator.stdout is not None
    assert creator.stdin is not None
    directory = Path(creator.stdout.readline().strip())
    assert creator.wait(BOUND) == 0  # the creator is gone; its child holds the cgroup
    try:
        remove_stale(str(directory.parent))  # another run's sweep, now
        creator.stdin.write("\n")
        creator.stdin.flush()
        assert creator.stdout.readline() == "joined\n"
    finally:
        creator.stdin.close()
        end = time.monotonic() + BOUND
        while directory.exists() and time.monotonic() < end:
            with contextlib.suppress(OSError):
                directory.rmdir()
            time.sleep(0.01)

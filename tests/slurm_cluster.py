"""A real single-node Slurm (``munged``, ``slurmctld``, ``slurmd``) in a temporary directory.

A pytest fixture rather than a ``scripts/slurm-up``: the daemons are started by pid from the
test process, stopped by pid in a ``finally`` however the tests end, and the decision "skip
here, fail under ``CI=true``" lives in one place. Everything (munge key and socket, state and
spool directories, logs) is under one temporary directory; the ports listen on loopback only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from tether.linux.cgroup1 import parse_v1_mounts

#: Starting the three daemons takes a few seconds; the node must be idle within this.
START_BOUND = 60.0
#: Slurm's grace between its SIGTERM and its SIGKILL (``KillWait``), in seconds.
KILL_WAIT = 5
#: A partition whose jobs preempt (cancel) those of the default one when they need the node.
URGENT = "urgent"
#: A job's memory unless it asks (MiB): memory is a consumable resource (``CR_Core_Memory``,
#: so ``--mem`` is a limit ``task/cgroup`` enforces), and a job that does not ask must not take
#: the whole node, or the node would run one job at a time.
DEF_MEM_PER_CPU = 512
#: ``task/cgroup``'s settings: the job's memory limit as a cgroup v1 limit (``memory``
#: hierarchy), which is what this host has for memory.
CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
ConstrainRAMSpace=yes
"""
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "sinfo")


@dataclass(frozen=True)
class Slurm:
    """A running cluster: where its configuration is, and the environment its clients need."""

    directory: Path
    proctrack: str
    task: str
    env: dict[str, str]

    def job_state(self, job: str) -> str | None:
        """The job's final state (``COMPLETED``, ``CANCELLED``, ``TIMEOUT``, ``OUT_OF_MEMORY``...)
        from ``jobcomp/filetxt``'s line for it, ``None`` before it ended."""
        try:
            lines = (self.directory / "jobcomp.txt").read_text().splitlines()
        except FileNotFoundError:
            return None
        for line in lines:
            fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
            if fields.get("JobId") == job:
                return fields.get("JobState")
        return None

    def log(self, daemon: str) -> str:
        """The log of ``slurmctld`` or ``slurmd`` so far."""
        return (self.directory / f"{daemon}.log").read_text(errors="replace")

    def run(self, *argv: str) -> str:
        result = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if result.returncode != 0:
            raise AssertionError(f"{argv}: {result.returncode}: {result.stderr.strip()}")
        return result.stdout


def unavailable(proctrack: str, task: str) -> str | None:
    """Why Slurm cannot run here with ``proctrack`` and ``task``, ``None`` if it can be tried."""
    missing = [name for name in DAEMONS if shutil.which(name, path=_path()) is None]
    if missing:
        return f"Slurm is not installed (apt-get install slurm-wlm munge): no {', '.join(missing)}"
    if os.geteuid() != 0:
        return "the single-node Slurm of the tests runs as root (SlurmUser=root)"
    if "cgroup" in proctrack + task:
        return _no_v1_hierarchies()
    return None


def _no_v1_hierarchies() -> str | None:
    """Why :data:`CGROUP_CONF`'s ``cgroup/v1`` cannot run here: Slurm's ``proctrack/cgroup``
    needs the ``freezer`` v1 hierarchy, ``task/cgroup`` the ``memory`` one."""
    mounts = parse_v1_mounts(Path("/proc/self/mountinfo").read_text())
    mounted = set().union(*(controllers for controllers, _, _ in mounts))
    missing = sorted({"freezer", "memory"} - mounted)
    if missing:
        return f"Slurm's cgroup/v1 plugin needs the cgroup v1 hierarchies of {missing}: not mounted"
    return None


def _path() -> str:
    return os.environ.get("PATH", "") + ":/usr/sbin:/sbin"


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024 - 512
    raise AssertionError("no MemTotal in /proc/meminfo")


def _config(directory: Path, proctrack: str, task: str) -> str:
    hostname = os.uname().nodename
    return f"""\
ClusterName=tether
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
SlurmctldParameters=enable_configless
CommunicationParameters=NoInAddrAny
AuthType=auth/munge
AuthInfo=socket={directory}/munge/munge.socket
CredType=cred/munge
ProctrackType={proctrack}
TaskPlugin={task}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU={DEF_MEM_PER_CPU}
KillWait={KILL_WAIT}
MinJobAge=2
StateSaveLocation={directory}/state
SlurmdSpoolDir={directory}/spool
SlurmctldPidFile={directory}/slurmctld.pid
SlurmdPidFile={directory}/slurmd.pid
SlurmctldLogFile={directory}/slurmctld.log
SlurmdLogFile={directory}/slurmd.log
JobCompType=jobcomp/filetxt
JobCompLoc={directory}/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
NodeName={hostname} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={_memory_mb()} State=UNKNOWN
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=debug Nodes={hostname} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName={URGENT} Nodes={hostname} MaxTime=INFINITE State=UP PriorityTier=2
"""


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextlib.contextmanager
def cluster(proctrack: str, task: str = "task/none") -> Iterator[Slurm]:
    """Start munged, slurmctld and slurmd with ``proctrack`` and ``task`` (``TaskPlugin``; its
    ``cgroup.conf`` is :data:`CGROUP_CONF`); stop them by pid at the end."""
    directory = Path(tempfile.mkdtemp(prefix="tether-slurm-"))
    for sub in ("munge", "state", "spool"):
        (directory / sub).mkdir()
    os.chmod(directory / "munge", 0o700)
    key = directory / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    conf = directory / "slurm.conf"
    conf.write_text(_config(directory, proctrack, task))
    (directory / "cgroup.conf").write_text(CGROUP_CONF)
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": _path()}
    for name in list(env):
        if name.startswith(("SLURM_", "SBATCH_", "SRUN_")) and name != "SLURM_CONF":
            del env[name]
    started: list[subprocess.Popen[bytes]] = []
    cgroups_before = set(_slurm_cgroups())

    def start(*argv: str) -> None:
        with open(directory / f"{Path(argv[0]).name}.out", "wb") as out:
            started.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))

    try:
        munge = directory / "munge"
        start(
            "munged", "--foreground", "--force", f"--key-file={key}",
            f"--socket={munge}/munge.socket", f"--pid-file={munge}/munged.pid",
            f"--seed-file={munge}/munged.seed", f"--log-file={munge}/munged.log",
        )  # fmt: skip
        _wait_for((munge / "munge.socket").exists, "munged's socket", started)
        start("slurmctld", "-D", "-i", "-f", str(conf))
        start("slurmd", "-D", "-f", str(conf))
        slurm = Slurm(directory, proctrack, task, env)
        _wait_for(lambda: _idle(slurm), "the node idle in sinfo", started)
        yield slurm
    finally:
        for process in reversed(started):
            _stop(process)
        for made in set(_slurm_cgroups()) - cgroups_before:
            _remove_cgroup(made)
        shutil.rmtree(directory, ignore_errors=True)


def _slurm_cgroups() -> list[Path]:
    """The cgroup v1 directories Slurm's cgroup plugins make, ``slurm_<node>`` in each hierarchy.

    Slurm leaves them behind when its daemons stop: the cluster removes the ones it made.
    """
    return list(Path("/sys/fs/cgroup").glob(f"*/slurm_{os.uname().nodename}"))


def _remove_cgroup(top: Path) -> None:
    """``rmdir`` ``top`` and the cgroups below it, deepest first (a cgroup is removed empty)."""
    for directory, _, _ in sorted(os.walk(top), key=lambda entry: -entry[0].count("/")):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _idle(slurm: Slurm) -> bool:
    try:
        result = subprocess.run(
            ["sinfo", "-h", "-o", "%t"], env=slurm.env, capture_output=True, text=True,
            timeout=10, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:  # slurmctld not answering (yet): the bound decides
        return False
    return result.returncode == 0 and result.stdout.strip() == "idle"


def _wait_for(ready: Callable[[], bool], what: str, started: list[subprocess.Popen[bytes]]) -> None:
    end = time.monotonic() + START_BOUND
    while not ready():
        dead = [p.args for p in started if p.poll() is not None]
        if dead or time.monotonic() > end:
            cannot(f"Slurm did not start ({what}): {dead or 'timed out'}")
        time.sleep(0.2)


def cannot(reason: str) -> NoReturn:
    """Skip with ``reason``; under ``CI=true`` (where Slurm must run) fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def start_or_skip(
    proctrack: str, task: str = "task/none"
) -> contextlib.AbstractContextManager[Slurm]:
    """The cluster; a skip (a failure under ``CI=true``) where it is missing or cannot start."""
    reason = unavailable(proctrack, task)
    if reason is not None:
        cannot(reason)
    return cluster(proctrack, task)

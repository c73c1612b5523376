"""A child born in its cgroup (``clone3`` into cgroup v2), or forked and joined where it cannot be.

Each case runs in a fresh interpreter of its own: :func:`fork_into_cgroup`
refuses a process with a second thread, and a test run may have one; and a
refusal it learns is kept for the rest of the process. The child says where
the kernel put it (``/proc/self/cgroup``), which is the whole promise.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import BOUND, skip_without_cgroup

# Makes a run cgroup below this process's own, as a supervisor does, and removes it after.
_SETUP = """
import errno, os, sys, threading
from tether.linux import clone3
from tether.linux.clone3 import CloneUnavailable, fork_into_cgroup, clone_into_cgroup_likely
from tether.linux.cgroup import V2Cgroup, cgroup_of
cgroup = V2Cgroup.create()
"""


def run_case(body: str) -> list[str]:
    """Run ``body`` after :data:`_SETUP`; the lines it printed (it must exit 0, silently)."""
    code = _SETUP + "try:\n" + "".join(f"    {line}\n" for line in body.splitlines())
    code += "finally:\n    cgroup.discard()\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=BOUND, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    return done.stdout.splitlines()


@pytest.fixture(autouse=True)
def _needs_cgroup() -> None:
    skip_without_cgroup()


def test_the_child_is_born_in_the_cgroup_and_the_fork_hooks_run_as_for_os_fork() -> None:
    said = run_case(
        """
hooks = []
os.register_at_fork(
    before=lambda: hooks.append("before"),
    after_in_parent=lambda: hooks.append("parent"),
    after_in_child=lambda: hooks.append("child"),
)
print(clone_into_cgroup_likely())
reading, writing = os.pipe()
pid = fork_into_cgroup(cgroup.clone_descriptor)
if pid == 0:
    os.write(writing, f"{cgroup_of('self') == cgroup.path} {','.join(hooks)}".encode())
    os._exit(7)
os.close(writing)
print(os.read(reading, 4096).decode())
print(",".join(hooks), os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(cgroup_of("self") != cgroup.path)
"""
    )
    assert said == ["True", "True before,child", "before,parent 7", "True"]


def test_a_process_with_a_second_thread_forks_nothing_this_way() -> None:
    said = run_case(
        """
stop = threading.Event()
waiting = threading.Thread(target=stop.wait)
waiting.start()
try:
    fork_into_cgroup(cgroup.clone_descriptor)
except CloneUnavailable as refused:
    print("refused:", "thread" in str(refused))
stop.set()
waiting.join()
try:
    os.waitpid(-1, os.WNOHANG)
except ChildProcessError:
    print("no child")
print(clone_into_cgroup_likely())
"""
    )
    # Not the kernel's refusal: once the thread is gone, it may be used again.
    assert said == ["refused: True", "no child", "True"]


def test_a_refusal_leaves_the_interpreter_whole_and_only_the_kernels_is_kept() -> None:
    said = run_case(
        """
try:
    fork_into_cgroup(9999)  # no such descriptor
except OSError as error:
    print(errno.errorcode[error.errno])
import json  # the import lock was given back
pid = os.fork()  # and so was everything else os.fork takes
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print(clone_into_cgroup_likely())
binding = clone3._binding
binding.syscall = lambda *_arguments: -1
binding.get_errno = lambda: errno.ENOSYS
for _attempt in range(2):
    try:
        fork_into_cgroup(cgroup.clone_descriptor)
    except CloneUnavailable as refused:
        print("refused:", refused)
print(clone_into_cgroup_likely())
"""
    )
    assert said[0] == "EBADF"
    assert said[1] == "True"  # a bad descriptor says nothing about the kernel
    assert said[2].startswith("refused: ")
    assert said[3] == "refused: clone3 into a cgroup was refused here before"
    assert said[4] == "False"


@pytest.mark.parametrize("refused", [False, True])
def test_the_command_is_in_its_cgroup_born_or_joined(refused: bool) -> None:
    """``spawn`` forks into the cgroup; where that is refused, it forks and the child joins."""
    said = run_case(
        f"""
from tether.supervisor import spawn as spawning
if {refused}:
    def refuse(_fd):
        raise CloneUnavailable("no clone3 here")
    spawning.fork_into_cgroup = refuse
told, telling = os.pipe()
reading, writing = os.pipe()

def prepare(born_in_cgroup):
    os.write(telling, b"born" if born_in_cgroup else b"joined")
    if not born_in_cgroup:
        cgroup.join()

pid = spawning.spawn(
    ["cat", "/proc/self/cgroup"], env=None, cwd=None, umask=None,
    stdio=(None, writing, None), prepare=prepare, born_in=cgroup.clone_descriptor,
)
os.close(writing)
os.close(telling)
lines = os.read(reading, 65536).decode().splitlines()
print(os.read(told, 64).decode())
print(f"0::{{cgroup.path}}" in lines)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    )
    assert said == ["joined" if refused else "born", "True", "0"]


def test_no_warm_up_is_forked_for_a_command_born_in_its_only_cgroup() -> None:
    """The lock a join by writing waits for is never taken: nothing forks to ready it."""
    said = run_case(
        """
from tether.supervisor.cgroup_choice import prepare_run_cgroups
containment = prepare_run_cgroups(None)
print(containment.join_takes_lock())
try:
    print(os.waitpid(-1, os.WNOHANG))
except ChildProcessError:
    print("no child")
made = containment.take()
print(made is not None and made.v2 is not None and made.v2.clone_descriptor is not None)
containment.discard()
"""
    )
    assert said == ["False", "no child", "True"]

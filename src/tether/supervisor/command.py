"""Starting the command: its own process group, a parent-death backstop, a cgroup, a pidfd.

The child sets ``PR_SET_PDEATHSIG`` and checks its parent, joins its cgroup where
``TETHER_CONTAINMENT`` allows one, and a failure says where it happened (``exec``: 127/126;
``setup``: 125). The containment actually got is read back once the command runs (but for a
command the kernel forked into its v2 cgroup: ``clone3`` said so already). Why:
docs/containment.md ("The ladder", "The backstop").
"""

from __future__ import annotations

import errno as errno_codes
import os
import signal
import time

from tether.linux.cgroup import CgroupUnavailable
from tether.linux.prctl import parent_death_signal_setter
from tether.supervisor.cgroup_choice import prepare_run_cgroups
from tether.supervisor.identity import command_dispositions
from tether.supervisor.spawn import SpawnFailed, spawn

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Final, Literal

    from tether.linux.run_cgroups import RunCgroups
    from tether.supervisor.launch import LaunchPlan

    #: Told in the supervisor, before the fork, the cgroup's directories; what it gives back is
    #: told in the child, before its exec, the child's pid (work done before the fork is work
    #: the child does not do: every page it writes is a copy).
    Announce = Callable[[list[str]], Callable[[int], None]]

__all__ = ["Command", "CommandNotStarted", "start_command"]


class CommandNotStarted(Exception):
    """The command could not be started: ``stage`` ``exec`` (the program's) or ``setup``."""

    def __init__(self, errno: int | None, message: str, stage: Literal["exec", "setup"]) -> None:
        super().__init__(message)
        self.errno = errno
        self.message = message
        self.stage: Literal["exec", "setup"] = stage

    def __reduce__(self) -> tuple[object, ...]:
        return (CommandNotStarted, (self.errno, self.message, self.stage))


class Command:
    """A started command: its pid (also its group id), a pidfd on it, its cgroup (``None``: sweep
    only)."""

    __slots__ = ("cgroup", "own_group", "pgid", "pid", "pidfd")

    def __init__(
        self,
        *,
        pid: int,
        pgid: int,
        pidfd: int,
        cgroup: RunCgroups | None = None,
        own_group: bool = True,
    ) -> None:
        self.pid = pid
        #: Whether ``pgid`` is the command's own group (else its caller's: never signal it whole).
        self.own_group = own_group
        self.pgid = pgid
        self.pidfd = pidfd
        self.cgroup = cgroup


def _prepare_child(
    supervisor: int,
    cgroup: RunCgroups | None,
    *,
    required: bool,
    directory: int | None,
    announce: Callable[[int], None] | None,
    born_in_cgroup: bool = False,
    backstop: Callable[[], None],
) -> None:
    """In the child before exec: the backstop (``backstop``: PDEATHSIG, SIGKILL), then the
    announcement (best effort), the directory, the cgroup. (The signals, back to the caller's,
    are :func:`spawn`'s ``dispositions``.)"""
    backstop()
    pid = os.getpid()
    if os.getppid() != supervisor:
        os.kill(pid, signal.SIGKILL)
    if announce is not None:
        try:  # noqa: SIM105 - a suppress() would be one more object the child writes
            announce(pid)
        except BaseException:  # noqa: S110 - nothing here may stop the launch
            pass
    if directory is not None:
        os.fchdir(directory)
    if cgroup is not None:
        try:
            cgroup.join(born_in_v2=born_in_cgroup)
        except OSError:
            if required:
                raise


#: However early the deadline, a forked command gets this long to reach its exec: a
#: deadline that passed already (``timeout=0``) starts the command and then stops it, as
#: :mod:`subprocess` does, rather than fail its launch on a busy machine.
EXEC_AT_LEAST: Final = 5.0


def _exec_by(deadline_at: float | None) -> float | None:
    """When a command forked now must have reached its exec: the deadline, or
    :data:`EXEC_AT_LEAST` from now if that is later; ``None`` without a deadline."""
    if deadline_at is None:
        return None
    return max(deadline_at, time.monotonic() + EXEC_AT_LEAST)


def start_command(
    plan: LaunchPlan, *, announce: Announce | None = None, containment: RunCgroups | None = None
) -> Command:
    """Start the plan's command (:class:`~tether.supervisor.launch.LaunchPlan`), or
    :class:`CommandNotStarted`."""
    argv, join_group, cwd = plan.argv, plan.join_group, plan.cwd
    if containment is None:
        containment = prepare_run_cgroups(plan.limits, warm=False)
    if not argv[0]:
        for _number, fd in plan.pass_fds:
            os.close(fd)
        containment.discard()
        # "Not found", as execvp("") says in C (GNU timeout: 127). Python's own
        # PATH search would try each directory name itself as the program, and
        # report a directory that cannot be executed (126).
        not_found = errno_codes.ENOENT
        message = f"failed to run command '': {os.strerror(not_found)}"
        raise CommandNotStarted(not_found, message, "exec")
    supervisor = os.getpid()
    try:
        cgroup = containment.take()
    except CgroupUnavailable as refusal:
        raise CommandNotStarted(refusal.errno, str(refusal), "setup") from None
    required = bool(containment.required_by)
    path, directory = (cwd, None) if not isinstance(cwd, int) else (None, cwd)
    told = None if announce is None else announce([] if cgroup is None else cgroup.directories)
    backstop = parent_death_signal_setter(signal.SIGKILL)
    born: list[bool] = []

    def prepare(born_in_cgroup: bool) -> None:
        _prepare_child(
            supervisor,
            cgroup,
            required=required,
            directory=directory,
            announce=told,
            born_in_cgroup=born_in_cgroup,
            backstop=backstop,
        )

    try:
        pid = spawn(
            argv,
            env=plan.env,
            cwd=path,
            umask=plan.umask,
            stdio=(plan.stdin, plan.stdout, plan.stderr),
            prepare=prepare,
            process_group=0 if join_group is None else join_group,
            pass_fds=plan.pass_fds,
            born_in=None if cgroup is None or cgroup.v2 is None else cgroup.v2.clone_descriptor,
            until=_exec_by(plan.deadline_at),
            hangup=plan.lifeline,
            dispositions=command_dispositions(plan.ignored_signals),
            placed=born.append,
        )
    except OSError as error:  # the fork itself: EAGAIN under ulimit -u, ENOMEM
        _discard(cgroup)
        reason = error.strerror or str(error)
        raise CommandNotStarted(
            error.errno, f"cannot start {argv[0]!r}: {reason}", "setup"
        ) from None
    except SpawnFailed as failure:
        _discard(cgroup)
        why = containment.required_by
        raise _launch_failure(argv, path, failure, required=required, why=why) from None
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        _discard(cgroup)
        raise
    return Command(
        pid=pid,
        pgid=pid if join_group is None else join_group,
        own_group=join_group is None,
        pidfd=pidfd,
        cgroup=_joined(cgroup, pid, born=born == [True]),
    )


def _joined(cgroup: RunCgroups | None, pid: int, *, born: bool = False) -> RunCgroups | None:
    """``cgroup`` if it contains the command (a zombie's too, or others), else ``None``, removed.

    ``born``: the kernel forked the command into the cgroup's v2 directory (``clone3``), which
    :meth:`~tether.linux.run_cgroups.RunCgroups.holds` looks at: no need to read it back."""
    if cgroup is None:
        return None
    cgroup.release()
    if born or cgroup.holds(pid) or not cgroup.discard():
        return cgroup
    return None


def _discard(cgroup: RunCgroups | None) -> None:
    if cgroup is not None:
        cgroup.discard()


def _launch_failure(
    argv: Sequence[str], cwd: str | None, failure: SpawnFailed, *, required: bool, why: str
) -> CommandNotStarted:
    """A failed ``exec`` is the program's (127, 126); anything before it tether's (125), as GNU
    says."""
    reason = failure.message
    if failure.stage == "exec":
        from tether.core.gnu_quoting import gnu_quote, utf8_locale

        # Quoted as GNU timeout quotes it: '\\377' for a byte that is not UTF-8.
        name = gnu_quote(argv[0], utf8=utf8_locale(os.environ))
        return CommandNotStarted(failure.errno, f"failed to run command {name}: {reason}", "exec")
    if failure.stage == "chdir" and cwd is not None:
        return CommandNotStarted(
            failure.errno, f"cannot change to directory {cwd!r}: {reason}", "setup"
        )
    if failure.stage == "prepare" and required:
        # why: what required the cgroup (TETHER_CONTAINMENT=cgroup, or resource limits)
        return CommandNotStarted(
            failure.errno,
            f"{why}, but the command could not join its cgroup: {reason}"
            + ("" if failure.errno is None else f" (errno {failure.errno})"),
            "setup",
        )
    return CommandNotStarted(failure.errno, f"cannot start {argv[0]!r}: {reason}", "setup")

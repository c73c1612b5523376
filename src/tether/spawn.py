"""Starting the command: its own process group, a parent-death backstop, a pidfd.

The command leads a process group of its own (``process_group=0``), so one
signal reaches everything that stays in it, and a terminal's Ctrl-C aimed at
the caller does not reach the command behind tether's back.

In the child, between fork and exec, it asks for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``) and then checks that the parent is still the
supervisor: had the supervisor died in the instant before the ``prctl``, the
signal would never come, so the child kills itself instead (the coreutils 9.11
check, against the saved pid rather than against 1). This runs in
``preexec_fn``, which is unsafe in a threaded process and safe here because
the supervisor is single-threaded. It is only a backstop: it reaches the
command's leader, not its descendants, and only when the supervisor is
SIGKILLed; everything else is the supervisor's job.

A failure to start is reported with the errno and with *where* it failed:
``exec`` when the program cannot be executed (127 for not found, 126
otherwise, as ``timeout`` says) and ``setup`` when tether could not prepare
the launch (a missing working directory: 125).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import IO, Literal

from tether._linux.prctl import set_parent_death_signal
from tether.spec import RunSpec

__all__ = ["Command", "LaunchFailure", "start_command"]

_Stdio = int | IO[bytes] | None


@dataclass(frozen=True, slots=True)
class Command:
    """A started command: its pid (also its process group id) and a pidfd on it."""

    pid: int
    pgid: int
    pidfd: int
    popen: subprocess.Popen[bytes]


class LaunchFailure(Exception):
    """The command could not be started."""

    def __init__(self, errno: int | None, message: str, stage: Literal["exec", "setup"]) -> None:
        super().__init__(message)
        self.errno = errno
        self.message = message
        self.stage: Literal["exec", "setup"] = stage


def _backstop(supervisor: int) -> None:
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != supervisor:
        os.kill(os.getpid(), signal.SIGKILL)


def start_command(spec: RunSpec, *, stdin: _Stdio, stdout: _Stdio, stderr: _Stdio) -> Command:
    """Start ``spec.argv``; raise :class:`LaunchFailure` if it cannot be started."""
    supervisor = os.getpid()
    try:
        popen = subprocess.Popen(
            spec.argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=spec.cwd,
            env=spec.env,
            umask=-1 if spec.umask is None else spec.umask,
            process_group=0,
            close_fds=True,
            preexec_fn=lambda: _backstop(supervisor),  # noqa: PLW1509 - single-threaded
        )
    except OSError as error:
        raise _launch_failure(spec, error) from None
    except (ValueError, TypeError, subprocess.SubprocessError) as error:
        raise LaunchFailure(None, f"cannot start {spec.argv[0]!r}: {error}", "setup") from None
    try:
        pidfd = os.pidfd_open(popen.pid)
    except OSError:
        os.kill(popen.pid, signal.SIGKILL)
        popen.wait()
        raise
    return Command(pid=popen.pid, pgid=popen.pid, pidfd=pidfd, popen=popen)


def _launch_failure(spec: RunSpec, error: OSError) -> LaunchFailure:
    reason = error.strerror or str(error)
    if spec.cwd is not None and error.filename == spec.cwd and spec.cwd != spec.argv[0]:
        return LaunchFailure(
            error.errno, f"cannot change to directory {spec.cwd!r}: {reason}", "setup"
        )
    return LaunchFailure(error.errno, f"failed to run command {spec.argv[0]!r}: {reason}", "exec")

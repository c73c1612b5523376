"""How ``tether run`` and ``tether timeout`` start a supervisor: by forking themselves.

They are single-threaded, so they fork, ``setsid`` and fork
(:mod:`tether.linux.double_fork`), and the grandchild becomes the supervisor from the
slate a spawned one would have: output flushed first, signal handlers reset, standard
streams on ``/dev/null``, no descriptor but the run's and the inherited ones, every branch
ending in ``os._exit``. Why: ``docs/architecture.md`` (Processes).
"""

from __future__ import annotations

import contextlib
import os
import sys

from tether.caller.descriptors import completed, open_run
from tether.caller.launch_errors import cannot_start
from tether.caller.lifeline import close_all, kept_by_the_next_fork
from tether.caller.start import handed_over_forked, send_spec, spawn_supervisor
from tether.core.reasons import TETHER_FAILED
from tether.linux.descriptors import above_stdio, close_all_but
from tether.linux.double_fork import detach_and_become

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final, NoReturn

    from tether.caller.descriptors import Stream
    from tether.caller.start import Spawn
    from tether.core.spec import RunSpec

__all__ = ["fork_supervisors", "start"]


def start(
    spec: RunSpec, *, stdin: Stream = None, stdout: Stream = None, stderr: Stream = None
) -> Spawn:
    """Start a detached supervisor for ``spec`` and hand it the spec, for the command line: a
    fork where :func:`fork_supervisors` allows it, else a fresh interpreter."""
    if _become_supervisor is not None:
        return _fork(spec, _become_supervisor, stdin=stdin, stdout=stdout, stderr=stderr)
    spawn = spawn_supervisor(spec, stdin=stdin, stdout=stdout, stderr=stderr)
    send_spec(spawn)
    spawn.intermediate.wait()
    return spawn


#: How a forked child becomes the supervisor of a (completed) spec; set by the CLI.
_become_supervisor: Callable[[RunSpec], NoReturn] | None = None
#: The descriptors the CLI inherited, which its forked supervisors keep for the command.
_handed_on: tuple[int, ...] = ()


def fork_supervisors(
    become: Callable[[RunSpec], NoReturn], *, hand_on: tuple[int, ...] = ()
) -> None:
    """Make :func:`start` fork this single-threaded program into the supervisor (``become``),
    never an API caller; ``hand_on``: inherited descriptors the command gets, at their numbers."""
    global _become_supervisor, _handed_on  # noqa: PLW0603 - set once by the program's entry
    _become_supervisor = become
    _handed_on = hand_on


def _fork(
    spec: RunSpec,
    become: Callable[[RunSpec], NoReturn],
    *,
    stdin: Stream,
    stdout: Stream,
    stderr: Stream,
) -> Spawn:
    """Fork, ``setsid``, fork: the grandchild becomes ``spec``'s supervisor; reap the child.
    Output is flushed first; every forked branch ends in ``os._exit``."""
    cwd, record_dir, opened = open_run(spec, stdin, stdout, stderr, spec_pipe=False)
    try:
        # Opened here, so that a caller out of descriptors hears it as a launch error.
        null = above_stdio(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))
        _check_headroom(null)
    except OSError as error:
        close_all(opened)
        raise cannot_start(error) from None
    *ours, lifeline_r, lifeline_w, status_r, status_w = opened
    complete, passed = completed(
        spec, cwd, ours=ours, record_dir=record_dir, lifeline_r=lifeline_r, status_w=status_w
    )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # The supervisor forked here keeps the status channel's writing end, which
    # every other child is made to close; this program has no other thread.
    kept_by_the_next_fork(status_w)
    try:
        child = os.fork()
    except OSError as error:
        close_all([*opened, null])
        raise cannot_start(error) from None
    if child == 0:
        _become_detached(
            passed, null, lambda: become(complete), new_session=complete.join_group is None
        )
    os.close(null)
    os.waitpid(child, 0)
    return handed_over_forked(complete, passed, lifeline_w=lifeline_w, status_r=status_r, pid=child)


#: Descriptors a forked supervisor opens to start its command, beyond the three
#: of the caller's it closes: its signal wakeup pipe, the command's error pipe,
#: a pidfd and the cgroup's ``cgroup.procs`` (its own check counts the rest).
_HEADROOM: Final = 5


def _check_headroom(null: int) -> None:
    """Raise ``EMFILE`` unless :data:`_HEADROOM` more descriptors can be opened now: refused
    here in one line, not as a ``launch_failed`` record of a run never possible."""
    probes: list[int] = []
    try:
        for _ in range(_HEADROOM):
            probes.append(os.dup(null))
    finally:
        close_all(probes)


def _become_detached(
    keep: tuple[int, ...], null: int, become: Callable[[], object], *, new_session: bool
) -> NoReturn:
    """In the forked child: detached (:mod:`tether.linux.double_fork`), then the slate a
    spawned supervisor has (no handler or wakeup fd of this program's, ``/dev/null`` stdio, only
    the run's and inherited descriptors), then ``become``."""

    def from_a_clean_slate() -> None:
        _reset_signals()
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        close_all_but((*keep, *_handed_on))
        become()

    detach_and_become(from_a_clean_slate, failed=TETHER_FAILED, new_session=new_session)


def _reset_signals() -> None:
    """The dispositions a fresh interpreter has: handled signals back to default, SIGPIPE and
    SIGXFSZ ignored (a supervisor killed by SIGPIPE would leave no record)."""
    import signal

    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for number in signal.valid_signals():
        with contextlib.suppress(ValueError, OSError, TypeError):
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(number, signal.SIG_IGN)

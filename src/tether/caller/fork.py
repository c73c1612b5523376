"""How tether's own command line starts a supervisor: by forking itself, not another interpreter.

``tether run`` and ``tether timeout`` are tether's own single-threaded
programs, so they may fork (a Python program using the API may have threads,
and is never forked: its supervisors come from its zygote or a fresh
interpreter, :mod:`tether.caller.start`). Fork, ``setsid``, fork (the last
two :mod:`tether.linux.double_fork`'s, as the zygote's): the grandchild
becomes the supervisor, with no second interpreter (which costs
tens of milliseconds and a second copy of everything already loaded), and the
caller reaps the middle child, which is gone within a millisecond. The
supervisor is then not a session leader, is nobody's child to reap, and
survives a kill of the caller's process group or session.

The forked supervisor starts from the slate a spawned one would have had:
buffered output flushed first (so nothing is written twice), the program's
signal handlers reset, its standard streams on ``/dev/null``, no descriptor
but the run's and those the program inherited (for the command), and every
forked branch ends in ``os._exit``, never in the program's cleanup.

On the path to ``tether run``'s launch: the standard library only, and no
``typing`` at run time.
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
    """Start a detached supervisor for ``spec`` and hand it the spec; for the command line.

    Forks this process when it is tether's own program (:func:`fork_supervisors`),
    and spawns a fresh interpreter otherwise. Returns once the intermediate
    has gone; read how the run goes from ``spawn.status``.
    """
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
    """Make :func:`start` fork this process into the supervisor instead of spawning one.

    Only for tether's own command-line program: it is single-threaded, so a
    forked child is safe, and its supervisor then needs no second interpreter
    (which costs tens of milliseconds and a second copy of everything already
    loaded). ``become`` runs in the forked supervisor, with the spec whose
    descriptors it holds, and never returns. A Python program using the API
    never calls this: it may have threads, and its supervisors are spawned.

    ``hand_on`` are the descriptors the program inherited: the forked
    supervisor keeps them (with their numbers) only to hand them to the
    command, as a shell and GNU ``timeout`` do, and closes them once it has.
    """
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

    The same double fork as :mod:`tether.supervisor.detach` does after a spawn,
    without the interpreter in between: the supervisor is not a session
    leader, is nobody's child to reap, and survives a kill of this process's
    group or session. Buffered output is flushed first, so nothing is written
    twice; every forked branch ends in ``os._exit``, never in this program's
    cleanup.
    """
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
    """Raise ``EMFILE`` unless :data:`_HEADROOM` more descriptors can be opened now.

    The forked supervisor shares this process's open-file limit: under a low
    ``ulimit -n`` it would start, fail to start the command, and leave a
    ``launch_failed`` record of a run that was never possible. Refused here,
    it is one line before anything started, as when the caller itself runs out.
    """
    probes: list[int] = []
    try:
        for _ in range(_HEADROOM):
            probes.append(os.dup(null))
    finally:
        close_all(probes)


def _become_detached(
    keep: tuple[int, ...], null: int, become: Callable[[], object], *, new_session: bool
) -> NoReturn:
    """In the forked child: detached (:mod:`tether.linux.double_fork`), a clean slate, ``become``.

    (Not a new session for a command that joins its caller's group to use its
    terminal: that needs the caller's session, and the child only leaves the
    caller's group.)

    The clean slate is what a freshly spawned supervisor would have: no
    handler of this program's (the supervisor installs its own), no wakeup
    descriptor, ``/dev/null`` as its own standard streams, and no descriptor
    but the run's and those the program inherited (for the command).
    """

    def from_a_clean_slate() -> None:
        _reset_signals()
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        close_all_but((*keep, *_handed_on))
        become()

    detach_and_become(from_a_clean_slate, failed=TETHER_FAILED, new_session=new_session)


def _reset_signals() -> None:
    """The signal dispositions a freshly started interpreter would have had.

    Every signal this program handles in Python goes back to its default
    action (an ``exec`` would have done that), and SIGPIPE and SIGXFSZ are
    ignored, as Python ignores them at start-up: this program may have set
    them otherwise (``tether timeout`` passes SIGPIPE on), and a supervisor
    that died of SIGPIPE writing to a caller that is gone would leave no
    record.
    """
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

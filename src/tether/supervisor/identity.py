"""What makes a process a tether supervisor to others: its name, and the signals it lets go by.

A command may itself use tether (``timeout -s ALRM 30 timeout 25 cmd``). The
nested supervisor is then adopted by the outer one, and is in the outer run's
tree. The outer run's gentle signals (its stop signal, a signal passed on)
are for the nested *caller* to act on, not for the nested supervisor, which
most of them would kill by their default action, nor for the nested command,
which is the nested run's to stop. So a supervisor takes a name the outer one
recognises (:data:`~tether.linux.prctl.SUPERVISOR_NAME`, which ``ps`` shows
too) and ignores every signal it has no use for. It does both first thing,
before its command exists: from the moment a command runs, whatever is sent
to its tree finds its supervisor ready. The command gets those signals back
at their default actions (:func:`restore_in_child`). And an outer supervisor
that walks its tree leaves out every nested run it finds by that name
(:func:`without_nested_runs`), but for the signals nothing may escape.
"""

from __future__ import annotations

import contextlib
import signal

from tether.linux.prctl import SUPERVISOR_NAME, set_process_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from tether.linux import proctree

__all__ = [
    "LET_GO_BY",
    "WHOLE_TREE_SIGNALS",
    "become_a_supervisor",
    "restore_in_child",
    "without_nested_runs",
]

#: Signals that would end a supervisor by their default action and that it has no use for.
LET_GO_BY: Final = tuple(
    number
    for name in (
        "SIGALRM",
        "SIGUSR1",
        "SIGUSR2",
        "SIGQUIT",
        "SIGVTALRM",
        "SIGPROF",
        "SIGPOLL",
        "SIGPWR",
        "SIGXCPU",
        "SIGSTKFLT",
        "SIGTRAP",
    )
    if (number := getattr(signal, name, None)) is not None
) + tuple(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))


def become_a_supervisor() -> None:
    """Take the supervisor's name and let :data:`LET_GO_BY` go by (best effort)."""
    with contextlib.suppress(OSError, AttributeError):
        set_process_name(SUPERVISOR_NAME)
    for number in LET_GO_BY:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_IGN)


def restore_in_child() -> None:
    """In the command, between fork and exec: :data:`LET_GO_BY` at their defaults again."""
    for number in LET_GO_BY:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)


#: Signals that reach nested runs too (see :func:`without_nested_runs`).
WHOLE_TREE_SIGNALS: Final = frozenset((signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT))


def without_nested_runs(
    snapshot: list[tuple[int, proctree.ProcStat]],
) -> list[tuple[int, proctree.ProcStat]]:
    """The walk less every nested run: a tether supervisor below this one, and its tree.

    ``snapshot`` is a walk of the tree, parents before children. A nested
    supervisor, adopted by this one, is in it, and so is its command; a
    gentle signal (the stop signal, one passed on) is for the nested
    *caller*, in this command's group, to act on as it chooses: pass it on,
    time out, cancel. Sent past it, straight to the nested command (or to
    its supervisor, which most signals would kill), it would decide for it.
    :data:`WHOLE_TREE_SIGNALS` still reach everything. A command that names
    itself like a supervisor only spares itself signals it could ignore
    anyway.
    """
    nested: set[int] = set()
    kept: list[tuple[int, proctree.ProcStat]] = []
    for pid, stat in snapshot:  # parents before children
        if stat.parent in nested or stat.name == SUPERVISOR_NAME:
            nested.add(pid)
        else:
            kept.append((pid, stat))
    return kept

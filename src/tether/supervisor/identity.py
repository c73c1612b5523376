"""What makes a process a tether supervisor to others: its name, and the signals it lets go by.

A nested run's supervisor is in the outer run's tree; the outer run's gentle signals are
for the nested caller, not for it. So a supervisor takes a name the outer one recognises
(:data:`~tether.linux.prctl.SUPERVISOR_NAME`) and ignores every signal it has no use for,
first thing; the command gets them back (:func:`restore_in_child`), and an outer walk
leaves nested runs out (:func:`without_nested_runs`) but for the signals nothing may
escape. Why: ``docs/containment.md``.
"""

from __future__ import annotations

import contextlib
import signal

from tether.linux.prctl import SUPERVISOR_NAME, set_process_name
from tether.supervisor.spawn import set_disposition

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

    from tether.linux import proctree

__all__ = [
    "LET_GO_BY",
    "WHOLE_TREE_SIGNALS",
    "become_a_supervisor",
    "command_dispositions",
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
    ignore = int(signal.SIG_IGN)
    for number in LET_GO_BY:  # numbers, and no suppress(): no objects made 43 times over
        try:  # noqa: SIM105
            set_disposition(number, ignore)
        except (OSError, ValueError):
            pass


def command_dispositions(ignored: Sequence[int] = ()) -> dict[int, int]:
    """What the command's signals must be set to between fork and exec (``SIG_DFL``, ``SIG_IGN``
    as numbers): :data:`LET_GO_BY` at their defaults again, ``ignored`` (the caller's) ignored."""
    dispositions = dict.fromkeys(LET_GO_BY, int(signal.SIG_DFL))
    dispositions.update(dict.fromkeys(ignored, int(signal.SIG_IGN)))
    return dispositions


#: Signals that reach nested runs too (see :func:`without_nested_runs`).
WHOLE_TREE_SIGNALS: Final = frozenset((signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT))


def without_nested_runs(
    snapshot: list[tuple[int, proctree.ProcStat]],
) -> list[tuple[int, proctree.ProcStat]]:
    """The walk (``snapshot``, parents first) less every nested run: a tether supervisor below
    this one, and its tree. A gentle signal is for the nested caller to act on;
    :data:`WHOLE_TREE_SIGNALS` still reach everything."""
    nested: set[int] = set()
    kept: list[tuple[int, proctree.ProcStat]] = []
    for pid, stat in snapshot:  # parents before children
        if stat.parent in nested or stat.name == SUPERVISOR_NAME:
            nested.add(pid)
        else:
            kept.append((pid, stat))
    return kept

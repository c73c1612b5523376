"""The double fork that detaches a supervisor from whoever forked it, written once.

For ``tether run`` (:mod:`tether.caller.fork`) and the zygote
(:mod:`tether.supervisor.zygote`), in the child they forked: leave the forker's session
(``setsid``; only its group for a command on the caller's terminal), fork once more and let
the intermediate exit (:func:`fork_again`), and become the supervisor in the grandchild.
Every branch ends in ``os._exit``. Why: ``docs/architecture.md`` (Processes).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

__all__ = ["detach_and_become", "fork_again"]


def detach_and_become(
    become: Callable[[], object],
    *,
    failed: int,
    new_session: bool = True,
    in_intermediate: Callable[[int], object] | None = None,
) -> NoReturn:
    """In a forked child: leave the session, fork again, ``become`` in the grandchild (exit
    ``failed`` if it returns); ``in_intermediate`` runs first, given the grandchild's pid."""
    try:
        _leave_the_session(new_session)
        fork_again(in_intermediate)
        become()
    except BaseException:  # noqa: S110 - nobody to tell; the caller sees a lost supervisor
        pass
    os._exit(failed)


def _leave_the_session(new_session: bool) -> None:
    if new_session:
        os.setsid()
    else:
        os.setpgid(0, 0)


def fork_again(in_intermediate: Callable[[int], object] | None = None) -> None:
    """Fork; the intermediate exits (after ``in_intermediate``), the grandchild returns."""
    child = os.fork()
    if child > 0:
        if in_intermediate is not None:
            in_intermediate(child)
        os._exit(0)

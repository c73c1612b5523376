"""The double fork that detaches a supervisor from whoever forked it, written once.

Two forkers use it: ``tether run`` and ``tether timeout``, which fork their
own supervisor (:mod:`tether.caller.fork`), and the API caller's zygote, which
forks one per request (:mod:`tether.supervisor.zygote`). A supervisor spawned
as a fresh interpreter in a session of its own (:mod:`tether.supervisor.detach`)
takes step 2 alone. Each has forked a
child already; in that child the same steps follow, in this order, as
python-daemon takes them (PEP 3143):

1. leave the forker's session (:func:`_leave_the_session`): ``setsid``, so
   that a kill of the forker's process group or session does not reach the
   supervisor; or, for a command that joins its caller's group to use its
   terminal, only leave the forker's group (``setpgid``), as that command
   needs the caller's session;
2. fork once more and let the intermediate exit (:func:`fork_again`): the
   grandchild is no session leader (it can never take a controlling terminal
   by opening one) and nobody's child to reap; the intermediate may do one
   last thing first, for a forker that has a use for it;
3. become the supervisor, in the grandchild.

Every branch ends in ``os._exit``, never in the forker's cleanup (its
``atexit`` handlers, its buffered output written twice): the intermediate
with 0, and the grandchild with the status it is given
(:data:`~tether.core.reasons.TETHER_FAILED`) if becoming the supervisor
returns or fails, which its caller then sees as a lost supervisor.

In :mod:`tether.linux`, with only ``os``, because both forkers load it before
their fork, where a millisecond counts: both have this package loaded already,
and a zygote loads nothing of :mod:`tether.shared` before its first fork.
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
    """In a forked child: leave the session, fork again, and ``become`` in the grandchild.

    ``in_intermediate`` runs in the intermediate before it exits, given the
    grandchild's pid (its child still: a pid nobody else can reap yet); the
    grandchild exits with ``failed`` if ``become`` returns or raises. Never
    returns.
    """
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

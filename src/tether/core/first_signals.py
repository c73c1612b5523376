"""What a watching run certainly sends its tree first: the one decision taken ahead of the core.

A run that is watching its command answers a request to stop (the caller
gone, a cancel, time out now) or an overdue deadline with the stop signal and
then SIGCONT, and a request to kill now with SIGKILL; whatever else the same
step decides (the reason, the grace, an escalation at once for a grace of
zero) comes after those signals. That much is certain before the machine is
fed, so an adapter that has the command's group at hand may send those
signals to it first and feed the core afterwards: the sentry does, while the
loop is still loading and no core exists, and the loop does, before it feeds
the core and walks ``/proc``. The core then decides what was already done,
and the adapter does not send the group the same signal twice.

This module holds the rule once, for the machine (:meth:`RunMachine.first_signals
<tether.core.machine.RunMachine.first_signals>`, which knows the phase) and for
the sentry, which cannot load the machine (``transitions``) before it acts.
``tests/test_machine_properties.py`` checks that what it promises is always
the start of what the machine then sends.

Pure and small: the sentry imports it before its thread starts.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from tether.core.effects import SignalName

__all__ = ["CALLER_LOST", "CANCEL", "KILL", "TICK", "TIME_OUT", "first_signals", "stop_signals"]

# The machine's triggers (tether.core.machine._TRIGGER) this rule knows about.
CALLER_LOST: Final = "caller_lost"
CANCEL: Final = "cancel"
KILL: Final = "kill"
TIME_OUT: Final = "time_out"
TICK: Final = "tick"

#: The requests a watching run answers by stopping the tree gently.
_STOPS: Final = frozenset((CALLER_LOST, CANCEL, TIME_OUT))


def stop_signals(stop_signal: SignalName) -> tuple[SignalName, ...]:
    """How a tree is stopped gently: the stop signal, then SIGCONT so a stopped process can act."""
    return (stop_signal, "SIGCONT")


def first_signals(
    trigger: str, *, overdue: bool, stop_signal: SignalName
) -> tuple[SignalName, ...]:
    """The signals a *watching* run sends first when ``trigger`` comes; ``()`` if none is certain.

    ``overdue``: the deadline has passed at the trigger's time, so the machine
    stops the tree for it before it hears the trigger. A kill asked for then
    still ends in SIGKILL at once, after the stop it already got.
    """
    if trigger == KILL:
        return (*stop_signals(stop_signal), "SIGKILL") if overdue else ("SIGKILL",)
    if overdue or trigger in _STOPS:
        return stop_signals(stop_signal)
    return ()

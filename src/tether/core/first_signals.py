"""What a watching run certainly sends its tree first: the one decision taken ahead of the core.

The sentry (before any core exists) and the loop (before it feeds the core) send these at once:
one rule for both (docs/architecture.md, "The adapter is thin"), checked against the machine
by ``tests/test_machine_properties.py``. Small: the sentry imports it before its thread starts.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

    from tether.core.effects import SignalName

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
    ``overdue``: the deadline passed first, so the stop comes before even a kill's SIGKILL."""
    if trigger == KILL:
        return (*stop_signals(stop_signal), "SIGKILL") if overdue else ("SIGKILL",)
    return stop_signals(stop_signal) if overdue or trigger in _STOPS else ()

"""What the core asks the adapter to do, as plain values; signal names are strings, since the
core must not import :mod:`signal` (docs/architecture.md, "The core is pure").
"""

from __future__ import annotations

from tether.core.values import DeclaredValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.core.reasons import Reason

#: A signal's name as :mod:`signal` spells it; the stop signal is SIGTERM unless a door
#: asks for another (``tether timeout -s``).
SignalName = str


class SignalTree(DeclaredValue):
    """Send ``signal`` to the command's whole tree: its process group and every descendant."""

    signal: SignalName


class Verdict(DeclaredValue, kw_only=True):
    """How the run ended, as far as the core can know it; times are the events' (monotonic).
    ``None``: the command never started or exited (``returncode``), was never stopped
    (``stop_started_at``), was not stopped for being idle (``idle_seconds``)."""

    reason: Reason
    exit_status: int
    returncode: int | None = None
    escalated_to_sigkill: bool = False
    stop_started_at: float | None = None
    finished_at: float
    unkillable: bool = False
    launch_errno: int | None = None
    launch_error: str | None = None
    idle_seconds: float | None = None

    @property
    def shutdown_seconds(self) -> float | None:
        """Seconds from the first stop signal until the tree was gone (``None``: never stopped)."""
        return None if self.stop_started_at is None else self.finished_at - self.stop_started_at


class WriteRecord(DeclaredValue):
    """Write the run's one record (the adapter adds what only it knows: pids, rusage...)."""

    verdict: Verdict


class Exit(DeclaredValue):
    """The run is over; the supervisor exits (or reports) with ``status``."""

    status: int


Effect = SignalTree | WriteRecord | Exit

"""What the core asks the adapter to do, as plain values.

The core decides; the adapter acts. Keeping the decisions as data means a test
can assert "SIGTERM, then SIGCONT, then nothing until the grace ran out, then
SIGKILL" by comparing lists, and the adapter stays a thin translation from an
effect to a system call.

Pure: dataclasses only. Signal names are strings because the core must not
import :mod:`signal`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.core.reasons import Reason

__all__ = ["Effect", "Exit", "SignalName", "SignalTree", "Verdict", "WriteRecord"]

#: A signal's name as the :mod:`signal` module spells it (``"SIGTERM"``). The
#: stop signal is SIGTERM unless a door asks for another (``tether timeout -s``).
SignalName = str


@dataclass(frozen=True, slots=True)
class SignalTree:
    """Send ``signal`` to the command's whole tree: its process group and every descendant."""

    signal: SignalName


@dataclass(frozen=True, slots=True)
class Verdict:
    """How the run ended, as far as the core can know it.

    Times are monotonic seconds from the events. ``returncode`` is ``None`` when
    the command never started or never exited (it could not be killed within
    the settle bound, which ``unkillable`` then says).
    """

    reason: Reason
    exit_status: int
    returncode: int | None
    escalated_to_sigkill: bool
    stop_started_at: float | None
    finished_at: float
    unkillable: bool = False
    launch_errno: int | None = None
    launch_error: str | None = None

    @property
    def shutdown_seconds(self) -> float | None:
        """Seconds from the first stop signal until the tree was gone (``None``: never stopped)."""
        if self.stop_started_at is None:
            return None
        return self.finished_at - self.stop_started_at


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """Write the run's one record (the adapter adds what only it knows: pids, rusage...)."""

    verdict: Verdict


@dataclass(frozen=True, slots=True)
class Exit:
    """The run is over; the supervisor exits (or reports) with ``status``."""

    status: int


Effect = SignalTree | WriteRecord | Exit

"""What the core asks the adapter to do, as plain values.

The core decides; the adapter acts. Keeping the decisions as data means a test
can assert "SIGTERM, then SIGCONT, then nothing until the grace ran out, then
SIGKILL" by comparing lists, and the adapter stays a thin translation from an
effect to a system call.

Pure: immutable values (:class:`~tether.core.values.FrozenValue`, not
dataclasses: see :mod:`tether.core.events`). Signal names are strings because
the core must not import :mod:`signal`.
"""

from __future__ import annotations

from tether.core.values import FrozenValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.core.reasons import Reason

__all__ = ["Effect", "Exit", "SignalName", "SignalTree", "Verdict", "WriteRecord"]

#: A signal's name as the :mod:`signal` module spells it (``"SIGTERM"``). The
#: stop signal is SIGTERM unless a door asks for another (``tether timeout -s``).
SignalName = str


class SignalTree(FrozenValue):
    """Send ``signal`` to the command's whole tree: its process group and every descendant."""

    __slots__ = ("signal",)
    signal: SignalName

    def __init__(self, signal: SignalName) -> None:
        object.__setattr__(self, "signal", signal)


class Verdict(FrozenValue):
    """How the run ended, as far as the core can know it.

    Times are monotonic seconds from the events. ``returncode`` is ``None`` when
    the command never started or never exited (it could not be killed within
    the settle bound, which ``unkillable`` then says). ``idle_seconds`` is how
    long the run had been idle when it was stopped for it (``idle_exceeded``),
    else ``None``.
    """

    __slots__ = (  # noqa: RUF023 - the fields in order
        "reason",
        "exit_status",
        "returncode",
        "escalated_to_sigkill",
        "stop_started_at",
        "finished_at",
        "unkillable",
        "launch_errno",
        "launch_error",
        "idle_seconds",
    )
    reason: Reason
    exit_status: int
    returncode: int | None
    escalated_to_sigkill: bool
    stop_started_at: float | None
    finished_at: float
    unkillable: bool
    launch_errno: int | None
    launch_error: str | None
    idle_seconds: float | None

    def __init__(
        self,
        *,
        reason: Reason,
        exit_status: int,
        returncode: int | None,
        escalated_to_sigkill: bool,
        stop_started_at: float | None,
        finished_at: float,
        unkillable: bool = False,
        launch_errno: int | None = None,
        launch_error: str | None = None,
        idle_seconds: float | None = None,
    ) -> None:
        values = (
            reason,
            exit_status,
            returncode,
            escalated_to_sigkill,
            stop_started_at,
            finished_at,
            unkillable,
            launch_errno,
            launch_error,
            idle_seconds,
        )
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    @property
    def shutdown_seconds(self) -> float | None:
        """Seconds from the first stop signal until the tree was gone (``None``: never stopped)."""
        if self.stop_started_at is None:
            return None
        return self.finished_at - self.stop_started_at


class WriteRecord(FrozenValue):
    """Write the run's one record (the adapter adds what only it knows: pids, rusage...)."""

    __slots__ = ("verdict",)
    verdict: Verdict

    def __init__(self, verdict: Verdict) -> None:
        object.__setattr__(self, "verdict", verdict)


class Exit(FrozenValue):
    """The run is over; the supervisor exits (or reports) with ``status``."""

    __slots__ = ("status",)
    status: int

    def __init__(self, status: int) -> None:
        object.__setattr__(self, "status", status)


Effect = SignalTree | WriteRecord | Exit

"""What can happen to a run, as plain values the core can reason about.

Every event carries ``now``, the monotonic time in seconds at which the adapter
saw it. Time enters the core only this way, so a unit test can replay a
five-hour run in microseconds with a fake clock, and the core never has to ask
what time it is (which would make it impure and its tests flaky).

Pure: immutable values (:class:`~tether.core.values.FrozenValue`), not
dataclasses: the supervisor builds them once the command runs, while its caller
waits, and ``dataclasses`` (with the ``inspect`` it loads) and a generated
``__init__`` per class cost milliseconds there.
"""

from __future__ import annotations

from tether.core.values import FrozenValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

__all__ = [
    "ActivitySeen",
    "CallerLost",
    "CancelRequested",
    "CommandExited",
    "Event",
    "KillRequested",
    "LaunchFailed",
    "Launched",
    "ResumeRequested",
    "SignalRequested",
    "SuspendRequested",
    "Tick",
    "TimeOutRequested",
    "TreeEmptied",
]


class Launched(FrozenValue):
    """The command is running as ``pid``, leader of its own process group."""

    __slots__ = ("now", "pid")
    now: float
    pid: int

    def __init__(self, now: float, pid: int) -> None:
        object.__setattr__(self, "now", now)
        object.__setattr__(self, "pid", pid)


class LaunchFailed(FrozenValue):
    """The command could not be started; ``errno`` is ``None`` when no OS error says why.

    ``stage`` tells *where* it failed: ``"exec"`` when the program itself could
    not be executed (not found, not executable: 127 or 126, as ``timeout``
    reports them), ``"setup"`` when tether failed before that (a missing
    working directory, no more processes: tether's own failure, 125).
    """

    __slots__ = ("now", "errno", "message", "stage")  # noqa: RUF023 - the fields in order
    now: float
    errno: int | None
    message: str
    stage: Literal["exec", "setup"]

    def __init__(
        self, now: float, errno: int | None, message: str, stage: Literal["exec", "setup"] = "exec"
    ) -> None:
        object.__setattr__(self, "now", now)
        object.__setattr__(self, "errno", errno)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "stage", stage)


class CallerLost(FrozenValue):
    """The lifeline reached end of file: whoever asked for the run is gone."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class CancelRequested(FrozenValue):
    """Somebody asked for a graceful stop (a signal, a ``c`` byte, ``cancel()``)."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class KillRequested(FrozenValue):
    """Somebody asked for an immediate stop (a ``k`` byte, ``kill()``, a second Ctrl-C)."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class TimeOutRequested(FrozenValue):
    """Time is up now, whatever the deadline said: ``timeout`` was sent SIGALRM, its own timer.

    Handled exactly as the deadline passing (the stop signal, 124), as GNU
    ``timeout`` handles a SIGALRM from outside.
    """

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class SignalRequested(FrozenValue):
    """Pass ``signal`` on to the command's tree, as GNU ``timeout`` passes on what it receives.

    Not a stop: the command decides what the signal means, and its own
    status stands. ``signal`` is a name (``SIGINT``).
    """

    __slots__ = ("now", "signal")
    now: float
    signal: str

    def __init__(self, now: float, signal: str) -> None:
        object.__setattr__(self, "now", now)
        object.__setattr__(self, "signal", signal)


class SuspendRequested(FrozenValue):
    """The caller was stopped (Ctrl-Z): stop the command's tree with it (SIGSTOP)."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class ResumeRequested(FrozenValue):
    """The caller was continued (``fg``, ``bg``): continue the command's tree (SIGCONT)."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class CommandExited(FrozenValue):
    """The command's leader process exited (it is not reaped yet).

    ``returncode`` is ``subprocess``-style: negative for death by a signal.
    ``others_alive`` says whether any other process the command started is
    still running, which decides between finishing now and stopping stragglers.
    """

    __slots__ = ("now", "returncode", "others_alive")  # noqa: RUF023 - the fields in order
    now: float
    returncode: int
    others_alive: bool

    def __init__(self, now: float, returncode: int, others_alive: bool) -> None:
        object.__setattr__(self, "now", now)
        object.__setattr__(self, "returncode", returncode)
        object.__setattr__(self, "others_alive", others_alive)


class TreeEmptied(FrozenValue):
    """After the leader exited, the last other process of the command's tree is gone too."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class ActivitySeen(FrozenValue):
    """The run did something at ``now``: output on its streams, or CPU time used by its tree.

    Only a run with an ``idle`` bound is told; the idle time counts again from ``now``.
    """

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


class Tick(FrozenValue):
    """Nothing happened but time passed: the adapter's ``poll()`` timed out."""

    __slots__ = ("now",)
    now: float

    def __init__(self, now: float) -> None:
        object.__setattr__(self, "now", now)


Event = (
    Launched
    | LaunchFailed
    | CallerLost
    | CancelRequested
    | KillRequested
    | CommandExited
    | TreeEmptied
    | Tick
    | TimeOutRequested
    | SignalRequested
    | SuspendRequested
    | ResumeRequested
    | ActivitySeen
)

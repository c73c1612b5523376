"""What can happen to a run, as plain values the core can reason about.

Every event carries ``now``, the monotonic time in seconds at which the adapter
saw it. Time enters the core only this way, so a unit test can replay a
five-hour run in microseconds with a fake clock, and the core never has to ask
what time it is (which would make it impure and its tests flaky).

Pure: dataclasses only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
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


@dataclass(frozen=True, slots=True)
class Launched:
    """The command is running as ``pid``, leader of its own process group."""

    now: float
    pid: int


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """The command could not be started; ``errno`` is ``None`` when no OS error says why.

    ``stage`` tells *where* it failed: ``"exec"`` when the program itself could
    not be executed (not found, not executable: 127 or 126, as ``timeout``
    reports them), ``"setup"`` when tether failed before that (a missing
    working directory, no more processes: tether's own failure, 125).
    """

    now: float
    errno: int | None
    message: str
    stage: Literal["exec", "setup"] = "exec"


@dataclass(frozen=True, slots=True)
class CallerLost:
    """The lifeline reached end of file: whoever asked for the run is gone."""

    now: float


@dataclass(frozen=True, slots=True)
class CancelRequested:
    """Somebody asked for a graceful stop (a signal, a ``c`` byte, ``cancel()``)."""

    now: float


@dataclass(frozen=True, slots=True)
class KillRequested:
    """Somebody asked for an immediate stop (a ``k`` byte, ``kill()``, a second Ctrl-C)."""

    now: float


@dataclass(frozen=True, slots=True)
class TimeOutRequested:
    """Time is up now, whatever the deadline said: ``timeout`` was sent SIGALRM, its own timer.

    Handled exactly as the deadline passing (the stop signal, 124), as GNU
    ``timeout`` handles a SIGALRM from outside.
    """

    now: float


@dataclass(frozen=True, slots=True)
class SignalRequested:
    """Pass ``signal`` on to the command's tree, as GNU ``timeout`` passes on what it receives.

    Not a stop: the command decides what the signal means, and its own
    status stands. ``signal`` is a name (``SIGINT``).
    """

    now: float
    signal: str


@dataclass(frozen=True, slots=True)
class SuspendRequested:
    """The caller was stopped (Ctrl-Z): stop the command's tree with it (SIGSTOP)."""

    now: float


@dataclass(frozen=True, slots=True)
class ResumeRequested:
    """The caller was continued (``fg``, ``bg``): continue the command's tree (SIGCONT)."""

    now: float


@dataclass(frozen=True, slots=True)
class CommandExited:
    """The command's leader process exited (it is not reaped yet).

    ``returncode`` is ``subprocess``-style: negative for death by a signal.
    ``others_alive`` says whether any other process the command started is
    still running, which decides between finishing now and stopping stragglers.
    """

    now: float
    returncode: int
    others_alive: bool


@dataclass(frozen=True, slots=True)
class TreeEmptied:
    """After the leader exited, the last other process of the command's tree is gone too."""

    now: float


@dataclass(frozen=True, slots=True)
class Tick:
    """Nothing happened but time passed: the adapter's ``select()`` timed out."""

    now: float


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
)

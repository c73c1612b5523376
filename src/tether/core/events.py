"""What can happen to a run, as plain values; each carries ``now``, the monotonic time the
adapter saw it, the only way time enters the core (docs/architecture.md, "The core is pure").
"""

from __future__ import annotations

from tether.core.values import DeclaredValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal


class Launched(DeclaredValue):
    """The command is running as ``pid``, leader of its own process group."""

    now: float
    pid: int


class LaunchFailed(DeclaredValue):
    """The command could not be started (``errno``: ``None`` when no OS error says why);
    ``stage``: ``"exec"`` for the program itself (127, 126), ``"setup"`` for tether (125)."""

    now: float
    errno: int | None
    message: str
    stage: Literal["exec", "setup"] = "exec"


class CallerLost(DeclaredValue):
    """The lifeline reached end of file: whoever asked for the run is gone."""

    now: float


class CancelRequested(DeclaredValue):
    """Somebody asked for a graceful stop (a signal, a ``c`` byte, ``cancel()``)."""

    now: float


class KillRequested(DeclaredValue):
    """Somebody asked for an immediate stop (a ``k`` byte, ``kill()``, a second Ctrl-C)."""

    now: float


class TimeOutRequested(DeclaredValue):
    """Time is up now, whatever the deadline said (``timeout`` was sent SIGALRM): a deadline."""

    now: float


class SignalRequested(DeclaredValue):
    """Pass ``signal`` (a name: ``SIGINT``) on to the command's tree, as GNU ``timeout`` does;
    not a stop: the command decides what the signal means, and its own status stands."""

    now: float
    signal: str


class SuspendRequested(DeclaredValue):
    """The caller was stopped (Ctrl-Z): stop the command's tree with it (SIGSTOP)."""

    now: float


class ResumeRequested(DeclaredValue):
    """The caller was continued (``fg``, ``bg``): continue the command's tree (SIGCONT)."""

    now: float


class CommandExited(DeclaredValue):
    """The command's leader exited (not reaped yet); ``returncode`` is ``subprocess``-style;
    ``others_alive``: another process of its tree still runs (stopped before the run ends)."""

    now: float
    returncode: int
    others_alive: bool


class TreeEmptied(DeclaredValue):
    """After the leader exited, the last other process of the command's tree is gone too."""

    now: float


class ActivitySeen(DeclaredValue):
    """The run did something (output, CPU time): its idle time counts again from ``now``."""

    now: float


class Tick(DeclaredValue):
    """Nothing happened but time passed: the adapter's ``poll()`` timed out."""

    now: float


#: Every event: what the adapter saw, and what was asked of the run.
_Seen = Launched | LaunchFailed | CallerLost | CommandExited | TreeEmptied | Tick | ActivitySeen
_Asked = CancelRequested | KillRequested | TimeOutRequested | SignalRequested
Event = _Seen | _Asked | SuspendRequested | ResumeRequested

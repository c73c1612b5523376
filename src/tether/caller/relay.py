"""Signals a command-line caller receives, relayed to its command's tree as GNU tools do.

Job control for both doors (:func:`relay_job_control`) and, for ``tether timeout``, every
signal GNU ``timeout`` passes on (:class:`TimeoutRelay`), each one byte on the lifeline
(docs/cli.md, "Terminals and job control"; docs/timeout.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType

from tether.shared.lifeline import RESUME, SUSPEND, TIME_OUT, pass_on_request

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Protocol

    class _Sender(Protocol):
        def send(self, byte: bytes) -> None: ...

    from tether.caller.lifeline import Lifeline

__all__ = [
    "JOB_STOP_SIGNALS",
    "LAUNCHER_VARIABLE",
    "PYTHON_IGNORES",
    "PendingRequests",
    "TimeoutRelay",
    "ignored_at_start",
    "launcher_mask",
    "relay_job_control",
]

#: Signals that stop a job in a terminal, and so the command's tree with the CLI.
JOB_STOP_SIGNALS: Final = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)

#: Signals the interpreter itself sets to "ignored" before any of tether runs:
#: what the program inherited for these cannot be seen (see docs/timeout.md).
PYTHON_IGNORES: Final = frozenset(
    number
    for number in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None))
    if number is not None
)

#: What GNU timeout passes on (coreutils' term-sig.h), less SIGALRM (its timer)
#: and the signals of a fault (SEGV, BUS, ILL, FPE, SYS): a Python handler
#: returns to the faulting instruction, which would fault for ever.
_PASSED_ON: Final = tuple(
    number
    for name in (
        "SIGINT",
        "SIGQUIT",
        "SIGHUP",
        "SIGTERM",
        "SIGPIPE",
        "SIGUSR1",
        "SIGUSR2",
        "SIGTRAP",
        "SIGABRT",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGPOLL",
        "SIGPWR",
        "SIGSTKFLT",
    )
    if (number := getattr(signal, name, None)) is not None
) + tuple(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))


#: Signals GNU timeout gives the command at their default whatever it inherited.
_NEVER_INHERITED: Final = frozenset(
    (signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU, signal.SIGKILL, signal.SIGSTOP)
)


#: The environment variable by which ``tether-timeout`` (a POSIX shell launcher)
#: says what this process inherited: ``PID:SIGIGN``, its pid and its ``SigIgn`` mask.
LAUNCHER_VARIABLE: Final = "TETHER_LAUNCHER"


def launcher_mask() -> int | None:
    """The ignored-signal mask ``tether-timeout`` read before Python started, taken from the
    environment."""
    import os

    value = os.environ.pop(LAUNCHER_VARIABLE, "")
    pid, _, mask = value.partition(":")
    if not (pid.isdigit() and int(pid) == os.getpid()):
        return None
    try:
        return int(mask, 16)
    except ValueError:
        return None


_inherited_mask: int | None = None


def ignored_at_start(number: int) -> bool:
    """Whether this program started with signal ``number`` ignored (Python's own: the launcher's
    word)."""
    if number in PYTHON_IGNORES:
        mask = _inherited_mask
        return mask is not None and bool(mask >> (number - 1) & 1)
    try:
        return signal.getsignal(number) is signal.SIG_IGN
    except (OSError, ValueError):
        return False


class PendingRequests:
    """Requests written on a lifeline, or kept until there is one."""

    def __init__(self) -> None:
        self._lifeline: Lifeline | None = None
        self._pending: list[bytes] = []

    def send(self, byte: bytes) -> None:
        if self._lifeline is None:
            self._pending.append(byte)
        else:
            self._lifeline.request(byte)

    def attach(self, lifeline: Lifeline) -> None:
        """Start sending on ``lifeline``, including what arrived during the launch."""
        self._lifeline = lifeline
        pending, self._pending = self._pending, []
        for byte in pending:
            lifeline.request(byte)


def relay_job_control(requests: _Sender) -> None:
    """Stop and continue the command's tree with this program; ``requests.send`` is handler-safe."""

    def on_stop(_number: int, _frame: FrameType | None) -> None:
        requests.send(SUSPEND)
        # Stop as the default action would have; SIGSTOP cannot be caught.
        os.kill(os.getpid(), signal.SIGSTOP)

    def on_continue(_number: int, _frame: FrameType | None) -> None:
        requests.send(RESUME)

    for number in JOB_STOP_SIGNALS:
        if not ignored_at_start(number):
            signal.signal(number, on_stop)
    signal.signal(signal.SIGCONT, on_continue)


class TimeoutRelay:
    """``tether timeout``'s handlers: signals passed on, SIGALRM as time up, job control, the stop
    signal."""

    def __init__(self, stop_signal: int | None, *, inherited_mask: int | None = None) -> None:
        global _inherited_mask  # noqa: PLW0603 - what this process inherited, once
        _inherited_mask = inherited_mask
        self.requests = PendingRequests()
        #: Signals left ignored because they were ignored at start.
        self.ignored: list[int] = []
        signal.signal(signal.SIGALRM, self._on_alarm)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
        for number in _PASSED_ON:
            if number != stop_signal and ignored_at_start(number):
                self.ignored.append(number)
                continue
            with contextlib.suppress(OSError, ValueError):
                signal.signal(number, self._on_signal)
        for number in range(1, signal.NSIG):
            if number in _NEVER_INHERITED or number in _PASSED_ON:
                continue
            if ignored_at_start(number):
                self.ignored.append(number)
        relay_job_control(self.requests)

    def _on_alarm(self, _number: int, _frame: FrameType | None) -> None:
        self.requests.send(TIME_OUT)

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        self.requests.send(pass_on_request(number))

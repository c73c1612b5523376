"""Signals by name, as the request, the core and the record spell them, and as numbers.

Names cover signal ``0`` and the real-time signals (``SIGRTMIN+N``, as ``kill -l``);
:func:`short_name` is GNU ``timeout -v``'s spelling, :func:`described` every text's for the
signal that killed a process (docs/timeout.md).
"""

from __future__ import annotations

import signal

__all__ = [
    "NO_SIGNAL",
    "described",
    "ignored_in",
    "is_signal_name",
    "short_name",
    "signal_name",
    "signal_number",
]

#: Signal 0: checks that a process exists and sends nothing.
NO_SIGNAL = "0"


def _realtime_name(number: int) -> str:
    low, high = signal.SIGRTMIN, signal.SIGRTMAX
    if number == low:
        return "SIGRTMIN"
    if number == high:
        return "SIGRTMAX"
    middle = (low + high) // 2
    return f"SIGRTMIN+{number - low}" if number <= middle else f"SIGRTMAX-{high - number}"


def _name_of(number: int) -> str | None:
    if number == 0:
        return NO_SIGNAL
    if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
        return _realtime_name(number)
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def described(number: int) -> str:
    """Signal ``number`` named for a person: its canonical name, or ``signal N`` if it has none."""
    return _name_of(number) or f"signal {number}"


def signal_name(text: str) -> str | None:  # noqa: PLR0911 - one return per spelling
    """``TERM``, ``SIGTERM``, ``term``, ``15``, ``0``, ``RTMIN+2`` -> the canonical name (ASCII
    digits); else None."""
    if text.isascii() and text.isdigit():
        return _name_of(int(text)) if len(text) < 4 else None
    upper = text.upper().removeprefix("SIG")
    for base, sign in (("RTMIN", "+"), ("RTMAX", "-")):
        if upper == base:
            return f"SIG{base}"
        if upper.startswith(base + sign):
            offset = upper[len(base) + 1 :]
            if not (offset.isascii() and offset.isdigit() and len(offset) < 4):
                return None
            number = signal.SIGRTMIN + int(offset) if sign == "+" else signal.SIGRTMAX - int(offset)
            if not signal.SIGRTMIN <= number <= signal.SIGRTMAX:
                return None
            return _realtime_name(number)
    if upper.startswith(("RTMIN", "RTMAX")):
        return None
    member = getattr(signal.Signals, f"SIG{upper}", None)
    if not isinstance(member, signal.Signals) or member.name != f"SIG{upper}":
        return None  # an alias such as SIGIOT is read as its own name only
    return member.name


def is_signal_name(name: str) -> bool:
    """Whether ``name`` is a canonical name :func:`signal_number` can send."""
    try:
        signal_number(name)
    except ValueError:
        return False
    return True


def signal_number(name: str) -> int:
    """The number to send for a canonical ``name``; :class:`ValueError` if it names none."""
    if name == NO_SIGNAL:
        return 0
    if name in ("SIGRTMIN", "SIGRTMAX"):
        return int(getattr(signal, name))
    for base, sign in (("SIGRTMIN+", 1), ("SIGRTMAX-", -1)):
        if name.startswith(base) and name[len(base) :].isdigit():
            start = signal.SIGRTMIN if sign > 0 else signal.SIGRTMAX
            number = start + sign * int(name[len(base) :])
            if signal.SIGRTMIN <= number <= signal.SIGRTMAX:
                return int(number)
            raise ValueError(f"not a signal: {name!r}")
    member = getattr(signal.Signals, name, None)
    if isinstance(member, signal.Signals) and name.startswith("SIG"):
        return int(member)
    raise ValueError(f"not a signal: {name!r}")


def short_name(name: str) -> str:
    """How ``timeout -v`` prints a signal: without ``SIG`` (``TERM``, ``0``, ``RTMIN+6``)."""
    return name.removeprefix("SIG")


def ignored_in(status: bytes) -> tuple[int, ...] | None:
    """The ignored signals a ``/proc/<pid>/status`` text shows (its ``SigIgn`` line: the whole
    process's, in a thread's status too), as ``subprocess`` hands them on: SIGPIPE and SIGXFSZ
    aside, which every command gets back; ``None`` without the line."""
    at = status.find(b"\nSigIgn:")
    if at < 0:
        return None
    end = status.find(b"\n", at + 1)
    try:
        mask = int(status[at + len(b"\nSigIgn:") : None if end < 0 else end].strip(), 16)
    except ValueError:
        return None
    python_ignores = (signal.SIGPIPE, signal.SIGXFSZ)
    return tuple(
        number
        for number in range(1, mask.bit_length() + 1)
        if mask >> (number - 1) & 1 and number not in python_ignores
    )

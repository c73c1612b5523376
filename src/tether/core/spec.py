"""What the caller asks for, as one value that travels to the supervisor over a pipe.

The spec holds the command's argv and environment, which may carry
credentials. That is why it travels over a pipe and not on the supervisor's
command line: ``/proc/<pid>/cmdline`` is readable by every user on the
machine, a pipe is not. For the same reason nothing in the spec is written to
the record except the few fields the record names (label, durations).

``asked_at`` is the caller's monotonic time when it asked. The deadline counts
from that moment, not from when the supervisor got round to starting the
command, so a slow launch eats into the deadline instead of extending it.

Pure: dataclasses and JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

__all__ = ["RunSpec", "SpecError"]


class SpecError(ValueError):
    """A spec that cannot describe a run; the message is ready for a person."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One command to run under supervision, and the policy for stopping it."""

    argv: tuple[str, ...]
    deadline_seconds: float
    grace_seconds: float
    asked_at: float
    record_path: str | None = None
    label: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    umask: int | None = None
    #: The gentle signal that starts a stop; SIGKILL follows after the grace.
    stop_signal: str = "SIGTERM"
    #: Where the caller's file descriptors arrived in the supervisor, by role:
    #: ``lifeline``, ``status``, ``stdin``, ``stdout``, ``stderr``.
    fds: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.argv:
            raise SpecError("no command to run")
        # Written so that NaN fails too. An infinite grace means "never escalate"
        # (``tether timeout`` without ``-k``); an infinite deadline is spelled 0.
        if not 0 <= self.deadline_seconds < float("inf"):
            raise SpecError(
                f"deadline_seconds must be a finite number >= 0, not {self.deadline_seconds!r}"
            )
        if not self.grace_seconds >= 0:
            raise SpecError(f"grace_seconds must be a number >= 0, not {self.grace_seconds!r}")
        if not (self.stop_signal.startswith("SIG") and self.stop_signal[3:].isalnum()):
            raise SpecError(
                f"stop_signal must be a signal name like SIGTERM, not {self.stop_signal!r}"
            )

    @property
    def deadline_at(self) -> float | None:
        """The monotonic time the command must be stopped at, ``None`` for no deadline."""
        return None if self.deadline_seconds == 0 else self.asked_at + self.deadline_seconds

    def to_json(self) -> bytes:
        """Serialise for the spec pipe."""
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RunSpec:
        """Read a spec written by :meth:`to_json`; raise :class:`SpecError` if it is not one."""
        try:
            data = json.loads(raw)
            data["argv"] = tuple(data["argv"])
            return cls(**data)
        except (ValueError, TypeError, KeyError) as error:
            raise SpecError(f"not a tether run spec: {error}") from None

"""Why a run ended, and the exit status every door reports for it: docs/record.md, ``reason``,
and docs/cli.md, "Exit status".
"""

from __future__ import annotations

from enum import StrEnum

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


class Reason(StrEnum):
    """Why one run ended: the record's ``reason`` field."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    #: Nothing happened for the run's ``idle`` bound (no output, no CPU time
    #: used by its tree) and it was stopped like a deadline (status 124).
    IDLE_EXCEEDED = "idle_exceeded"
    PARENT_LOST = "parent_lost"
    LAUNCH_FAILED = "launch_failed"
    #: The supervisor vanished, or failed, without saying how the run ended:
    #: written by the caller that noticed, or said by a supervisor's last resort
    #: when even it does not know.
    SUPERVISOR_LOST = "supervisor_lost"


DEADLINE_EXCEEDED: Final = 124
#: tether itself failed: bad usage, an unwritable record, a lost supervisor.
TETHER_FAILED: Final = 125
CANNOT_EXECUTE: Final = 126
NOT_FOUND: Final = 127
#: The command was stopped because somebody asked or its caller died.
STOPPED: Final = 130


def status_of(returncode: int) -> int:
    """Return a ``subprocess``-style return code as a shell reports it (128+N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode

"""When this process started, on the monotonic clock: where a program's deadline counts from.

Field 22 of ``/proc/self/stat``, converted from ``CLOCK_BOOTTIME`` (docs/cli.md;
docs/architecture.md, "Why some mechanisms are built as they are").
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "LONGEST_START",
    "process_started_at",
    "start_ticks",
    "started_from_stat",
]

#: How long before tether's import the process may have started for its start to
#: count (see :func:`process_started_at`); further back, the import's reading counts.
LONGEST_START: Final = 0.25


def started_from_stat(
    stat: str, *, ticks_per_second: int, boot_now: float, mono_now: float
) -> float:
    """The monotonic start of the process of ``stat``: its tick rounded up (never early), boot
    clock read first."""
    fields = stat[stat.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    ticks = int(fields[19])  # field 22, counting pid and the name as fields 1 and 2
    return mono_now - (boot_now - (ticks + 1) / ticks_per_second)


def start_ticks(pid: int | str = "self") -> int | None:
    """When ``pid`` started, in ticks since boot (``None``: gone); with the pid it names a process
    for good."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except (OSError, ValueError):
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # the name may hold spaces and parentheses
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def process_started_at(loaded_at: float) -> float:
    """When this process started, counted only within :data:`LONGEST_START` before ``loaded_at``."""
    try:
        with open("/proc/self/stat", "rb") as file:
            stat = file.read().decode("ascii", "replace")
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        mono_now = time.monotonic()
        started = started_from_stat(
            stat, ticks_per_second=os.sysconf("SC_CLK_TCK"), boot_now=boot_now, mono_now=mono_now
        )
    except (OSError, ValueError, IndexError):
        return loaded_at
    if not loaded_at - LONGEST_START <= started <= loaded_at:
        return loaded_at
    return started

"""Resource limits the kernel enforces on a run's cgroup: their one table (:data:`LIMITS`, from
which every other list of limits is derived), their reading as people write them, and the
cgroup files they become. Why: docs/containment.md ("Limits: cgroup v2, cgroup v1, ...") and
docs/cli.md (sizes); adding one: docs/architecture.md, "Adding a limit".
"""

from __future__ import annotations

import math

from tether.core.numbers import decimal_text, shown_value, too_long, whole_number
from tether.core.values import DeclaredValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

#: The ``cpu.max`` period tether writes (the kernel's default): 100 ms.
CPU_PERIOD_MICROSECONDS: Final = 100_000
#: The smallest quota the kernel takes in ``cpu.max``: 1 ms per period.
_CPU_MIN_QUOTA: Final = 1000
#: The largest number of CPUs taken: far above any machine, far below overflow.
_CPU_MOST: Final = 1 << 20
#: The largest size taken: 8 EiB, what a signed 64-bit counter holds.
_SIZE_MOST: Final = (1 << 63) - 1

_UNITS: Final = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
#: A size as a string: compiled where first used (``re`` is not loaded before a launch without
#: limits), and cached by ``re`` from then on.
_SIZE: Final = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgtpe]?)(?:i?b)?"


class Limit(DeclaredValue):
    """One row of :data:`LIMITS`."""

    #: The API's name (the record's key); how a value is read (``size``, ``size0``: zero too,
    #: ``cpus``, ``count``); the cgroup controller that enforces it; how ``tether show`` words
    #: a value (``{}``: the value, a size as one).
    name: str
    reads: str
    controller: str
    words: str
    #: ``tether run``'s flag, its metavar and its help.
    flag: str
    metavar: str
    help: str


#: Every limit, once, in the order every list of them follows.
# fmt: off
LIMITS: Final = (
    Limit("memory_max", "size", "memory", "memory {}",
          "--memory-max", "SIZE", "memory, e.g. 512M or 8G"),
    Limit("memory_swap_max", "size0", "memory", "swap {}",
          "--memory-swap-max", "SIZE", "swap, e.g. 0 for none"),
    Limit("cpu_max", "cpus", "cpu", "{} CPUs",
          "--cpus", "N", "CPU time, in CPUs, e.g. 1.5"),
    Limit("pids_max", "count", "pids", "{} processes",
          "--pids-max", "N", "processes and threads, e.g. 512"),
)
# fmt: on

#: The limits' names, as the API spells them (the record's ``limits`` keys).
LIMIT_NAMES: Final = tuple(limit.name for limit in LIMITS)
#: Which controller enforces each limit (the record's ``limits_enforced_by`` is per limit).
LIMIT_CONTROLLERS: Final = {limit.name: limit.controller for limit in LIMITS}
#: The controllers in the kernel's order (``cgroup.controllers``).
_KERNEL_ORDER: Final = ("cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc")


class LimitError(ValueError):
    """A value that cannot be a limit; the message names the option and is ready for a person."""


def parse_size(value: object, *, flag: str, allow_zero: bool = False) -> int:
    """A size in bytes from ``8G``, ``512MiB``, ``1.5g`` or a number of bytes; no more than
    8 EiB, zero only if ``allow_zero``, or a :class:`LimitError` naming ``flag``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LimitError(
            f"{flag}: a size must be a number of bytes or a string like '8G', "
            f"not {shown_value(value)}"
        )
    if isinstance(value, str):
        import re

        text = value.strip()
        match = None if too_long(text) else re.fullmatch(_SIZE, text, re.IGNORECASE)
        if match is None:
            raise LimitError(
                f"{flag}: not a size: {shown_value(value)} (write bytes, or a number with "
                "K, M, G or T: '512M', '8G')"
            )
        number, unit = match.groups()
        amount: int | float = float(number) * float(1024 ** _UNITS[unit.lower()])
    elif isinstance(value, float) and not math.isfinite(value):
        raise LimitError(f"{flag}: a size must be finite, not {shown_value(value)}")
    else:
        amount = value
    if amount > _SIZE_MOST:  # an infinity read from text too
        raise LimitError(f"{flag}: {shown_value(value)} is larger than any machine (8 EiB at most)")
    size = math.floor(amount)
    if size < 0 or (size == 0 and not allow_zero):
        least = "0 or more" if allow_zero else "more than 0"
        raise LimitError(f"{flag}: a size must be {least} bytes, not {shown_value(value)}")
    return size


def parse_cpus(value: object, *, flag: str) -> float:
    """A number of CPUs (``1.5``, ``"0.5"``): positive, at least 1 % of one, finite."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LimitError(f"{flag}: CPUs must be a number like 1.5, not {shown_value(value)}")
    try:
        if isinstance(value, str) and not decimal_text(value.strip()):
            raise ValueError(value)
        cpus = float(value.strip()) if isinstance(value, str) else float(value)
    except (ValueError, OverflowError):
        raise LimitError(f"{flag}: not a number of CPUs: {shown_value(value)}") from None
    if not (math.isfinite(cpus) and cpus > 0):
        raise LimitError(f"{flag}: CPUs must be a number above 0, not {shown_value(value)}")
    # The largest first: a huge finite number would overflow the quota's rounding.
    if cpus > _CPU_MOST:
        raise LimitError(f"{flag}: {shown_value(value)} CPUs is more than any machine has")
    if round(cpus * CPU_PERIOD_MICROSECONDS) < _CPU_MIN_QUOTA:
        raise LimitError(f"{flag}: {shown_value(value)} CPUs is below the kernel's least (0.01)")
    return cpus


def parse_count(value: object, *, flag: str) -> int:
    """A positive whole number of processes (``512``, ``"512"``)."""
    if isinstance(value, bool):
        raise LimitError(f"{flag}: must be a whole number above 0, not {shown_value(value)}")
    if isinstance(value, str):
        value = whole_number(value.strip()) or value
    if not isinstance(value, int) or value <= 0:
        raise LimitError(f"{flag}: must be a whole number above 0, not {shown_value(value)}")
    if value > _SIZE_MOST:
        raise LimitError(f"{flag}: {shown_value(value)} is too large")
    return value


def format_size(size: int) -> str:
    """``size`` bytes for people: ``8 GiB``, ``1.5 MiB``, ``512 B``."""
    for unit, power in (("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if size >= 1024**power:
            return f"{size / 1024**power:.4g} {unit}"
    return f"{size} B"


def oom_summary(memory_max: object) -> str:
    """What every summary of a run the OOM killer ended leads with (``show``, ``ls``,
    ``run -v``, ``str(outcome)``): ``... at its memory limit of 512 MiB`` with ``memory_max``."""
    if isinstance(memory_max, int) and not isinstance(memory_max, bool) and memory_max > 0:
        return f"killed by the OOM killer at its memory limit of {format_size(memory_max)}"
    return "killed by the OOM killer"


def parse_limits(
    values: Mapping[str, object], flags: Mapping[str, str] | None = None
) -> dict[str, int | float]:
    """The limits in ``values`` (by API name), each checked, ``None`` skipped; ``flags``: the
    names a door's users know (``--cpus``), for messages. :class:`LimitError` if not."""
    names = flags or {}
    unknown = sorted(set(values) - set(LIMIT_NAMES))
    if unknown:
        raise LimitError(f"not a resource limit: {shown_value(unknown[0])}")
    checked: dict[str, int | float] = {}
    for limit in LIMITS:
        value = values.get(limit.name)
        if value is None:
            continue
        flag = names.get(limit.name, limit.name)
        if limit.reads == "cpus":
            checked[limit.name] = parse_cpus(value, flag=flag)
        elif limit.reads == "count":
            checked[limit.name] = parse_count(value, flag=flag)
        else:
            checked[limit.name] = parse_size(value, flag=flag, allow_zero=limit.reads == "size0")
    return checked


def limit_controllers(limits: Mapping[str, object]) -> tuple[str, ...]:
    """The cgroup v2 controllers ``limits`` need, in the kernel's order."""
    needed = {LIMIT_CONTROLLERS[name] for name in limits if name in LIMIT_CONTROLLERS}
    return tuple(controller for controller in _KERNEL_ORDER if controller in needed)


def limit_files(limits: Mapping[str, int | float]) -> dict[str, str]:
    """What to write to which file of the run's cgroup for checked ``limits``, in order (with
    a memory limit, ``memory.oom.group``: the OOM killer takes the whole tree at once)."""
    files: dict[str, str] = {}
    if "memory_max" in limits:
        files["memory.max"] = str(int(limits["memory_max"]))
        files["memory.oom.group"] = "1"
    if "memory_swap_max" in limits:
        files["memory.swap.max"] = str(int(limits["memory_swap_max"]))
    if "cpu_max" in limits:
        quota = round(limits["cpu_max"] * CPU_PERIOD_MICROSECONDS)
        files["cpu.max"] = f"{quota} {CPU_PERIOD_MICROSECONDS}"
    if "pids_max" in limits:
        files["pids.max"] = str(int(limits["pids_max"]))
    return files


def limit_files_v1(limits: Mapping[str, int | float]) -> dict[str, list[tuple[str, str]]]:
    """What to write to the run's cgroup in each cgroup v1 hierarchy, by controller, in order
    (docs/containment.md, "Limits": swap needs memory beside it, and is written after it)."""
    files: dict[str, list[tuple[str, str]]] = {}
    if "memory_swap_max" in limits and "memory_max" not in limits:
        raise LimitError(
            "memory_swap_max: on cgroup v1 it needs memory_max too "
            "(v1 limits memory and swap together)"
        )
    if "memory_max" in limits:
        memory = int(limits["memory_max"])
        written = [("memory.limit_in_bytes", str(memory))]
        if "memory_swap_max" in limits:
            swap = int(limits["memory_swap_max"])
            written.append(("memory.memsw.limit_in_bytes", str(min(memory + swap, _SIZE_MOST))))
        written.append(("memory.oom_control", "0"))
        files["memory"] = written
    if "cpu_max" in limits:
        quota = round(limits["cpu_max"] * CPU_PERIOD_MICROSECONDS)
        files["cpu"] = [
            ("cpu.cfs_period_us", str(CPU_PERIOD_MICROSECONDS)),
            ("cpu.cfs_quota_us", str(quota)),
        ]
    if "pids_max" in limits:
        files["pids"] = [("pids.max", str(int(limits["pids_max"])))]
    return files

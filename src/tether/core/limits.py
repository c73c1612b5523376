"""Resource limits the kernel enforces on a run's cgroup, as people write them.

``--memory-max 8G``, ``--cpus 1.5``, ``--pids-max 512``; in the API
``memory_max="8G"`` (or a number of bytes), ``cpu_max=1.5``, ``pids_max=512``.
They become cgroup v2 files (``memory.max``, ``memory.swap.max``,
``cpu.max``, ``pids.max``) on the run's own cgroup, written before the
command execs, so the command never runs a moment unlimited; on a host
whose controllers are bound to cgroup v1, the v1 files of the run's own
cgroups in those hierarchies instead (:func:`limit_files_v1`).

Sizes take binary suffixes, as systemd's ``MemoryMax=`` and ``docker
--memory`` do: ``K``, ``M``, ``G``, ``T`` (also ``KiB`` ... and ``KB`` ...,
all powers of 1024: nobody asking for "8G" of memory means 8·10⁹), and a
plain number is bytes. Fractions are taken (``1.5G``) and rounded down to a
byte. CPUs are a positive number of CPUs' worth of time per period, as
``docker --cpus``: ``1.5`` becomes ``cpu.max`` ``150000 100000``.

Like durations, anything that is not plainly a limit is refused with a
message that names the option: zero memory (no command could even start),
negative or NaN values, a CPU share so small the kernel would refuse it.
``memory_swap_max`` may be ``0`` (no swap at all), which is its common use.

Pure: no I/O.
"""

from __future__ import annotations

import math

from tether.core.numbers import decimal_text, too_long, whole_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

__all__ = [
    "CPU_PERIOD_MICROSECONDS",
    "LIMIT_CONTROLLERS",
    "LIMIT_NAMES",
    "LimitError",
    "format_size",
    "limit_controllers",
    "limit_files",
    "limit_files_v1",
    "oom_summary",
    "parse_count",
    "parse_cpus",
    "parse_limits",
    "parse_size",
]

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

#: The limits' names, as the API spells them (the record's ``limits`` keys).
LIMIT_NAMES: Final = ("memory_max", "memory_swap_max", "cpu_max", "pids_max")


class LimitError(ValueError):
    """A value that cannot be a limit; the message names the option and is ready for a person."""


def _shown(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"(an integer of {value.bit_length()} bits)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_size(value: object, *, flag: str, allow_zero: bool = False) -> int:
    """A size in bytes from ``8G``, ``512MiB``, ``1.5g`` or a number of bytes.

    Raise :class:`LimitError` naming ``flag`` for anything else, for zero
    unless ``allow_zero``, and for more than 8 EiB.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LimitError(
            f"{flag}: a size must be a number of bytes or a string like '8G', not {_shown(value)}"
        )
    if isinstance(value, str):
        import re

        text = value.strip()
        match = None if too_long(text) else re.fullmatch(_SIZE, text, re.IGNORECASE)
        if match is None:
            raise LimitError(
                f"{flag}: not a size: {_shown(value)} (write bytes, or a number with "
                "K, M, G or T: '512M', '8G')"
            )
        number, unit = match.groups()
        scaled = float(number) * float(1024 ** _UNITS[unit.lower()])
        if not math.isfinite(scaled) or scaled > _SIZE_MOST:
            raise LimitError(f"{flag}: {_shown(value)} is larger than any machine (8 EiB at most)")
        size = math.floor(scaled)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise LimitError(f"{flag}: a size must be finite, not {_shown(value)}")
        if value > _SIZE_MOST:
            raise LimitError(f"{flag}: {_shown(value)} is larger than any machine (8 EiB at most)")
        size = math.floor(value)
    else:
        size = value
    if size < 0 or (size == 0 and not allow_zero):
        least = "0 or more" if allow_zero else "more than 0"
        raise LimitError(f"{flag}: a size must be {least} bytes, not {_shown(value)}")
    if size > _SIZE_MOST:
        raise LimitError(f"{flag}: {_shown(value)} is larger than any machine (8 EiB at most)")
    return size


def parse_cpus(value: object, *, flag: str) -> float:
    """A number of CPUs (``1.5``, ``"0.5"``): positive, at least 1 % of one, finite."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LimitError(f"{flag}: CPUs must be a number like 1.5, not {_shown(value)}")
    try:
        if isinstance(value, str) and not decimal_text(value.strip()):
            raise ValueError(value)
        cpus = float(value.strip()) if isinstance(value, str) else float(value)
    except (ValueError, OverflowError):
        raise LimitError(f"{flag}: not a number of CPUs: {_shown(value)}") from None
    if not (math.isfinite(cpus) and cpus > 0):
        raise LimitError(f"{flag}: CPUs must be a number above 0, not {_shown(value)}")
    # The largest first: a huge finite number would overflow the quota's rounding.
    if cpus > _CPU_MOST:
        raise LimitError(f"{flag}: {_shown(value)} CPUs is more than any machine has")
    if round(cpus * CPU_PERIOD_MICROSECONDS) < _CPU_MIN_QUOTA:
        raise LimitError(f"{flag}: {_shown(value)} CPUs is below the kernel's least (0.01)")
    return cpus


def parse_count(value: object, *, flag: str) -> int:
    """A positive whole number of processes (``512``, ``"512"``)."""
    if isinstance(value, bool):
        raise LimitError(f"{flag}: must be a whole number above 0, not {_shown(value)}")
    if isinstance(value, str):
        value = whole_number(value.strip()) or value
    if not isinstance(value, int) or value <= 0:
        raise LimitError(f"{flag}: must be a whole number above 0, not {_shown(value)}")
    if value > _SIZE_MOST:
        raise LimitError(f"{flag}: {_shown(value)} is too large")
    return value


def format_size(size: int) -> str:
    """``size`` bytes for people: ``8 GiB``, ``1.5 MiB``, ``512 B``."""
    for unit, power in (("TiB", 4), ("GiB", 3), ("MiB", 2), ("KiB", 1)):
        if size >= 1024**power:
            return f"{size / 1024**power:.4g} {unit}"
    return f"{size} B"


def oom_summary(memory_max: object) -> str:
    """What every summary of a run the OOM killer ended leads with.

    ``killed by the OOM killer at its memory limit of 512 MiB`` when the run
    had ``memory_max`` (bytes), ``killed by the OOM killer`` when it had none
    (the machine's, or a parent cgroup's, OOM killer). ``tether show``'s
    verdict, ``tether ls``'s REASON column, ``tether run -v``'s line and
    ``str(outcome)`` all say it first; the record's ``reason`` stays what
    tether saw (``completed``: the kernel, not tether, stopped the command).
    """
    if isinstance(memory_max, int) and not isinstance(memory_max, bool) and memory_max > 0:
        return f"killed by the OOM killer at its memory limit of {format_size(memory_max)}"
    return "killed by the OOM killer"


def parse_limits(
    values: Mapping[str, object], flags: Mapping[str, str] | None = None
) -> dict[str, int | float]:
    """The limits in ``values`` (by API name, :data:`LIMIT_NAMES`), each checked; ``None`` skipped.

    ``flags`` maps API names to the names a door's users know (``--cpus``),
    for messages. Raise :class:`LimitError` for a value that is no limit and
    for a name that is none.
    """
    names = flags or {}
    unknown = sorted(set(values) - set(LIMIT_NAMES))
    if unknown:
        raise LimitError(f"not a resource limit: {_shown(unknown[0])}")
    checked: dict[str, int | float] = {}
    for name in LIMIT_NAMES:
        value = values.get(name)
        if value is None:
            continue
        flag = names.get(name, name)
        if name == "cpu_max":
            checked[name] = parse_cpus(value, flag=flag)
        elif name == "pids_max":
            checked[name] = parse_count(value, flag=flag)
        else:
            checked[name] = parse_size(value, flag=flag, allow_zero=name == "memory_swap_max")
    return checked


def limit_controllers(limits: Mapping[str, object]) -> tuple[str, ...]:
    """The cgroup v2 controllers ``limits`` need, in the kernel's order."""
    needed: list[str] = []
    if "cpu_max" in limits:
        needed.append("cpu")
    if "memory_max" in limits or "memory_swap_max" in limits:
        needed.append("memory")
    if "pids_max" in limits:
        needed.append("pids")
    return tuple(needed)


def limit_files(limits: Mapping[str, int | float]) -> dict[str, str]:
    """What to write to which file of the run's cgroup for checked ``limits``, in order.

    With a memory limit, ``memory.oom.group`` is ``1``: when the OOM killer
    acts, it kills the whole tree at once, as Kubernetes does for a
    container, rather than one process of it, leaving the rest to run on
    with half a computation.
    """
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


#: Which controller enforces each limit (the record's ``limits_enforced_by`` is per limit).
LIMIT_CONTROLLERS: Final = {
    "memory_max": "memory",
    "memory_swap_max": "memory",
    "cpu_max": "cpu",
    "pids_max": "pids",
}


def limit_files_v1(limits: Mapping[str, int | float]) -> dict[str, list[tuple[str, str]]]:
    """What to write to the run's cgroup in each cgroup v1 hierarchy, by controller, in order.

    v1 counts memory and swap together: ``memory.memsw.limit_in_bytes`` is
    memory *plus* swap, so ``memory_swap_max`` needs ``memory_max`` beside it
    (a :class:`LimitError` otherwise), and it must never be below
    ``memory.limit_in_bytes``, so it is written second (a fresh cgroup starts
    with both unlimited). ``memory.oom_control`` ``0``: the OOM killer on,
    whatever the parent chose (a child inherits ``oom_kill_disable``); v1
    has no ``memory.oom.group``, so it kills one process, and the supervisor
    stops the rest of the tree (the command's exit, or a straggler sweep).
    The CPU period is written before the quota (the kernel checks the pair).
    """
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

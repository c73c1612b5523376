"""One command under tether inside a Ray task or actor, and what comes back to the driver
(docs/cluster.md, "Ray"). Ray is imported only when a function here runs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Unpack, cast

from tether.api.functions import run as _run
from tether.api.functions import run_async as _run_async
from tether.api.options import RunOptions
from tether.api.outcome import Outcome
from tether.caller.request import limits_refusal
from tether.core.limits import LIMIT_NAMES, parse_limits
from tether.shared.paths import events_path_for
from tether.shared.record_file import RecordError, read_record

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LimitPolicy", "RayRun", "remote", "run", "run_async"]

#: How a task's Ray resources become limits on its command's tree (docs/cluster.md).
LimitPolicy = Literal["auto", "require", "off"]

#: The most of an event log brought back to the driver; a longer one keeps its start.
MAX_EVENTS_BYTES: Final = 16 << 20

#: Ray's resource names, and the tether limit each becomes.
_RESOURCE_LIMITS: Final = {"CPU": "cpu_max", "memory": "memory_max"}


@dataclass(frozen=True, slots=True)
class RayRun:
    """What one tethered command in a Ray task left, as data that pickles: docs/cluster.md
    (``events``: at most :data:`MAX_EVENTS_BYTES`; ``limits``: as the record keeps them)."""

    outcome: Outcome
    hostname: str
    node_id: str | None = None
    record: dict[str, object] | None = field(default=None, repr=False)
    events: bytes | None = field(default=None, repr=False)
    limits: dict[str, int | float] = field(default_factory=dict)
    limits_skipped: str | None = None
    record_problem: str | None = None

    @property
    def record_name(self) -> str | None:
        """The record's file name on its node (what :func:`~tether.ray.write_records` keeps)."""
        return None if self.outcome.record_path is None else self.outcome.record_path.name

    @property
    def ok(self) -> bool:
        """:attr:`Outcome.ok`: the command completed with status 0 and its record was written."""
        return self.outcome.ok


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    limits: LimitPolicy = "auto",
    events: bool = False,
    check: bool = False,
    **options: Unpack[RunOptions],
) -> RayRun:
    """Run ``argv`` under tether in this Ray task or actor (:func:`tether.run`'s options, output
    captured unless a stream is named); return its :class:`RayRun`. docs/cluster.md, "Ray"."""
    given, skipped = _with_limits(options, limits)
    outcome = _run(argv, check=check, **given)
    return _returned(outcome, given, skipped, events)


async def run_async(
    argv: Sequence[str | os.PathLike[str]],
    *,
    limits: LimitPolicy = "auto",
    events: bool = False,
    check: bool = False,
    **options: Unpack[RunOptions],
) -> RayRun:
    """:func:`run` for an async actor, through :func:`tether.run_async` (cancelling the
    coroutine cancels the command)."""
    given, skipped = _with_limits(options, limits)
    outcome = await _run_async(argv, check=check, **given)
    return _returned(outcome, given, skipped, events)


def remote(**ray_options: Any) -> Any:
    """A Ray remote function (:func:`ray.remote`'s ``ray_options``) that calls :func:`run`:
    ``remote(num_cpus=2).remote(argv, ...)``; each retry is a run with its own record."""
    import ray

    wrap: Callable[[Any], Any] = ray.remote(**ray_options) if ray_options else ray.remote
    return wrap(run)


def _task_resources() -> dict[str, float]:
    """The resources Ray assigned to the running task or actor; empty outside a worker."""
    try:
        import ray
    except ImportError:
        return {}
    if not ray.is_initialized():
        return {}
    context = ray.get_runtime_context()
    if context.worker.mode != ray.WORKER_MODE:
        return {}  # the driver has no task, so no resources of its own
    assigned: dict[str, float] = context.get_assigned_resources()
    return assigned


def mapped_limits(resources: Mapping[str, float]) -> dict[str, int | float]:
    """The tether limits Ray's ``resources`` stand for: ``CPU`` -> ``cpu_max``, ``memory`` ->
    ``memory_max`` (bytes, whole); a resource of zero is no limit."""
    limits: dict[str, int | float] = {}
    for resource, limit in _RESOURCE_LIMITS.items():
        amount = resources.get(resource)
        if amount is None or amount <= 0:
            continue
        limits[limit] = int(amount) if limit == "memory_max" else float(amount)
    return limits


def given_limits(options: Mapping[str, object]) -> dict[str, int | float]:
    """The limits given in ``options``, checked (``"8G"`` in bytes, ``"1.5"`` CPUs)."""
    return parse_limits({name: options.get(name) for name in LIMIT_NAMES})


def _with_limits(options: RunOptions, policy: LimitPolicy) -> tuple[RunOptions, str | None]:
    """``options`` with the task's resources added as limits, per ``policy``; and why not."""
    if policy not in ("auto", "require", "off"):
        raise ValueError(f"limits must be 'auto', 'require' or 'off', not {policy!r}")
    if "pass_fds" in options:
        raise ValueError(
            "pass_fds: not taken by tether.ray (a Ray task cannot receive the driver's "
            "descriptors, and the worker's own are Ray's)"
        )
    given: dict[str, Any] = dict(options)
    if not {"stdout", "stderr", "capture_output"} & given.keys():
        given["capture_output"] = True
    if policy == "off":
        return cast(RunOptions, given), None
    mapped = {
        name: value
        for name, value in mapped_limits(_task_resources()).items()
        if given.get(name) is None  # an explicit limit wins
    }
    skipped = None if policy == "require" or not mapped else limits_refusal(mapped)
    if skipped is None:
        given.update(mapped)
    return cast(RunOptions, given), skipped


def _returned(outcome: Outcome, options: RunOptions, skipped: str | None, events: bool) -> RayRun:
    """The :class:`RayRun` of ``outcome``: the record and event log read here, on the node."""
    record: dict[str, object] | None = None
    log: bytes | None = None
    problem: str | None = None
    if outcome.record_path is not None:
        try:
            record = read_record(outcome.record_path)
        except RecordError as error:
            problem = str(error)
        if events:
            log = read_event_log(events_path_for(outcome.record_path))
    return RayRun(
        outcome=outcome,
        hostname=os.uname().nodename,
        node_id=this_node_id(),
        record=record,
        events=log,
        limits=given_limits(options),
        limits_skipped=skipped,
        record_problem=problem,
    )


def read_event_log(path: Path) -> bytes | None:
    """The event log at ``path``, at most :data:`MAX_EVENTS_BYTES` cut at a line's end; or None.
    Opened without following a link or blocking (a FIFO must not hold the task)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_EVENTS_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_EVENTS_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_EVENTS_BYTES:
        data = data[: data.rfind(b"\n", 0, MAX_EVENTS_BYTES) + 1]
    return data


def this_node_id() -> str | None:
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    node: str = ray.get_runtime_context().get_node_id()
    return node

"""The Python API's four functions: ``launch``, ``run`` and their ``async`` twins.

Each is a thin client of the machinery ``tether run`` uses (the shared request builder, a
detached supervisor, the lifeline, the status client), with :mod:`subprocess`'s shape. What they
take and do: docs/api.md. ``os.pidfd_open`` is called directly, as trio does, to wait for the
spawned intermediate in the event loop.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Unpack, cast

from tether.api.handle import Tether, _wait_timeout
from tether.api.options import PIPE, LaunchOptions, RunOptions, StdioPlan, request_of
from tether.api.outcome import Outcome, TimeoutExpired
from tether.caller.capture import DEFAULT_MAX_OUTPUT_BYTES, Exchange
from tether.caller.output_stream import ready
from tether.caller.start import (
    Spawn,
    close_spec_pipe,
    launch_bound,
    send_spec,
    spawn_supervisor,
)
from tether.core.durations import DurationError, duration_seconds
from tether.core.reasons import Reason

__all__ = ["launch", "launch_async", "run", "run_async"]

Argv = Sequence[str | os.PathLike[str]]


def _spawn(function: str, argv: Argv, options: LaunchOptions) -> tuple[Tether, Spawn]:
    """Check everything, then spawn the supervisor; return the handle (not launched yet)."""
    spec, plan = request_of(function, argv, options)
    try:
        stdin, stdout, stderr = plan.fds
        spawn = spawn_supervisor(
            spec, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=plan.passed
        )
    except BaseException:
        plan.close()
        raise
    for fd in plan.opened:  # the supervisor has its own copies now
        os.close(fd)
    plan.opened = []
    return Tether(spawn, plan), spawn


def launch(argv: Argv, **options: Unpack[LaunchOptions]) -> Tether:
    """Start ``argv`` under a tether, stopped with its whole tree at ``deadline``, on
    :meth:`~Tether.cancel`, or when this process dies; return once it runs (docs/api.md)."""
    tether, spawn = _spawn("launch", argv, options)
    try:
        try:
            send_spec(spawn)
            bound = launch_bound(spawn.spec)
            if not tether._wait_blocking(tether._is_launched, bound):
                tether._abandon_launch(bound)
        except BaseException:
            tether._stop_blocking()
            raise
    finally:
        spawn.intermediate.wait()
    return tether._launched_or_raise()


def run(argv: Argv, *, check: bool = False, **options: Unpack[RunOptions]) -> Outcome:
    """Run ``argv`` to its end under a tether; return the :class:`Outcome`, as
    :func:`subprocess.run` (``check``, ``timeout``, ``capture_output``, ``input``: docs/api.md)."""
    launch_options, data, limit, timeout = _run_options("run", options)
    with launch(argv, **launch_options) as tether:
        exchange = _exchange(tether, data, limit)
        outcome = tether._communicate_blocking(exchange)
    return _verdict(outcome, check, timeout, exchange)


def _verdict(
    outcome: Outcome, check: bool, timeout: float | None, exchange: Exchange | None
) -> Outcome:
    """What ``run()`` returns or raises: :mod:`subprocess`'s order, the timeout before ``check``."""
    if timeout is not None and outcome.reason is Reason.DEADLINE_EXCEEDED:
        kept = {} if exchange is None else exchange.kept
        output, errors = ((kept[n].head + kept[n].tail) if n in kept else b"" for n in _STREAMS)
        raise TimeoutExpired(
            list(outcome.argv), timeout, output or None, errors or None, outcome=outcome
        )
    return outcome.check() if check else outcome


_STREAMS = ("stdout", "stderr")


def _run_options(
    function: str, options: RunOptions
) -> tuple[LaunchOptions, bytes | None, int | None, float | None]:
    """Split ``run()``'s own options off (``capture_output`` and ``input`` become pipes); the
    ``timeout`` only if it is the deadline that counts, so that reaching it raises."""
    unknown = sorted(set(options) - set(RunOptions.__annotations__))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    rest: dict[str, Any] = dict(options)
    capture = rest.pop("capture_output", False)
    data = rest.pop("input", None)
    limit = rest.pop("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES)
    timeout = _timeout_as_deadline(rest, rest.pop("timeout", None))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"max_output_bytes must be a number of bytes >= 0 or None, not {limit!r}")
    if capture:
        if rest.get("stdout") is not None or rest.get("stderr") is not None:
            raise ValueError("stdout and stderr arguments may not be used with capture_output")
        rest["stdout"] = rest["stderr"] = PIPE
    encoded: bytes | None = None
    if data is not None:
        if rest.get("stdin") is not None:
            raise ValueError("stdin and input arguments may not both be used")
        rest["stdin"] = PIPE
        encoded = _input_bytes(data, rest)
    return cast(LaunchOptions, rest), encoded, limit, timeout


#: A ``timeout`` of zero or less: already past at the start, as :mod:`subprocess`'s.
_ALREADY_PAST = 1e-9


def _timeout_as_deadline(options: dict[str, Any], timeout: object) -> float | None:
    """Make ``timeout`` the run's deadline where it is the shorter; return it if so."""
    if timeout is None:
        return None
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout <= 0:
        seconds, shown = 0.0, timeout  # as in subprocess: expired at once
    else:
        seconds = _wait_timeout(timeout)  # the same check as Tether.wait()'s
        shown = timeout if isinstance(timeout, int | float) else seconds
    deadline = options.get("deadline")
    try:
        other = None if deadline is None else duration_seconds(deadline, flag="deadline")
    except (TypeError, DurationError):
        # Refused, by name, when the request is built.
        return _with_deadline(options, seconds, shown)
    if other and other < seconds:
        return None  # the deadline comes first: an outcome, as always
    return _with_deadline(options, seconds, shown)


def _with_deadline(options: dict[str, Any], seconds: float, shown: float) -> float:
    options["deadline"] = seconds or _ALREADY_PAST
    return shown


def _input_bytes(data: object, options: dict[str, Any]) -> bytes:
    from tether.api.options import text_encoding

    encoding, errors = text_encoding(
        options.get("text"), options.get("encoding"), options.get("errors")
    )
    if encoding is None:
        if isinstance(data, str):
            raise TypeError("input is text: pass text=True (or an encoding), or bytes")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"input must be bytes or None, not {type(data).__name__}")
        return bytes(data)
    if not isinstance(data, str):
        raise TypeError(f"input must be a string with text=True, not {type(data).__name__}")
    return data.encode(encoding, errors or "strict")


def _exchange(tether: Tether, data: bytes | None, limit: int | None) -> Exchange | None:
    """Take the handle's pipes over for ``run()``: input written and output kept, all at once."""
    plan: StdioPlan | None = tether._plan
    if plan is None or not plan.pipes:
        return None
    stdin_fd, outputs = tether._take_pipes()
    return Exchange(stdin_fd, data, outputs, limit)


async def launch_async(argv: Argv, **options: Unpack[LaunchOptions]) -> Tether:
    """:func:`launch`, for asyncio: only the spawn runs on the loop, as in
    :func:`asyncio.create_subprocess_exec`; cancelling the task cancels the command."""
    import asyncio

    tether, spawn = _spawn("launch_async", argv, options)
    try:
        try:
            await _send_spec_async(spawn)
            bound = launch_bound(spawn.spec)
            try:
                await asyncio.wait_for(tether._wait_async(tether._is_launched), bound)
            except TimeoutError:
                tether._abandon_launch(bound)
        except asyncio.CancelledError:
            await tether._stop_async()
            raise
    finally:
        await _reap_async(spawn.intermediate)
    return tether._launched_or_raise()


async def run_async(argv: Argv, *, check: bool = False, **options: Unpack[RunOptions]) -> Outcome:
    """:func:`run`, for asyncio (output and input through the event loop, never a thread);
    cancelling the task cancels the command."""
    launch_options, data, limit, timeout = _run_options("run_async", options)
    tether = await launch_async(argv, **launch_options)
    exchange = _exchange(tether, data, limit)
    outcome = await tether._communicate_async(exchange)
    return _verdict(outcome, check, timeout, exchange)


async def _send_spec_async(spawn: Spawn) -> None:
    """Write the spec without blocking the loop (it fits the pipe at once unless it is huge)."""
    fd, data = spawn.spec_fd, memoryview(spawn.spec_data)
    if fd < 0:
        return  # forked by the zygote: the supervisor has its spec already
    os.set_blocking(fd, False)
    try:
        while data:
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                await ready(fd, writable=True)
    except OSError:
        pass  # the supervisor died before reading: seen as a status pipe without "started"
    finally:
        close_spec_pipe(fd)


async def _reap_async(intermediate: Any) -> None:
    """Reap the intermediate (gone within milliseconds of the spawn) through a pidfd."""
    if intermediate.poll() is not None:
        return
    try:
        pidfd = os.pidfd_open(intermediate.pid)
    except OSError:
        intermediate.wait()
        return
    try:
        await ready(pidfd)
    finally:
        os.close(pidfd)
    intermediate.wait()

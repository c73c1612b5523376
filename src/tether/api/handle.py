"""The handle of one running command, :class:`Tether` (docs/api.md).

Why one reader serves many waiting threads and tasks, and why cancelling stops the
command: docs/architecture.md, "One handle, many waiters".
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import select
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tether.api.outcome import Outcome, TimeoutExpired
from tether.caller.capture import Exchange, decode_output
from tether.caller.launch_errors import LaunchError, launch_error
from tether.caller.output_stream import OutputStream, resolve
from tether.caller.start import Spawn
from tether.core.durations import DurationError, duration_seconds
from tether.core.reasons import Reason
from tether.shared.poll_wait import poll_ms
from tether.shared.protocol import Finished, Started

if TYPE_CHECKING:
    import asyncio
    from typing import IO, Any

    from tether.api.options import StdioPlan

__all__ = ["Tether"]


class Tether:
    """One running command, bound to this process; made by :func:`tether.launch`.

    Thread-safe; dropping it does not stop the command (as with ``Popen``). See docs/api.md.
    """

    def __init__(self, spawn: Spawn, plan: StdioPlan | None = None) -> None:
        self._spec = spec = spawn.spec
        self._name = os.path.basename(spec.argv[0]) or spec.argv[0]
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._reading = False
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lifeline = spawn.lifeline
        self._status = spawn.status
        self._started: Started | None = None
        self._finished: Finished | None = None
        self._outcome: Outcome | None = None
        self._abandoned: float | None = None
        self._plan = plan
        pipes = {} if plan is None else plan.pipes
        self._encoding = None if plan is None else plan.encoding
        self._errors = None if plan is None else plan.errors
        self._stdin = self._input(pipes.get("stdin"))
        self._stdout = self._output(pipes.get("stdout"))
        self._stderr = self._output(pipes.get("stderr"))

    def _input(self, fd: int | None) -> IO[Any] | None:
        if fd is None:
            return None
        if self._encoding is None:
            return open(fd, "wb", buffering=0)
        return open(fd, "w", encoding=self._encoding, errors=self._errors, buffering=1)

    def _output(self, fd: int | None) -> OutputStream | None:
        if fd is None:
            return None
        return OutputStream(fd, encoding=self._encoding, errors=self._errors)

    @property
    def stdin(self) -> IO[Any] | None:
        """The command's stdin with ``stdin=tether.PIPE`` (close it for EOF), else ``None``."""
        return self._stdin

    @property
    def stdout(self) -> OutputStream | None:
        """The command's stdout with ``stdout=tether.PIPE``: iterate it, or ``read()`` it."""
        return self._stdout

    @property
    def stderr(self) -> OutputStream | None:
        """The command's stderr with ``stderr=tether.PIPE``: iterate it, or ``read()`` it."""
        return self._stderr

    def _take_pipes(self) -> tuple[int | None, dict[str, int]]:
        stdin_fd = None
        if self._stdin is not None and not self._stdin.closed:
            stdin_fd = os.dup(self._stdin.fileno())
            self._stdin.close()
        outputs = {
            name: stream.detach()
            for name, stream in (("stdout", self._stdout), ("stderr", self._stderr))
            if stream is not None and not stream.closed
        }
        return stdin_fd, outputs

    @property
    def pid(self) -> int:
        """The command's pid (also its process group id)."""
        return self._started_value("pid")

    @property
    def supervisor_pid(self) -> int:
        """The pid of the detached supervisor watching the command."""
        return self._started_value("supervisor_pid")

    def _started_value(self, name: str) -> int:
        value: int | None = getattr(self._started, name, None)
        assert value is not None
        return value

    @property
    def record_path(self) -> Path | None:
        """Where the record will be written; ``None`` without one (see :attr:`no_record_reason`)."""
        path = self._spec.record_path
        return None if path is None else Path(path)

    @property
    def no_record_reason(self) -> str | None:
        """Why this run keeps no record although it was to; ``None`` otherwise."""
        return self._spec.no_record_reason

    @property
    def label(self) -> str | None:
        """The run's label, as given to :func:`tether.launch`."""
        return self._spec.label

    @property
    def argv(self) -> tuple[str, ...]:
        """The command line."""
        return self._spec.argv

    @property
    def outcome(self) -> Outcome | None:
        """How the run ended, or ``None`` while it is running. Never blocks."""
        with self._lock:
            if self._outcome is not None or self._reading:
                return self._outcome
            self._reading = True
        try:
            self._pump()
        finally:
            self._release()
        return self._outcome

    def __repr__(self) -> str:
        label = f" label={self._spec.label!r}" if self._spec.label else ""
        started, outcome = self._started, self._outcome
        pid, supervisor = (None, None) if started is None else (started.pid, started.supervisor_pid)
        pids = f"pid={pid} supervisor_pid={supervisor}"
        state = "running"
        if outcome is not None:
            state = f"{outcome.reason.value}, exit status {outcome.exit_status}"
        return f"<Tether {self._name!r}{label} {pids} {state}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # The default argument keeps ``warn`` reachable during interpreter shutdown.
        if getattr(self, "_outcome", True) is None and self._started is not None:
            _warn(f"{self!r} was dropped while running", ResourceWarning, source=self)

    def cancel(self) -> None:
        """Ask for SIGTERM to the whole tree, then SIGKILL after the grace; returns at once."""
        self._lifeline.cancel()

    def kill(self) -> None:
        """Ask for SIGKILL to the whole tree now; returns at once."""
        self._lifeline.kill()

    def wait(self, timeout: float | str | None = None) -> Outcome:
        """Block until the run is over; return its :class:`Outcome`.

        :class:`TimeoutExpired` after ``timeout`` (seconds or ``"5s"``); the command keeps running.
        """
        seconds = None if timeout is None else _wait_timeout(timeout)
        if not self._wait_blocking(self._is_over, seconds):
            assert seconds is not None
            raise TimeoutExpired(list(self._spec.argv), seconds, tether=self)
        assert self._outcome is not None
        return self._outcome

    def __enter__(self) -> Tether:
        return self

    def __exit__(self, *_exception: object) -> None:
        if self.outcome is None:
            self._stop_blocking()

    def _stop_blocking(self) -> Outcome:
        """Cancel and wait; a second interruption kills now."""
        self.cancel()
        try:
            return self.wait()
        except BaseException:
            self.kill()
            raise

    def _wait_blocking(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while not ready():
                if not self._reading:
                    self._reading = True
                    break
                remaining = _remaining(end)
                if remaining == 0:
                    return False
                self._changed.wait(remaining)
            else:
                return True
        try:
            return self._read_blocking(ready, end)
        finally:
            self._release()

    def _read_blocking(self, ready: Callable[[], bool], end: float | None) -> bool:
        while True:
            self._pump()
            if ready():
                return True
            remaining = _remaining(end)
            if remaining == 0:
                return False
            fd = self._status.fd
            if fd is not None:
                # Not select(): a busy caller may hold descriptors above 1024.
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                poller.poll(poll_ms(remaining))

    def _communicate_blocking(self, exchange: Exchange | None) -> Outcome:
        """Exchange input and output in one ``poll`` with the status channel; then the outcome."""
        if exchange is None:
            return self.wait()
        try:
            while self.outcome is None:
                pending = exchange.wanted()
                if not pending:
                    break
                status = self._status.fd
                poller = select.poll()
                for fd, writing in pending:
                    poller.register(fd, select.POLLOUT if writing else select.POLLIN)
                if status is not None:
                    poller.register(status, select.POLLIN)
                for fd, _events in poller.poll():
                    if fd != status:
                        exchange.ready(fd)
            outcome = self.wait()
            exchange.drain()
        finally:
            exchange.close()
        return self._with_output(outcome, exchange)

    async def _communicate_async(self, exchange: Exchange | None) -> Outcome:
        """:meth:`_communicate_blocking` through the running loop; cancelling stops the command."""
        import asyncio

        if exchange is None:
            return await self.wait_async()
        loop = asyncio.get_running_loop()
        pipes_done: asyncio.Future[None] = loop.create_future()
        watched: dict[int, bool] = {}

        def on_ready(fd: int) -> None:
            try:
                exchange.ready(fd)
            except Exception as error:
                if not pipes_done.done():
                    pipes_done.set_exception(error)
                return
            sync()

        def sync() -> None:
            pending = dict(exchange.wanted())
            for fd, writing in list(watched.items()):
                if pending.get(fd) is not writing:
                    (loop.remove_writer if writing else loop.remove_reader)(fd)
                    del watched[fd]
            for fd, writing in pending.items():
                if fd not in watched:
                    (loop.add_writer if writing else loop.add_reader)(fd, on_ready, fd)
                    watched[fd] = writing
            if not pending and not pipes_done.done():
                pipes_done.set_result(None)

        def unwatch() -> None:
            for fd, writing in watched.items():
                (loop.remove_writer if writing else loop.remove_reader)(fd)
            watched.clear()

        over = asyncio.ensure_future(self._wait_async(self._is_over))
        try:
            sync()
            await asyncio.wait({pipes_done, over}, return_when=asyncio.FIRST_COMPLETED)
            if pipes_done.done():
                pipes_done.result()
            await over
            unwatch()
            exchange.drain()
        except asyncio.CancelledError:
            unwatch()
            exchange.close()
            over.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await over
            await self._stop_async()
            raise
        finally:
            unwatch()
            exchange.close()
            if not over.done():
                over.cancel()
        assert self._outcome is not None
        return self._with_output(self._outcome, exchange)

    def _with_output(self, outcome: Outcome, exchange: Exchange) -> Outcome:
        import dataclasses

        captured: dict[str, Any] = {}
        undecoded: tuple[str, UnicodeDecodeError] | None = None
        for name, kept in exchange.kept.items():
            try:
                data, dropped = decode_output(kept, encoding=self._encoding, errors=self._errors)
            except UnicodeDecodeError as error:
                undecoded = (name, error)
                break
            captured[name] = data
            captured[f"{name}_dropped"] = dropped
        if undecoded is not None:
            # The run is over and recorded: the outcome goes with the error, with the bytes.
            for name, kept in exchange.kept.items():
                captured[name], captured[f"{name}_dropped"] = decode_output(
                    kept, encoding=None, errors=None
                )
        outcome = dataclasses.replace(outcome, **captured)
        with self._lock:
            self._outcome = outcome
        if undecoded is not None:
            raise _decode_error(outcome, *undecoded)
        return outcome

    async def wait_async(self) -> Outcome:
        """Wait through the running loop; return the :class:`Outcome`.

        Cancelling the awaiting task stops the command (docs/api.md, "Cancel one from asyncio").
        """
        import asyncio

        try:
            await self._wait_async(self._is_over)
        except asyncio.CancelledError:
            await self._stop_async()
            raise
        assert self._outcome is not None
        return self._outcome

    async def __aenter__(self) -> Tether:
        return self

    async def __aexit__(self, *_exception: object) -> None:
        if self.outcome is None:
            await self._stop_async()

    async def _stop_async(self) -> None:
        import asyncio

        self.cancel()
        try:
            await self._wait_async(self._is_over)
        except asyncio.CancelledError:
            self.kill()
            raise

    async def _wait_async(self, ready: Callable[[], bool]) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if ready():
                    return
                reader = not self._reading
                if reader:
                    self._reading = True
                else:
                    woken: asyncio.Future[None] = loop.create_future()
                    self._async_waiters.append((loop, woken))
            if reader:
                try:
                    await self._read_async(loop, ready)
                finally:
                    self._release()
                return
            try:
                await woken
            finally:
                with self._lock, contextlib.suppress(ValueError):
                    self._async_waiters.remove((loop, woken))

    async def _read_async(self, loop: asyncio.AbstractEventLoop, ready: Callable[[], bool]) -> None:
        self._pump()
        fd = self._status.fd
        if ready() or fd is None:
            return
        done: asyncio.Future[None] = loop.create_future()

        def on_readable() -> None:
            try:
                self._pump()
            except Exception as error:  # handed to the awaiting task, not to the loop
                if not done.done():
                    done.set_exception(error)
                return
            if ready() and not done.done():
                done.set_result(None)

        loop.add_reader(fd, on_readable)
        try:
            await done
        finally:
            loop.remove_reader(fd)

    def _is_launched(self) -> bool:
        return self._started is not None or self._outcome is not None

    def _is_over(self) -> bool:
        return self._outcome is not None

    def _pump(self) -> None:
        """Read what has arrived on the status pipe (the reader role's holder only)."""
        messages = self._status.read_available()
        if not messages:
            return
        finished = self._status.finished
        with self._lock:
            self._started = self._status.started
            if finished is not None and self._outcome is None:
                self._finished = finished
                self._outcome = Outcome.from_finished(finished, self._spec, self._started)
        if finished is not None:
            self._lifeline.release()
        self._notify()

    def _release(self) -> None:
        with self._lock:
            self._reading = False
            if self._outcome is not None:
                self._status.close()
        self._notify()

    def _notify(self) -> None:
        with self._lock:
            self._changed.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
                loop.call_soon_threadsafe(resolve, future)

    def _abandon_launch(self, bound: float) -> None:
        """The supervisor said nothing within ``bound`` seconds: let it go (then a LaunchError)."""
        self._lifeline.release()
        finished = self._status.abandon()
        with self._lock:
            self._abandoned = bound
            if self._outcome is None:
                self._finished = finished
                self._outcome = Outcome.from_finished(finished, self._spec, self._started)
        self._notify()

    def _launched_or_raise(self) -> Tether:
        """Return self if the command started; raise :class:`LaunchError` if it never did."""
        if self._started is not None:
            return self
        finished, outcome = self._finished, self._outcome
        assert finished is not None
        assert outcome is not None
        abandoned = self._abandoned
        if abandoned is not None:
            raise LaunchError(
                f"the supervisor did not start the command within {abandoned:.3g} s "
                "(it, or the zygote with the request, is stopped or frozen): let go of",
                errno=errno_codes.ETIMEDOUT,
                exit_status=outcome.exit_status,
                record_path=outcome.record_path,
            )
        if outcome.reason is Reason.LAUNCH_FAILED:
            raise launch_error(
                outcome.message or f"cannot run {self._name!r}",
                errno=finished.errno,
                exit_status=outcome.exit_status,
                record_path=outcome.record_path,
                program=self._spec.argv[0],
            )
        raise LaunchError(
            "the supervisor exited before starting the command",
            exit_status=outcome.exit_status,
            record_path=outcome.record_path,
        )


def _remaining(end: float | None) -> float | None:
    return None if end is None else max(0.0, end - time.monotonic())


def _wait_timeout(timeout: object) -> float:
    try:
        seconds = duration_seconds(timeout, flag="timeout")
    except TypeError:
        raise TypeError(
            f"timeout must be a number of seconds, a duration string or None, not {timeout!r}"
        ) from None
    except DurationError as error:
        raise ValueError(str(error)) from None
    return seconds


def _decode_error(outcome: Outcome, stream: str, error: UnicodeDecodeError) -> UnicodeDecodeError:
    from tether.api.outcome import OutputDecodeError

    raised = OutputDecodeError(error.encoding, error.object, error.start, error.end, error.reason)
    raised.outcome = outcome
    raised.stream = stream
    raised.stdout = outcome.stdout if isinstance(outcome.stdout, bytes) else None
    raised.stderr = outcome.stderr if isinstance(outcome.stderr, bytes) else None
    raised.__cause__ = error
    return raised

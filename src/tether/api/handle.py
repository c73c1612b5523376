"""The handle of one running command: :class:`Tether`.

**One reader, many waiters.** Several threads, and several asyncio tasks, may
wait for the same command. The status pipe has exactly one reader at a time
(the *reader role*, taken under a lock); everyone else sleeps on a condition
variable (threads) or a future (tasks) and is woken whenever the reader learns
something. A waiter whose time runs out hands the role on. Reads go through
the one status client (:class:`~tether.caller.status.StatusClient`), which
never blocks; a thread waits for the pipe in ``poll()``, a task through its
loop's ``add_reader``: no polling, no helper threads. A lost supervisor is the
client's to handle, as for every door.

**Cancellation stops the command.** Leaving a ``with`` block, an interrupted
``wait()`` and a cancelled ``wait_async()`` all ask the supervisor for a
graceful stop and then wait for it, which the supervisor bounds by the grace;
a second interruption asks for SIGKILL at once and stops waiting. This way a
cancelled task, like a killed program, leaves nothing running.

**Nothing global is touched in the caller.** No signal handlers, no logging
configuration, neither ``transitions`` nor ``structlog``; :mod:`asyncio` is
imported only by the ``async`` methods.
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
    from types import TracebackType
    from typing import IO, Any

    from tether.api.options import StdioPlan

__all__ = ["Tether"]


class Tether:
    """One running command, bound to this process; made by :func:`tether.launch`.

    Thread-safe: any number of threads may :meth:`wait` at once, and tasks
    may :meth:`wait_async` alongside them. Dropping the handle of a running
    command does not stop it (as with :class:`subprocess.Popen`, with the same
    ``ResourceWarning``); it keeps its descriptors (two pipes, and the
    record's directory), and is still stopped when this process exits.
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
        #: The bound a launch was let go of at (its supervisor said nothing by then).
        self._abandoned: float | None = None
        self._plan = plan
        pipes = {} if plan is None else plan.pipes
        self._encoding = None if plan is None else plan.encoding
        self._errors = None if plan is None else plan.errors
        self._stdin = self._input(pipes.get("stdin"))
        self._stdout = self._output(pipes.get("stdout"))
        self._stderr = self._output(pipes.get("stderr"))

    def _input(self, fd: int | None) -> IO[Any] | None:
        """The write end of the stdin pipe as a file object, which closes itself when dropped."""
        if fd is None:
            return None
        if self._encoding is None:
            return open(fd, "wb", buffering=0)
        return open(fd, "w", encoding=self._encoding, errors=self._errors, buffering=1)

    def _output(self, fd: int | None) -> OutputStream | None:
        if fd is None:
            return None
        return OutputStream(fd, encoding=self._encoding, errors=self._errors)

    # -- what callers see --------------------------------------------------

    @property
    def stdin(self) -> IO[Any] | None:
        """The command's stdin, writable, with ``stdin=tether.PIPE``; otherwise ``None``.

        A file object, as :attr:`subprocess.Popen.stdin` (text with
        ``text=True``); close it to give the command end of file.
        """
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
        """Hand the pipes over to ``run()``'s exchange; the streams are closed after."""
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
        started = self._started
        assert started is not None
        assert started.pid is not None
        return started.pid

    @property
    def supervisor_pid(self) -> int:
        """The pid of the detached supervisor watching the command."""
        started = self._started
        assert started is not None
        assert started.supervisor_pid is not None
        return started.supervisor_pid

    @property
    def record_path(self) -> Path | None:
        """Where the record will be written; ``None`` without one (see :attr:`no_record_reason`)."""
        path = self._spec.record_path
        return None if path is None else Path(path)

    @property
    def no_record_reason(self) -> str | None:
        """Why this run keeps no record although it was to (the default directory is unusable).

        ``None`` when it keeps one, and with ``record=False``.
        """
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
        pids = (
            f"pid={started.pid} supervisor_pid={started.supervisor_pid}"
            if started is not None
            else "pid=None supervisor_pid=None"
        )
        state = (
            "running"
            if outcome is None
            else f"{outcome.reason.value}, exit status {outcome.exit_status}"
        )
        return f"<Tether {self._name!r}{label} {pids} {state}>"

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # The default argument keeps ``warn`` reachable during interpreter shutdown.
        if getattr(self, "_outcome", True) is None and self._started is not None:
            _warn(f"{self!r} was dropped while running", ResourceWarning, source=self)

    # -- requests ----------------------------------------------------------

    def cancel(self) -> None:
        """Ask for a graceful stop: SIGTERM to the whole tree, the grace, then SIGKILL.

        Returns at once; :meth:`wait` for the outcome (reason ``CANCELLED``).
        Harmless once the run is over.
        """
        self._lifeline.cancel()

    def kill(self) -> None:
        """Ask for SIGKILL to the whole tree now. Returns at once; harmless once the run is over."""
        self._lifeline.kill()

    # -- waiting, blocking -------------------------------------------------

    def wait(self, timeout: float | str | None = None) -> Outcome:
        """Block until the run is over; return its :class:`Outcome`.

        With ``timeout`` (seconds, or a duration string such as ``"5s"``),
        raise :class:`TimeoutExpired` if it is not over by then; the command
        keeps running, as with :meth:`subprocess.Popen.wait`. ``timeout=0``
        only looks.
        """
        seconds = None if timeout is None else _wait_timeout(timeout)
        if not self._wait_blocking(self._is_over, seconds):
            assert seconds is not None
            raise TimeoutExpired(list(self._spec.argv), seconds, tether=self)
        assert self._outcome is not None
        return self._outcome

    def __enter__(self) -> Tether:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if self.outcome is None:
            self._stop_blocking()

    def _stop_blocking(self) -> Outcome:
        """Cancel and wait; if interrupted meanwhile (a second Ctrl-C), kill now and give up."""
        self.cancel()
        try:
            return self.wait()
        except BaseException:
            self.kill()
            raise

    def _wait_blocking(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``ready()``; return ``False`` if ``timeout`` seconds passed first."""
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
                # poll(), not select(): a busy caller may hold descriptors above 1024.
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                poller.poll(poll_ms(remaining))

    # -- run()'s exchange of input and output ----------------------------

    def _communicate_blocking(self, exchange: Exchange | None) -> Outcome:
        """Write the input and keep the output while the command runs; then its outcome.

        One ``poll`` over the pipes and the status channel: a command that
        fills a pipe, or waits for input, never waits on the caller.
        """
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
        """``outcome`` with the output ``run()`` kept, decoded as asked."""
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

    # -- waiting, asyncio --------------------------------------------------

    async def wait_async(self) -> Outcome:
        """Wait through the running event loop until the run is over; return its :class:`Outcome`.

        Cancelling the task that awaits this cancels the command: it gets
        SIGTERM (then SIGKILL after the grace), the task waits for the
        supervisor to report, and ``CancelledError`` is raised as usual. A
        second cancellation during that wait sends SIGKILL at once and
        stops waiting. To wait with a time limit *without* stopping the
        command, wrap it: ``asyncio.wait_for(asyncio.shield(t.wait_async()), 5)``.
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

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        if self.outcome is None:
            await self._stop_async()

    async def _stop_async(self) -> None:
        """Cancel and wait; if cancelled meanwhile, kill now and give up."""
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

    # -- the reader role ---------------------------------------------------

    def _is_launched(self) -> bool:
        return self._started is not None or self._outcome is not None

    def _is_over(self) -> bool:
        return self._outcome is not None

    def _pump(self) -> None:
        """Read what has arrived on the status pipe (only the reader role's holder calls this)."""
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
        """Give up the reader role; close the status pipe if the run is over."""
        with self._lock:
            self._reading = False
            if self._outcome is not None:
                self._status.close()
        self._notify()

    def _notify(self) -> None:
        """Wake every waiting thread and task to look again."""
        with self._lock:
            self._changed.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
                loop.call_soon_threadsafe(resolve, future)

    # -- the end of a launch -----------------------------------------------

    def _abandon_launch(self, bound: float) -> None:
        """The supervisor said nothing within ``bound`` seconds of the launch: let it go.

        The lifeline is closed (a supervisor that ever runs again stops, and
        starts nothing), whatever the command said of itself is stopped, and
        the fallback record written (:meth:`StatusClient.abandon`);
        :meth:`_launched_or_raise` then raises.
        """
        self._lifeline.release()
        finished = self._status.abandon()
        with self._lock:
            self._abandoned = bound
            if self._outcome is None:
                self._finished = finished
                self._outcome = Outcome.from_finished(finished, self._spec, self._started)
        self._notify()

    def _launched_or_raise(self) -> Tether:
        """Return self if the command started; raise :class:`LaunchError` if it never did.

        A command not found is a :class:`~tether.caller.launch_errors.CommandNotFound`
        (also a :class:`FileNotFoundError`), one not executable a
        :class:`~tether.caller.launch_errors.CommandNotExecutable` (also a
        :class:`PermissionError`), as :mod:`subprocess` raises them.
        """
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
    """``error`` as an :class:`~tether.api.outcome.OutputDecodeError` carrying ``outcome``."""
    from tether.api.outcome import OutputDecodeError

    raised = OutputDecodeError(error.encoding, error.object, error.start, error.end, error.reason)
    raised.outcome = outcome
    raised.stream = stream
    raised.stdout = outcome.stdout if isinstance(outcome.stdout, bytes) else None
    raised.stderr = outcome.stderr if isinstance(outcome.stderr, bytes) else None
    raised.__cause__ = error
    return raised

"""The Python API: ``launch``, ``run``, their ``async`` twins, ``Tether`` and ``Outcome``.

Programs that run many long commands (evaluation runners, job workers) want
:mod:`subprocess`'s shape — start, wait, stop, a result object — with the
CLI's guarantee: the command cannot outlive the program, however the program
dies. So this module is a thin client of the same machinery as ``tether
run``: :mod:`tether.caller.start` spawns a detached supervisor (the caller is
never forked, because it may have threads), the caller keeps the lifeline's
write end, and the supervisor reports on the status pipe.

**One reader, many waiters.** Several threads, and several asyncio tasks, may
wait for the same command. The status pipe has exactly one reader at a time
(the *reader role*, taken under a lock); everyone else sleeps on a condition
variable (threads) or a future (tasks) and is woken whenever the reader learns
something. A waiter whose time runs out hands the role on. Reads are
non-blocking; a thread waits for the pipe in ``poll()``, a task through its
loop's ``add_reader``: no polling, no helper threads.

**Cancellation stops the command.** Leaving a ``with`` block, an interrupted
``wait()`` and a cancelled ``wait_async()`` all ask the supervisor for a
graceful stop and then wait for it, which the supervisor bounds by the grace;
a second interruption asks for SIGKILL at once and stops waiting. This way a
cancelled task, like a killed program, leaves nothing running.

**Nothing global is touched in the caller.** No signal handlers, no logging
configuration, neither ``transitions`` nor ``structlog``; :mod:`asyncio` is
imported only by the ``async`` functions.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.api.options import (
    DEFAULT_GRACE,
    Duration,
    RecordOption,
    Stdio,
    command_words,
    environment_copy,
    record_path_for,
    seconds_of,
    stdio_descriptors,
)
from tether.caller.start import (
    LaunchError,
    Spawned,
    Started,
    StatusReader,
    release_lifeline,
    send_spec,
    spawn_supervisor,
)
from tether.core.reasons import TETHER_FAILED, Reason
from tether.shared.protocol import CANCEL, FINISHED, KILL_NOW, STARTED
from tether.api.outcome import CommandFailed, Outcome, TimeoutExpired
from tether.core.spec import RunSpec

if TYPE_CHECKING:
    import asyncio
    from types import TracebackType

__all__ = [
    "CommandFailed",
    "Duration",
    "Outcome",
    "RecordOption",
    "Stdio",
    "Tether",
    "TimeoutExpired",
    "launch",
    "launch_async",
    "run",
    "run_async",
]

# -- the handle ---------------------------------------------------------------


class Tether:
    """One running command, bound to this process; made by :func:`launch`.

    Thread-safe: any number of threads may :meth:`wait` at once, and tasks
    may :meth:`wait_async` alongside them. Dropping the handle of a running
    command does not stop it (as with :class:`subprocess.Popen`, with the same
    ``ResourceWarning``); it keeps its two pipe descriptors, and is still
    stopped when this process exits.
    """

    def __init__(self, spec: RunSpec, spawned: Spawned) -> None:
        self._spec = spec
        self._name = os.path.basename(spec.argv[0]) or spec.argv[0]
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._reading = False
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._lifeline: int | None = spawned.lifeline
        # A full lifeline (a stopped supervisor) must never block cancel().
        os.set_blocking(spawned.lifeline, False)
        self._status: StatusReader | None = StatusReader(spawned.status)
        self._supervisor_pid: int | None = None
        self._pid: int | None = None
        self._started: Started | None = None
        self._outcome: Outcome | None = None
        self._launch_errno: int | None = None

    # -- what callers see --------------------------------------------------

    @property
    def pid(self) -> int:
        """The command's pid (also its process group id)."""
        assert self._pid is not None
        return self._pid

    @property
    def supervisor_pid(self) -> int:
        """The pid of the detached supervisor watching the command."""
        assert self._supervisor_pid is not None
        return self._supervisor_pid

    @property
    def record_path(self) -> Path | None:
        """Where the record will be written, ``None`` with ``record=False``."""
        path = self._spec.record_path
        return None if path is None else Path(path)

    @property
    def label(self) -> str | None:
        """The run's label, as given to :func:`launch`."""
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
        outcome = self._outcome
        state = (
            "running"
            if outcome is None
            else f"{outcome.reason.value}, exit status {outcome.exit_status}"
        )
        return (
            f"<Tether {self._name!r}{label} pid={self._pid} "
            f"supervisor_pid={self._supervisor_pid} {state}>"
        )

    def __del__(self, _warn: Callable[..., None] = warnings.warn) -> None:
        # The default argument keeps ``warn`` reachable during interpreter shutdown.
        if self._outcome is None and self._pid is not None:
            _warn(f"{self!r} was dropped while running", ResourceWarning, source=self)

    # -- requests ----------------------------------------------------------

    def cancel(self) -> None:
        """Ask for a graceful stop: SIGTERM to the whole tree, the grace, then SIGKILL.

        Returns at once; :meth:`wait` for the outcome (reason ``CANCELLED``).
        Harmless once the run is over.
        """
        self._request(CANCEL)

    def kill(self) -> None:
        """Ask for SIGKILL to the whole tree now. Returns at once; harmless once the run is over."""
        self._request(KILL_NOW)

    def _request(self, byte: bytes) -> None:
        with self._lock:  # so the lifeline cannot be closed (and its number reused) meanwhile
            if self._lifeline is not None:
                with contextlib.suppress(OSError):
                    os.write(self._lifeline, byte)

    # -- waiting, blocking -------------------------------------------------

    def wait(self, timeout: float | None = None) -> Outcome:
        """Block until the run is over; return its :class:`Outcome`.

        With ``timeout`` (seconds), raise :class:`TimeoutExpired` if it is not
        over by then; the command keeps running. ``timeout=0`` only looks.
        """
        seconds = None if timeout is None else _wait_timeout(timeout)
        if not self._wait_blocking(self._is_over, seconds):
            assert seconds is not None
            raise TimeoutExpired(self, seconds)
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
        assert self._status is not None
        poller = select.poll()  # not select(): a busy caller may hold descriptors above 1024
        poller.register(self._status.fd, select.POLLIN)
        while True:
            self._pump()
            if ready():
                return True
            remaining = _remaining(end)
            if remaining == 0:
                return False
            poller.poll(None if remaining is None else math.ceil(remaining * 1000))

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
        status = self._status
        assert status is not None
        self._pump()
        if ready():
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

        loop.add_reader(status.fd, on_readable)
        try:
            await done
        finally:
            loop.remove_reader(status.fd)

    # -- the reader role ---------------------------------------------------

    def _is_launched(self) -> bool:
        return self._pid is not None or self._outcome is not None

    def _is_over(self) -> bool:
        return self._outcome is not None

    def _pump(self) -> None:
        """Read what has arrived on the status pipe (only the reader role's holder calls this)."""
        status = self._status
        if status is None:
            return
        messages = status.read_available()
        outcome: Outcome | None = None
        for message in messages:
            event = message.get("event")
            if event == STARTED:
                with self._lock:
                    self._started = Started.from_message(message)
                    self._supervisor_pid = self._started.supervisor_pid
                    self._pid = self._started.pid
            elif event == FINISHED and outcome is None:
                outcome = self._finished(message)
        if outcome is None and status.at_eof:
            outcome = self._lost()
        if outcome is not None:
            with self._lock:
                self._outcome = outcome
                if self._lifeline is not None:
                    release_lifeline(self._lifeline)
                    self._lifeline = None
        if messages or outcome is not None:
            self._notify()

    def _release(self) -> None:
        """Give up the reader role; close the status pipe if the run is over."""
        with self._lock:
            self._reading = False
            if self._outcome is not None and self._status is not None:
                self._status.close()
                self._status = None
        self._notify()

    def _notify(self) -> None:
        """Wake every waiting thread and task to look again."""
        with self._lock:
            self._changed.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits there
                loop.call_soon_threadsafe(_resolve, future)

    def _finished(self, message: dict[str, object]) -> Outcome:
        record = message.get("record")
        record_path = Path(record) if isinstance(record, str) else None
        if message.get("reason") == Reason.LAUNCH_FAILED.value:
            self._launch_errno = _int(message.get("errno"))
        started_at, finished_at, elapsed = _times(message)
        reason = message.get("reason")
        exit_status = message.get("exit_status")
        text = message.get("message")
        return Outcome(
            reason=Reason(reason) if isinstance(reason, str) else Reason.SUPERVISOR_LOST,
            exit_status=exit_status if isinstance(exit_status, int) else TETHER_FAILED,
            returncode=_int(message.get("returncode")),
            escalated_to_sigkill=message.get("escalated_to_sigkill") is True,
            record_path=record_path,
            message=text if isinstance(text, str) and text else None,
            label=self._spec.label,
            pid=self._pid,
            supervisor_pid=self._supervisor_pid,
            started_at=started_at,
            finished_at=finished_at,
            elapsed_seconds=elapsed,
            argv=self._spec.argv,
        )

    def _lost(self) -> Outcome:
        """The status pipe ended without ``finished``: stop the group, write the fallback record."""
        from tether.caller.fallback import LOST_MESSAGE, after_supervisor_lost

        written = after_supervisor_lost(self._spec, self._started)
        expected = self.record_path
        record_path = written or (expected if expected and os.path.lexists(expected) else None)
        elapsed = time.monotonic() - self._spec.asked_at
        finished_at = datetime.now(UTC)
        started_at = finished_at - timedelta(seconds=elapsed)
        return Outcome(
            reason=Reason.SUPERVISOR_LOST,
            exit_status=TETHER_FAILED,
            returncode=None,
            escalated_to_sigkill=False,
            record_path=record_path,
            message=LOST_MESSAGE,
            label=self._spec.label,
            pid=self._pid,
            supervisor_pid=self._supervisor_pid,
            started_at=started_at,
            finished_at=finished_at,
            elapsed_seconds=elapsed,
            argv=self._spec.argv,
        )

    # -- the end of a launch -----------------------------------------------

    def _launched_or_raise(self) -> Tether:
        """Return self if the command started; raise :class:`LaunchError` if it never did."""
        if self._pid is not None:
            return self
        outcome = self._outcome
        assert outcome is not None
        if outcome.reason is Reason.LAUNCH_FAILED:
            raise LaunchError(
                outcome.message or f"cannot run {self._name!r}",
                errno=self._launch_errno,
                exit_status=outcome.exit_status,
                record_path=outcome.record_path,
            )
        raise LaunchError(
            "the supervisor exited before starting the command",
            exit_status=outcome.exit_status,
            record_path=outcome.record_path,
        )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _remaining(end: float | None) -> float | None:
    return None if end is None else max(0.0, end - time.monotonic())


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _wait_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not timeout >= 0 or math.isinf(timeout):
        raise ValueError(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
    return float(timeout)


def _times(message: Mapping[str, object]) -> tuple[datetime | None, datetime | None, float | None]:
    """The run's start, end and length, as the supervisor's ``finished`` line gives them."""
    elapsed = message.get("elapsed_seconds")
    return (
        _moment(message.get("started_at")),
        _moment(message.get("finished_at")),
        float(elapsed) if isinstance(elapsed, int | float) else None,
    )


def _moment(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Request:
    """A launch, checked and ready: the spec and the command's standard streams."""

    spec: RunSpec
    stdio: list[int | None]
    opened: list[int]

    @classmethod
    def build(
        cls,
        argv: Sequence[str | os.PathLike[str]],
        *,
        deadline: Duration | None,
        grace: Duration,
        record: RecordOption,
        label: str | None,
        cwd: str | os.PathLike[str] | None,
        env: Mapping[str, str] | None,
        stdin: Stdio,
        stdout: Stdio,
        stderr: Stdio,
    ) -> _Request:
        """Check every argument before anything is started; raise if one is wrong."""
        asked_at = time.monotonic()
        words = command_words(argv)
        deadline_seconds = 0.0 if deadline is None else seconds_of(deadline, name="deadline")
        grace_seconds = seconds_of(grace, name="grace")
        if label is not None and not isinstance(label, str):
            raise TypeError(f"label must be a string or None, not {label!r}")
        environment = environment_copy(env)
        directory = None if cwd is None else os.fspath(cwd)
        record_path = record_path_for(record)
        spec = RunSpec(
            argv=words,
            deadline_seconds=deadline_seconds,
            grace_seconds=grace_seconds,
            asked_at=asked_at,
            record_path=record_path,
            label=label,
            cwd=directory,
            env=environment,
        )
        stdio, opened = stdio_descriptors(stdin, stdout, stderr)
        return cls(spec=spec, stdio=stdio, opened=opened)

    def spawn(self) -> tuple[Tether, Spawned]:
        """Spawn the supervisor; return the handle (not launched yet) and the spawn."""
        try:
            stdin, stdout, stderr = self.stdio
            spawned = spawn_supervisor(self.spec, stdin=stdin, stdout=stdout, stderr=stderr)
        finally:
            for fd in self.opened:  # the supervisor has its own copies now
                os.close(fd)
        return Tether(self.spec, spawned), spawned


# -- the public functions -----------------------------------------------------


def launch(
    argv: Sequence[str | os.PathLike[str]],
    *,
    deadline: Duration | None = None,
    grace: Duration = DEFAULT_GRACE,
    record: RecordOption = None,
    label: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stdio = None,
    stdout: Stdio = None,
    stderr: Stdio = None,
) -> Tether:
    """Start ``argv`` under a tether; return once it is running.

    The command is stopped, with its whole process tree, when ``deadline``
    passes (``None`` or ``0``: never), when you :meth:`~Tether.cancel` or
    :meth:`~Tether.kill` it, or when this process dies, however it dies.
    Stopping means SIGTERM, then SIGKILL after ``grace``. Durations are
    seconds, :class:`~datetime.timedelta` or CLI strings (``"5m"``).

    Raises :class:`ValueError` or :class:`TypeError` for a bad argument and
    :class:`LaunchError` (with ``errno``) if the command cannot be started;
    in both cases nothing is left running. See ``docs/api.md``.
    """
    request = _Request.build(
        argv,
        deadline=deadline,
        grace=grace,
        record=record,
        label=label,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )
    tether, spawned = request.spawn()
    try:
        try:
            send_spec(spawned)
            tether._wait_blocking(tether._is_launched, None)
        except BaseException:
            tether._stop_blocking()
            raise
    finally:
        spawned.intermediate.wait()
    return tether._launched_or_raise()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    deadline: Duration | None = None,
    grace: Duration = DEFAULT_GRACE,
    record: RecordOption = None,
    label: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stdio = None,
    stdout: Stdio = None,
    stderr: Stdio = None,
    check: bool = False,
) -> Outcome:
    """Run ``argv`` to its end under a tether; return the :class:`Outcome` (``subprocess.run``).

    Takes :func:`launch`'s arguments. With ``check=True``, raise
    :class:`CommandFailed` unless the outcome is :attr:`~Outcome.ok`. An
    exception while waiting (Ctrl-C) cancels the command before it propagates.
    """
    with launch(
        argv,
        deadline=deadline,
        grace=grace,
        record=record,
        label=label,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    ) as tether:
        outcome = tether.wait()
    return outcome.check() if check else outcome


async def launch_async(
    argv: Sequence[str | os.PathLike[str]],
    *,
    deadline: Duration | None = None,
    grace: Duration = DEFAULT_GRACE,
    record: RecordOption = None,
    label: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stdio = None,
    stdout: Stdio = None,
    stderr: Stdio = None,
) -> Tether:
    """:func:`launch`, for asyncio: the wait for the supervisor goes through the event loop.

    Only the spawn itself (a ``vfork`` and ``exec``, well under a millisecond)
    runs on the loop, as in :func:`asyncio.create_subprocess_exec`; the spec is
    written and the status pipe read with ``add_writer``/``add_reader``. If the
    task is cancelled meanwhile, the command is cancelled and waited for before
    ``CancelledError`` propagates, as in :meth:`Tether.wait_async`.
    """
    import asyncio

    request = _Request.build(
        argv,
        deadline=deadline,
        grace=grace,
        record=record,
        label=label,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )
    loop = asyncio.get_running_loop()
    tether, spawned = request.spawn()
    try:
        try:
            await _send_spec_async(loop, spawned)
            await tether._wait_async(tether._is_launched)
        except asyncio.CancelledError:
            await tether._stop_async()
            raise
    finally:
        await _reap_async(loop, spawned.intermediate)
    return tether._launched_or_raise()


async def run_async(
    argv: Sequence[str | os.PathLike[str]],
    *,
    deadline: Duration | None = None,
    grace: Duration = DEFAULT_GRACE,
    record: RecordOption = None,
    label: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Stdio = None,
    stdout: Stdio = None,
    stderr: Stdio = None,
    check: bool = False,
) -> Outcome:
    """:func:`run`, for asyncio; cancelling the task cancels the command (see ``wait_async``)."""
    tether = await launch_async(
        argv,
        deadline=deadline,
        grace=grace,
        record=record,
        label=label,
        cwd=cwd,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
    )
    outcome = await tether.wait_async()
    return outcome.check() if check else outcome


async def _send_spec_async(loop: asyncio.AbstractEventLoop, spawned: Spawned) -> None:
    """Write the spec without blocking the loop (it fits the pipe at once unless it is huge)."""
    fd, data = spawned.spec_fd, memoryview(spawned.spec_data)
    os.set_blocking(fd, False)
    try:
        while data:
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:
                writable: asyncio.Future[None] = loop.create_future()
                loop.add_writer(fd, _resolve, writable)
                try:
                    await writable
                finally:
                    loop.remove_writer(fd)
    except OSError:
        pass  # the supervisor died before reading: seen as a status pipe without "started"
    finally:
        os.close(fd)


async def _reap_async(loop: asyncio.AbstractEventLoop, intermediate: Any) -> None:
    """Reap the intermediate (gone within milliseconds of the spawn) through a pidfd."""
    if intermediate.poll() is not None:
        return
    try:
        pidfd = os.pidfd_open(intermediate.pid)
    except OSError:
        intermediate.wait()
        return
    try:
        exited: asyncio.Future[None] = loop.create_future()
        loop.add_reader(pidfd, _resolve, exited)
        try:
            await exited
        finally:
            loop.remove_reader(pidfd)
    finally:
        os.close(pidfd)
    intermediate.wait()

"""The Python API, asyncio side: launching and waiting through the event loop.

Each test runs its own event loop (``asyncio.run``), launches real fixtures,
and checks outcomes, ``/proc`` and, for the claim that waiting needs no
threads, ``threading.active_count()``. Blocking reads of the test's FIFO are
done in a thread (``asyncio.to_thread``) so that the loop under test keeps
running meanwhile.
"""

from __future__ import annotations

import asyncio
import errno
import subprocess
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import TypeVar

import pytest

import tether
from conftest import BOUND, Processes, ReadyPipe, alive, fixture, read_json, wait_gone
from tether import LaunchError, Outcome, Reason, Tether

T = TypeVar("T")


def run(coroutine: Coroutine[object, object, T]) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(2 * BOUND):
            return await coroutine

    return asyncio.run(bounded())


def track(processes: Processes, handle: Tether) -> Tether:
    processes.track(handle.pid, handle.supervisor_pid)
    return handle


def sleeper(ready: ReadyPipe, *options: str) -> list[str]:
    return fixture("sleeper", str(ready.path), *options)


async def ready_pids(ready: ReadyPipe) -> list[int]:
    return await asyncio.to_thread(ready.ready_pids)


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def test_launch_and_wait_through_the_loop(tmp_path: Path) -> None:
    record = tmp_path / "r.json"

    async def main() -> tuple[Outcome, int, int]:
        threads = threading.active_count()
        handle = await tether.launch_async(fixture("exit_with", "5"), record=record)
        outcome = await handle.wait_async()
        return outcome, threads, threading.active_count()

    outcome, before, after = run(main())
    assert outcome.reason is Reason.COMPLETED
    assert outcome.returncode == 5
    assert read_json(record)["reason"] == "completed"
    assert before == after  # no helper thread was started for launching or waiting


def test_run_async_with_a_deadline() -> None:
    outcome = run(tether.run_async(["sleep", "5"], deadline=0.2, grace=5, record=False))
    assert outcome.reason is Reason.DEADLINE_EXCEEDED
    assert outcome.exit_status == 124


def test_run_async_check() -> None:
    with pytest.raises(tether.CommandFailed):
        run(tether.run_async(["false"], record=False, check=True))


def test_launch_async_error_has_the_errno(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    with pytest.raises(LaunchError) as caught:
        run(tether.launch_async(["/nonexistent/tether-test"], record=record))
    assert caught.value.errno == errno.ENOENT
    assert caught.value.exit_status == 127
    assert read_json(record)["reason"] == "launch_failed"


def test_launch_async_refuses_bad_durations_before_starting(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with pytest.raises(ValueError, match="grace"):
        run(tether.launch_async(["touch", str(marker)], grace=float("nan"), record=False))
    assert not marker.exists()


def test_cancelling_the_waiting_task_cancels_the_command(
    tmp_path: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = tmp_path / "r.json"

    async def main() -> Tether:
        handle = track(processes, await tether.launch_async(sleeper(ready), record=record))
        await ready_pids(ready)
        task = asyncio.create_task(handle.wait_async())
        await asyncio.sleep(0)  # the task is waiting now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # By the time the cancellation has gone through, the command is stopped.
        assert handle.outcome is not None
        assert not alive(handle.pid)
        return handle

    handle = run(main())
    outcome = handle.outcome
    assert outcome is not None
    assert outcome.reason is Reason.CANCELLED
    assert outcome.escalated_to_sigkill is False
    assert read_json(record)["reason"] == "cancelled"


def test_a_second_cancellation_kills_at_once(processes: Processes, ready: ReadyPipe) -> None:
    async def main() -> Tether:
        handle = await tether.launch_async(sleeper(ready, "--note-term"), grace=60, record=False)
        track(processes, handle)
        (pid,) = await ready_pids(ready)
        task = asyncio.create_task(handle.wait_async())
        await asyncio.sleep(0)
        task.cancel()
        # The command got SIGTERM (and ignores it); the task waits out the grace...
        assert await asyncio.to_thread(ready.line) == ["term", str(pid)]
        assert not task.done()
        task.cancel()  # ...unless cancelled again: SIGKILL now, and stop waiting
        with pytest.raises(asyncio.CancelledError):
            await task
        return handle

    handle = run(main())
    outcome = handle.wait(timeout=BOUND)
    assert outcome.reason is Reason.CANCELLED
    assert outcome.escalated_to_sigkill is True


def test_a_timeout_around_the_wait_cancels_the_command(
    processes: Processes, ready: ReadyPipe
) -> None:
    async def main() -> Tether:
        handle = track(processes, await tether.launch_async(sleeper(ready), record=False))
        await ready_pids(ready)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await handle.wait_async()
        return handle

    handle = run(main())
    assert handle.outcome is not None
    assert handle.outcome.reason is Reason.CANCELLED
    assert not alive(handle.pid)


def test_shield_waits_with_a_limit_without_cancelling(
    processes: Processes, ready: ReadyPipe
) -> None:
    async def main() -> Tether:
        handle = track(processes, await tether.launch_async(sleeper(ready), record=False))
        await ready_pids(ready)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(handle.wait_async()), 0.2)
        assert alive(handle.pid)
        assert handle.outcome is None
        handle.kill()
        await handle.wait_async()
        return handle

    assert run(main()).outcome is not None


def test_async_with_cancels_on_exit(processes: Processes, ready: ReadyPipe) -> None:
    async def main() -> tuple[Tether, list[int]]:
        async with await tether.launch_async(
            sleeper(ready, "--children", "1"), record=False
        ) as handle:
            track(processes, handle)
            pids = await ready_pids(ready)
            processes.track(*pids)
        return handle, pids

    handle, pids = run(main())
    assert handle.outcome is not None
    assert handle.outcome.reason is Reason.CANCELLED
    assert not any(alive(pid) for pid in pids)


def test_cancelling_a_task_during_launch_leaves_nothing_running(
    processes: Processes, ready: ReadyPipe
) -> None:
    async def main() -> None:
        task = asyncio.create_task(tether.launch_async(sleeper(ready), record=False))
        # Cancel once the command announces itself: the launch may still be in flight.
        (pid,) = await ready_pids(ready)
        processes.track(pid)
        task.cancel()
        try:
            handle = await task
        except asyncio.CancelledError:
            assert wait_gone(pid)
            return
        # The launch had finished first: then it is an ordinary running command.
        track(processes, handle)
        assert alive(pid)
        handle.kill()
        await handle.wait_async()

    run(main())


def test_many_tasks_and_a_thread_wait_for_one_command(
    processes: Processes, ready: ReadyPipe
) -> None:
    async def main() -> list[Outcome]:
        handle = track(processes, await tether.launch_async(sleeper(ready), record=False))
        await ready_pids(ready)
        in_thread = asyncio.create_task(asyncio.to_thread(handle.wait, BOUND))
        waiters = [asyncio.create_task(handle.wait_async()) for _ in range(5)]
        await asyncio.sleep(0)
        handle.cancel()
        return [*await asyncio.gather(*waiters), await in_thread]

    outcomes = run(main())
    assert len(outcomes) == 6
    assert all(o is outcomes[0] for o in outcomes)
    assert outcomes[0].reason is Reason.CANCELLED


def test_fifty_tasks_with_a_concurrency_limit(tmp_path: Path) -> None:
    async def main() -> tuple[list[Outcome], int]:
        limit = asyncio.Semaphore(10)
        most = 0
        running = 0

        async def one(index: int) -> Outcome:
            nonlocal most, running
            async with limit:
                running += 1
                most = max(most, running)
                try:
                    return await tether.run_async(["true"], record=tmp_path / f"{index}.json")
                finally:
                    running -= 1

        threads = threading.active_count()
        outcomes = await asyncio.gather(*(one(i) for i in range(50)))
        assert threading.active_count() == threads
        return list(outcomes), most

    outcomes, most = run(main())
    assert most == 10
    assert {o.reason for o in outcomes} == {Reason.COMPLETED}
    assert len(list(tmp_path.glob("*.json"))) == 50


def test_async_use_touches_nothing_global() -> None:
    script = (
        "import asyncio, logging, signal, sys, tether\n"
        "before = {s: signal.getsignal(s) for s in signal.valid_signals()}\n"
        "async def main():\n"
        "    async with await tether.launch_async(['sleep', '5'], record=False):\n"
        "        pass\n"
        "    await tether.run_async(['true'], record=False)\n"
        "asyncio.run(main())\n"
        "assert before == {s: signal.getsignal(s) for s in signal.valid_signals()}\n"
        "assert signal.set_wakeup_fd(-1) == -1\n"
        "assert logging.getLogger().handlers == []\n"
        "print(sorted(m for m in ('transitions', 'structlog') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND, check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_sync_caller_never_imports_asyncio() -> None:
    script = (
        "import sys, tether\ntether.run(['true'], record=False)\nprint('asyncio' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=BOUND, check=True
    )
    assert result.stdout.strip() == "False"

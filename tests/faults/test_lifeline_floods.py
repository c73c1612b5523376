"""What arrives on a lifeline stays cheap: junk and floods of requests, with real processes.

* **The seed door's pipe is as quiet as the seed's.** A mebibyte of bytes
  other than ``c`` and ``k`` (a buggy worker writing to the wrong descriptor)
  is junk there, whatever its values: counted, never acted on, and end of
  file stops the command at once.
* **A flood of valid requests** (a million ``z``/``r`` pairs), at the seed
  door that asked for the whole vocabulary and on tether's own lifeline,
  costs the log a bounded number of lines and never starves the loop.
"""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Callable
from pathlib import Path

from test_supervisor_faults import SeedRun, seed  # noqa: F401 - the fixture

import tether
from conftest import BOUND, Processes, ReadyPipe, fixture, read_json

#: No event log grows by more lines than this, whatever came on the lifeline.
LOG_LINES = 200

#: A mebibyte of every byte value but ``c`` and ``k``: junk at the seed door.
JUNK = bytes(byte for byte in range(256) if byte not in b"ck") * ((1 << 20) // 254 + 1)

#: A million valid requests, alternating: stop the tree, continue it.
PAIRS = b"zr" * 1_000_000


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` exits within ``seconds``, waited for on its pidfd (never by sleeping)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([pidfd], [], [], seconds)[0])
    finally:
        os.close(pidfd)


def assert_log_bounded(events: Path) -> list[str]:
    lines = events.read_text().splitlines()
    assert len(lines) < LOG_LINES, len(lines)
    return lines


def flooded_then_let_go(
    start: Callable[..., SeedRun], ready: ReadyPipe, processes: Processes, data: bytes, *flags: str
) -> list[str]:
    """A sleeper at the seed door, ``data`` on its pipe, then end of file: the log's lines.

    The command must be gone at once (its pidfd, bounded), the run end
    ``parent_lost``, and the log stay short.
    """
    run = start(fixture("sleeper", str(ready.path)), flags=flags)
    (pid,) = ready.ready_pids()
    processes.track(pid)
    run.write(data)
    run.close_lifeline()
    assert gone_within(pid, BOUND)
    assert run.supervisor.wait(timeout=BOUND) == 130
    assert read_json(run.record)["reason"] == "parent_lost"
    return assert_log_bounded(run.events)


def test_a_mebibyte_of_any_junk_at_the_seed_door_is_counted_and_end_of_file_acted_on(
    seed: Callable[..., SeedRun],  # noqa: F811
    ready: ReadyPipe,
    processes: Processes,
) -> None:
    lines = flooded_then_let_go(seed, ready, processes, JUNK)
    assert '"lifeline_request"' not in "".join(lines)
    assert any(f'"unknown_bytes": {len(JUNK)}' in line for line in lines)


def test_a_million_job_control_requests_at_a_seed_door_that_asked_for_them(
    seed: Callable[..., SeedRun],  # noqa: F811
    ready: ReadyPipe,
    processes: Processes,
) -> None:
    flooded_then_let_go(seed, ready, processes, PAIRS, "--all-lifeline-requests")


def test_the_seed_door_honours_job_control_only_when_asked(
    seed: Callable[..., SeedRun],  # noqa: F811
    ready: ReadyPipe,
    processes: Processes,
) -> None:
    run = seed(fixture("sleeper", str(ready.path)), flags=("--all-lifeline-requests",))
    (pid,) = ready.ready_pids()
    processes.track(pid)
    run.write(b"t")  # time is up now: the deadline, at once
    assert gone_within(pid, BOUND)
    assert run.supervisor.wait(timeout=BOUND) == 124


def test_a_million_job_control_requests_on_tethers_own_lifeline(tmp_path: Path) -> None:
    record = tmp_path / "run.json"
    handle = tether.launch(["sleep", "600"], record=record, grace=0.2)
    try:
        assert handle.pid is not None
        # The test plays a caller that floods its own lifeline, blocking as it writes.
        flood = socket.socket(fileno=os.dup(handle._lifeline._fd))  # type: ignore[arg-type]
        try:
            flood.setblocking(True)
            flood.sendall(PAIRS)
        finally:
            flood.close()
        handle._lifeline.release()
        assert gone_within(handle.pid, BOUND)
        outcome = handle.wait(timeout=BOUND)
    finally:
        handle.kill()
    assert outcome.reason == "parent_lost"
    assert_log_bounded(record.with_name("run.events.jsonl"))

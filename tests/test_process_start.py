"""A program's deadline counts from when its process started (``/proc/self/stat``), never early.

The conversion is pure arithmetic, tested on made-up readings; one real
``tether run`` shows the origin it keeps (the event log's ``started_mono``)
lies between the moment before it was spawned and the end of the clock tick
in which the kernel says it started: never before it existed, never later
than a tick after.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BOUND, EVENTS_SUFFIX, tether_argv
from tether.shared.process_start import LONGEST_START, process_started_at, started_from_stat

# A name with spaces and a parenthesis, as a process may choose; field 22 is 12345.
_STAT = "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 100 1 ..."


def test_the_start_is_rounded_up_to_the_end_of_its_tick() -> None:
    # Started in tick 12345 (of 100 a second): by 123.46 s on the boot clock at the latest.
    started = started_from_stat(_STAT, ticks_per_second=100, boot_now=200.0, mono_now=150.0)
    assert started == pytest.approx(150.0 - (200.0 - 123.46))


def test_the_boot_clock_and_the_monotonic_clock_may_differ_by_a_suspend() -> None:
    started = started_from_stat(_STAT, ticks_per_second=100, boot_now=3600.0, mono_now=10.0)
    assert started == pytest.approx(10.0 - (3600.0 - 123.46))


def test_a_start_long_before_the_import_is_not_trusted() -> None:
    # This test's interpreter started long before now: a fork long before the exec, say.
    now = time.monotonic()
    assert process_started_at(now + 10 * LONGEST_START) == now + 10 * LONGEST_START


def test_never_later_than_the_import() -> None:
    loaded_at = time.monotonic() - 3600  # a reading from before the process started
    assert process_started_at(loaded_at) == loaded_at


def _start_tick_end(pid: int) -> float:
    """The monotonic end of the tick in which ``pid`` started, as this process reads it."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return started_from_stat(
        stat,
        ticks_per_second=os.sysconf("SC_CLK_TCK"),
        boot_now=time.clock_gettime(time.CLOCK_BOOTTIME),
        mono_now=time.monotonic(),
    )


def test_tether_run_counts_its_deadline_from_its_process_start(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    before = time.monotonic()
    caller = subprocess.Popen(
        tether_argv("run", "--record", str(record), "--deadline", "60", "--", "cat", str(fifo))
    )
    try:
        tick_end = _start_tick_end(caller.pid)
        with open(fifo, "w"):  # the command opened it: it runs, and ends at once
            running = time.monotonic()
        assert caller.wait(timeout=BOUND) == 0
    finally:
        caller.kill()
        caller.wait(timeout=BOUND)
    launched = json.loads(record.with_suffix(EVENTS_SUFFIX).read_text().splitlines()[0])
    assert before <= launched["started_mono"]  # never before the process existed
    if running - before <= LONGEST_START:  # (else so busy a machine that the import counts)
        assert launched["started_mono"] <= tick_end + 2e-3  # a clock reading's worth of slack
    assert launched["started_mono"] < launched["mono"]

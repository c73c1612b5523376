"""``tether prune`` never touches a run in progress, even one whose ``--record`` reuses an old
record's name (its live event log survives); once the run is over, it is prune's.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from conftest import BOUND, Processes, ReadyPipe, fixture, read_json, tether_argv
from tether.shared.paths import events_path_for, new_record_name

_IN_MODIFY = 0x002
_IN_CREATE = 0x100


def wait_for_write(directory: Path, name: str, after: Callable[[], object]) -> None:
    """Run ``after``, then wait (inotify, bounded) until ``name`` in ``directory`` is created
    anew and written to: the event, not a sleep."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
    assert watch >= 0
    try:
        assert libc.inotify_add_watch(watch, os.fsencode(directory), _IN_CREATE | _IN_MODIFY) >= 0
        after()
        created = False
        while True:
            assert select.select([watch], [], [], BOUND)[0], f"{name} never written"
            data = os.read(watch, 65536)
            while data:
                _wd, mask, _cookie, size = struct.unpack_from("iIII", data)
                event_name = data[16 : 16 + size].rstrip(b"\0").decode()
                data = data[16 + size :]
                if event_name == name:
                    created = created or bool(mask & _IN_CREATE)
                    if created and mask & _IN_MODIFY:
                        return
    finally:
        os.close(watch)


def test_prune_leaves_a_run_in_progress_alone_whatever_its_records_name(
    tmp_path: Path, ready: ReadyPipe, processes: Processes
) -> None:
    runs = tmp_path / "runs"
    record = runs / new_record_name()  # a name as tether gives them (prune's to judge)
    first = subprocess.run(
        tether_argv("run", "--record", str(record), "--", "true"), timeout=BOUND, check=False
    )
    assert first.returncode == 0
    old = read_json(record)
    # Tonight's run reuses the name: last night's record is still there, its log is tonight's.
    argv = tether_argv("run", "--record", str(record), "--", *fixture("sleeper", str(ready.path)))
    started: list[subprocess.Popen[bytes]] = []
    log = events_path_for(record)
    wait_for_write(runs, log.name, lambda: started.append(processes.start(argv)))
    (caller,) = started
    (pid,) = ready.ready_pids()
    processes.track(pid)
    live = log.stat().st_ino
    pruned = subprocess.run(
        tether_argv("prune", "--keep", "0", str(runs)),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert pruned.returncode == 0, pruned.stderr
    assert log.stat().st_ino == live
    assert read_json(record) == old
    caller.send_signal(signal.SIGTERM)
    assert caller.wait(timeout=BOUND) == 130
    assert read_json(record)["reason"] == "cancelled"
    timeline = log.read_text()
    assert str(read_json(record)["supervisor_pid"]) in timeline  # tonight's story, whole
    assert "cancelled" in timeline
    # Once it is over, the run is prune's like any other.
    subprocess.run(tether_argv("prune", "--keep", "0", str(runs)), timeout=BOUND, check=True)
    assert not record.exists()
    assert not log.exists()

"""Processes for the benchmark: a registry that kills by pidfd, a FIFO of announcements, /proc.

Every process the benchmark starts or learns about (a caller, a supervisor
named by its command's parent pid, a command) is put in a :class:`Registry`
with a pidfd opened at once. Cleaning up signals through those pidfds, so a
pid reused after the process exited is never hit, and it runs in a
``finally`` block, so an interrupted run (Ctrl-C, SIGTERM) leaves nothing
behind either.

The commands announce themselves on one FIFO (:class:`Channel`); the
benchmark never sleeps to let something happen, it waits for the line or for
a pidfd to become readable (:class:`Waiter`), and stamps that moment with
``time.monotonic()``.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Channel",
    "Message",
    "Registry",
    "Waiter",
    "cpu_ns",
    "cpu_ticks",
    "exited",
    "memory_kib",
    "prompt",
    "settle",
    "status_fields",
]


class Registry:
    """Every process the benchmark knows of, by pidfd, to kill whatever is left."""

    def __init__(self) -> None:
        self._pidfds: dict[int, int] = {}
        self._popens: list[subprocess.Popen[bytes]] = []

    def track(self, pid: int) -> int | None:
        """Remember ``pid``; return a pidfd on it (``None`` if it is already gone)."""
        if pid in self._pidfds:
            return self._pidfds[pid]
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return None
        self._pidfds[pid] = pidfd
        return pidfd

    def start(self, argv: list[str], **options: object) -> subprocess.Popen[bytes]:
        """Start ``argv`` (stdio to ``/dev/null`` unless given) and track it."""
        for stream in ("stdin", "stdout", "stderr"):
            options.setdefault(stream, subprocess.DEVNULL)
        popen: subprocess.Popen[bytes] = subprocess.Popen(argv, **options)  # type: ignore[call-overload]
        self._popens.append(popen)
        self.track(popen.pid)
        return popen

    def pidfd(self, pid: int) -> int | None:
        """The pidfd held on ``pid``, if it is tracked."""
        return self._pidfds.get(pid)

    def alive(self) -> list[int]:
        """The tracked pids that have not exited."""
        return [pid for pid, pidfd in self._pidfds.items() if not exited(pidfd)]

    def cleanup(self) -> list[int]:
        """SIGKILL every tracked process still running, reap our children; return the killed."""
        killed = []
        for pid, pidfd in self._pidfds.items():
            if not exited(pidfd):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    killed.append(pid)
        for popen in self._popens:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=10)
        for pidfd in self._pidfds.values():
            os.close(pidfd)
        self._pidfds.clear()
        self._popens.clear()
        return killed


def exited(pidfd: int) -> bool:
    """Whether the process behind ``pidfd`` has exited (a zombie has)."""
    return bool(select.select([pidfd], [], [], 0)[0])


@dataclass(frozen=True, slots=True)
class Message:
    """One line a command wrote: ``ready`` or ``term``, its token, and what it said."""

    kind: str
    token: str
    pid: int
    ppid: int
    stamp: float
    seen: float


class Channel:
    """The FIFO every command announces itself on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path, 0o600)
        # Held open for writing too, so the FIFO never reports end of file
        # between writers and a writer's open() never blocks.
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self._buffer = b""
        self.messages: list[Message] = []

    def pump(self) -> None:
        """Read what is there and parse every whole line."""
        seen = time.monotonic()
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.fd, 65536):
                self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            words = line.decode().split()
            if words[0] == "ready":
                _, token, pid, ppid, stamp = words
                self.messages.append(
                    Message("ready", token, int(pid), int(ppid), float(stamp), seen)
                )
            elif words[0] == "term":
                _, token, pid, stamp = words
                self.messages.append(Message("term", token, int(pid), 0, float(stamp), seen))

    def find(self, kind: str, token: str) -> Message | None:
        """The first message of ``kind`` with ``token``, if it arrived."""
        for message in self.messages:
            if message.kind == kind and message.token == token:
                return message
        return None

    def count(self, kind: str, tokens: set[str]) -> int:
        """How many of ``tokens`` sent a ``kind`` message."""
        return len({m.token for m in self.messages if m.kind == kind and m.token in tokens})

    def forget(self, tokens: set[str]) -> None:
        """Drop the messages of finished trials."""
        self.messages = [m for m in self.messages if m.token not in tokens]

    def close(self) -> None:
        os.close(self.fd)
        with contextlib.suppress(OSError):
            self.path.unlink()


class Waiter:
    """Waits for lines on the channel and for processes to exit, stamping each exit."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.gone: dict[str, float] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(channel.fd, selectors.EVENT_READ, None)

    def watch(self, name: str, pidfd: int | None) -> None:
        """Stamp the moment the process behind ``pidfd`` exits, under ``name``."""
        if pidfd is None:
            self.gone[name] = time.monotonic()
            return
        self._selector.register(pidfd, selectors.EVENT_READ, name)

    def until(self, done: Callable[[], bool], bound: float) -> bool:
        """Handle readiness until ``done()``; return ``False`` if ``bound`` seconds pass first."""
        end = time.monotonic() + bound
        self.channel.pump()
        while not done():
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            for key, _ in self._selector.select(remaining):
                if key.data is None:
                    self.channel.pump()
                else:
                    self.gone[key.data] = time.monotonic()
                    self._selector.unregister(key.fd)
        return True

    def close(self) -> None:
        self._selector.close()


# -- /proc ----------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` in clock ticks, from ``/proc/PID/stat``."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def cpu_ns(pid: int) -> int | None:
    """Time ``pid`` spent on a CPU, in nanoseconds, from ``/proc/PID/schedstat``."""
    raw = _read(f"/proc/{pid}/schedstat")
    return None if raw is None else int(raw.split()[0])


def status_fields(pid: int) -> dict[str, int]:
    """The numeric fields of ``/proc/PID/status`` (sizes in KiB), empty if it is gone."""
    raw = _read(f"/proc/{pid}/status")
    fields: dict[str, int] = {}
    for line in (raw or "").splitlines():
        name, _, value = line.partition(":")
        words = value.split()
        if words and words[0].isdigit():
            fields[name] = int(words[0])
    return fields


def memory_kib(pid: int) -> dict[str, int]:
    """Peak and current RSS from ``status``, and PSS from ``smaps_rollup``, in KiB."""
    status = status_fields(pid)
    memory: dict[str, int] = {
        name: status[name] for name in ("VmHWM", "VmRSS", "RssAnon", "RssFile") if name in status
    }
    for line in (_read(f"/proc/{pid}/smaps_rollup") or "").splitlines()[1:]:
        name, _, value = line.partition(":")
        if name in ("Pss", "Pss_Anon", "Pss_File"):
            memory[name] = int(value.split()[0])
    return memory


@contextlib.contextmanager
def prompt() -> Iterator[bool]:
    """Run the benchmark under ``SCHED_FIFO`` inside the block, if allowed; yield whether it does.

    When hundreds of supervisors wake at once, the benchmark would otherwise
    wait its turn for a CPU behind them, and stamp what it sees late: the
    measure would be the benchmark's own queueing. Real-time priority lets it
    run as soon as a pidfd wakes it. It only ever blocks in ``select()``, so it
    takes no CPU from the processes it watches except to stamp, and the policy
    is restored on the way out (children started before are not affected).
    """
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, before[0], before[1])


def settle(pids: list[int], *, quiet: float = 0.3, bound: float = 60.0) -> bool:
    """Wait until ``pids`` together use no CPU for ``quiet`` seconds; ``False`` after ``bound``.

    A supervisor keeps importing and opening its event log after its command
    announced itself; idle and memory are measured once it has gone to sleep.
    This samples on purpose: it is the benchmark watching, not tether waiting.
    """
    end = time.monotonic() + bound
    last = sum(cpu_ns(pid) or 0 for pid in pids)
    while time.monotonic() < end:
        time.sleep(quiet)
        now = sum(cpu_ns(pid) or 0 for pid in pids)
        if now == last:
            return True
        last = now
    return False

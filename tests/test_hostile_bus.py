"""A hostile user bus: the scope request reads every byte as untrusted, and ends on the clock.

The bus here is a stand-in on a Unix socket, served by a thread of the test:
it authenticates the client as a bus daemon would, then answers as the case
says (garbage, a reply nested 20,000 variants deep, a stream of other jobs'
``JobRemoved`` signals). Whatever it sends, :func:`start_scope` refuses with
:class:`CgroupUnavailable` (the documented refusal) within its timeout: never
another exception (a supervisor would crash instead of refusing), never a wait
that each new message prolongs.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jeepney import HeaderFields, Message, MessageType, new_method_return, new_signal
from jeepney.low_level import Parser
from jeepney.wrappers import DBusAddress

from conftest import BOUND
from tether.linux.cgroup import CgroupUnavailable
from tether.linux.systemd_scope import MANAGER_INTERFACE, SYSTEMD_PATH, start_scope

#: What the bus does with each method call it gets: the bytes to send back (``b""``: nothing).
Answer = Callable[[Message, socket.socket], bytes]


def _read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise ConnectionError
        line += chunk
    return line


def _serve(conn: socket.socket, answer: Answer) -> None:
    """Authenticate the client (EXTERNAL), then answer its calls as ``answer`` says."""
    with contextlib.suppress(OSError), conn:
        assert conn.recv(1) == b"\0"
        _read_line(conn)  # AUTH EXTERNAL <uid>
        conn.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
        _read_line(conn)  # BEGIN
        parser = Parser()
        while True:
            data = conn.recv(65536)
            if not data:
                return
            for message in parser.feed(data):
                if message.header.message_type == MessageType.method_call:
                    conn.sendall(answer(message, conn))


@contextlib.contextmanager
def hostile_bus(tmp_path: Path, answer: Answer) -> Iterator[str]:
    """A bus at a Unix socket under ``tmp_path`` whose every connection ``answer`` serves."""
    path = tmp_path / "bus"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    threads: list[threading.Thread] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                thread = threading.Thread(target=_serve, args=(conn, answer), daemon=True)
                thread.start()
                threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"unix:path={path}"
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        acceptor.join(5)


def _member(message: Message) -> str:
    return str(message.header.fields.get(HeaderFields.member, ""))


def _hello_then(rest: Answer) -> Answer:
    """A bus that says Hello properly, answers AddMatch, and leaves the rest to ``rest``."""
    serial = iter(range(1000, 1 << 30))

    def answer(message: Message, conn: socket.socket) -> bytes:
        if _member(message) == "Hello":
            reply = new_method_return(message, "s", (":1.7",))
        elif _member(message) == "AddMatch":
            reply = new_method_return(message)
        else:
            return rest(message, conn)
        return bytes(reply.serialise(next(serial)))

    return answer


def _refused_within(address: str, timeout: float, bound: float) -> str:
    """Call :func:`start_scope`; assert it refuses, within ``bound`` seconds; the refusal."""
    begun = time.monotonic()
    with pytest.raises(CgroupUnavailable) as refused:
        start_scope(address, "tether-1-0.scope", 1, description="test", timeout=timeout)
    took = time.monotonic() - begun
    assert took < bound, f"start_scope(timeout={timeout}) took {took:.1f} s"
    return str(refused.value)


def _nested_variants(depth: int, serial: int) -> bytes:
    """A method return (to ``serial``) whose body is ``depth`` variants, each holding the next."""
    body = b"\x01v\x00" * depth + b"\x01u\x00"
    body += b"\0" * (-len(body) % 4) + struct.pack("<I", 7)
    fields = [
        (HeaderFields.reply_serial.value, b"\x01u\x00", struct.pack("<I", serial)),
        (HeaderFields.signature.value, b"\x01g\x00", b"\x01v\x00"),
    ]
    array = b""
    for code, signature, value in fields:
        array += b"\0" * (-len(array) % 8) + bytes([code]) + signature + value
    header = b"l" + bytes([MessageType.method_return.value, 0, 1])
    header += struct.pack("<III", len(body), 2, len(array)) + array
    return header + b"\0" * (-len(header) % 8) + body


def test_a_bus_answering_hello_with_garbage_is_refused(tmp_path: Path) -> None:
    def garbage(message: Message, conn: socket.socket) -> bytes:
        return b"\x97" + b"\x01" * 63

    with hostile_bus(tmp_path, garbage) as address:
        message = _refused_within(address, 2.0, 4.0)
    assert "not a D-Bus message" in message


def test_a_reply_nested_twenty_thousand_variants_deep_is_refused(tmp_path: Path) -> None:
    def deep(message: Message, conn: socket.socket) -> bytes:
        return _nested_variants(20_000, message.header.serial)

    with hostile_bus(tmp_path, _hello_then(deep)) as address:
        _refused_within(address, 2.0, 4.0)


def test_a_reply_larger_than_any_answer_is_refused_before_it_is_read_whole(
    tmp_path: Path,
) -> None:
    def huge(message: Message, conn: socket.socket) -> bytes:
        header = b"l" + bytes([MessageType.method_return.value, 0, 1])
        conn.sendall(header + struct.pack("<III", 1 << 27, 2, 0))
        with contextlib.suppress(OSError):
            for _ in range(1 << 15):
                conn.sendall(b"\0" * 4096)
        return b""

    with hostile_bus(tmp_path, huge) as address:
        _refused_within(address, 3.0, 1.5)


def _stream_of_other_jobs(message: Message, conn: socket.socket) -> bytes:
    """Answer StartTransientUnit with job 1, then send job 2's ``JobRemoved`` without end."""
    manager = DBusAddress(SYSTEMD_PATH, interface=MANAGER_INTERFACE)
    reply = new_method_return(message, "o", ("/org/freedesktop/systemd1/job/1",))
    conn.sendall(reply.serialise(5000))
    body = (2, "/org/freedesktop/systemd1/job/2", "other.scope", "done")
    signal = new_signal(manager, "JobRemoved", "uoss", body)
    burst = b"".join(signal.serialise(serial) for serial in range(5001, 5501))
    with contextlib.suppress(OSError):
        while True:  # faster than any reader: there is always another one waiting
            conn.sendall(burst)
    return b""


def test_other_jobs_signals_never_hold_the_scope_request_past_its_timeout(
    tmp_path: Path,
) -> None:
    # The bus in a process of its own (a thread of this one would share the GIL with the
    # reader, which would then find the socket drained between bursts).
    path = tmp_path / "bus"
    bus = subprocess.Popen(
        [sys.executable, __file__, str(path)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert bus.stdout is not None
        ready, _, _ = select.select([bus.stdout], [], [], BOUND)
        assert ready
        assert bus.stdout.readline() == b"ready\n"
        message = _refused_within(f"unix:path={path}", 2.0, 3.0)
    finally:
        bus.kill()
        bus.wait(BOUND)
    assert "within 2 s" in message


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(reply=st.binary(max_size=300))
def test_any_bytes_for_hello_s_reply_are_a_refusal(tmp_path: Path, reply: bytes) -> None:
    def answer(message: Message, conn: socket.socket) -> bytes:
        conn.sendall(reply)
        conn.shutdown(socket.SHUT_WR)
        return b""

    with hostile_bus(tmp_path, answer) as address:
        _refused_within(address, 1.0, 3.0)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=200), st.integers(0, 255)), max_size=8
    ),
    cut=st.integers(min_value=0, max_value=200),
)
def test_a_mangled_reply_to_hello_is_a_refusal_or_an_answer(
    tmp_path: Path, flips: list[tuple[int, int]], cut: int
) -> None:
    def answer(message: Message, conn: socket.socket) -> bytes:
        data = bytearray(new_method_return(message, "s", (":1.7",)).serialise(1000))
        for at, value in flips:
            if at < len(data):
                data[at] = value
        conn.sendall(bytes(data[: max(cut, 16)]))
        conn.shutdown(socket.SHUT_WR)
        return b""

    with hostile_bus(tmp_path, answer) as address:
        _refused_within(address, 1.0, 3.0)


if __name__ == "__main__":  # the stand-in bus as a process of its own: one connection, streaming
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])
    listener.listen()
    print("ready", flush=True)
    _serve(listener.accept()[0], _hello_then(_stream_of_other_jobs))

"""The command's output and input, on the caller's side: pipes read while the command runs.

Every descriptor non-blocking, all waited on together, as :mod:`subprocess` does, so no pipe
deadlocks; output kept as its head and tail (:class:`HeadTail`, docs/api.md). A stream read at
the reader's pace is :mod:`tether.caller.output_stream`.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import select
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "PIPE_CHUNK",
    "Exchange",
    "HeadTail",
    "decode_output",
    "default_encoding",
]

#: How much of each output stream ``run(..., capture_output=True)`` keeps by
#: default: 16 MiB, the first half and the last half.
DEFAULT_MAX_OUTPUT_BYTES: Final = 16 * 1024 * 1024

#: How much one read takes from a pipe (or one write gives it), here and in
#: :mod:`tether.caller.output_stream`.
PIPE_CHUNK: Final = 65536


def default_encoding() -> str:
    """The encoding ``text=True`` uses unless told otherwise: :mod:`subprocess`'s (the locale's)."""
    import locale

    return locale.getpreferredencoding(False)


class HeadTail:
    """A stream's bytes up to ``limit`` (``None``: all): first half, last half, how much fell
    between."""

    def __init__(self, limit: int | None) -> None:
        self._head_room = None if limit is None else limit // 2
        self._tail_room = None if limit is None else limit - limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        #: Bytes dropped between the head and the tail.
        self.dropped = 0

    def add(self, data: bytes) -> None:
        """Keep ``data`` (or the part of it that fits)."""
        if self._head_room is None:
            self._head += data
            return
        room = self._head_room - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        assert self._tail_room is not None
        self._tail += data
        excess = len(self._tail) - self._tail_room
        if excess > 0:
            del self._tail[:excess]
            self.dropped += excess

    @property
    def head(self) -> bytes:
        """The first bytes kept (everything, when nothing was dropped)."""
        return bytes(self._head)

    @property
    def tail(self) -> bytes:
        """The last bytes kept, written after the dropped ones."""
        return bytes(self._tail)


def decode_output(
    kept: HeadTail, *, encoding: str | None, errors: str | None
) -> tuple[bytes | str, int]:
    """The kept bytes, decoded as :mod:`subprocess` does; a character cut at an edge is dropped,
    counted."""
    head, tail, dropped = kept.head, kept.tail, kept.dropped
    if encoding is None:
        return head + tail, dropped
    decode = codecs.getincrementaldecoder(encoding)(errors or "strict")
    if not dropped:
        return _newlines(decode.decode(head + tail, final=True)), 0
    text = decode.decode(head, final=False)
    dropped += len(decode.getstate()[0])
    for skip in range(min(4, len(tail)) + 1):
        try:
            rest = tail[skip:].decode(encoding, "strict")
        except UnicodeDecodeError:
            continue
        return _newlines(text + rest), dropped + skip
    return _newlines(text + tail.decode(encoding, errors or "strict")), dropped


def _newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


class Exchange:
    """The pipes of one ``run()``: input to write, outputs to collect, all at once (:meth:`wanted`,
    :meth:`ready`)."""

    def __init__(
        self, stdin: int | None, data: bytes | None, outputs: dict[str, int], limit: int | None
    ) -> None:
        self._stdin = stdin
        self._input = memoryview(data or b"")
        self._outputs = dict(outputs)
        self.kept = {name: HeadTail(limit) for name in outputs}
        for fd in (stdin, *outputs.values()):
            if fd is not None:
                os.set_blocking(fd, False)
        if stdin is not None and not self._input:
            self._close_stdin()

    def wanted(self) -> list[tuple[int, bool]]:
        """The descriptors still open, each with whether it waits to be written (stdin)."""
        pending = [(fd, False) for fd in self._outputs.values()]
        if self._stdin is not None:
            pending.append((self._stdin, True))
        return pending

    def ready(self, fd: int) -> None:
        """Take what ``fd`` has (or give it what it takes) without blocking."""
        if fd == self._stdin:
            self._write()
            return
        for name, output in self._outputs.items():
            if output == fd:
                self._read(name, fd)
                return

    def _write(self) -> None:
        assert self._stdin is not None
        try:
            written = _write_without_sigpipe(self._stdin, self._input[:PIPE_CHUNK])
        except BlockingIOError:
            return
        except OSError as error:
            if error.errno not in (errno.EPIPE, errno.EINVAL):
                raise
            self._close_stdin()  # the command stopped reading: as subprocess, not an error
            return
        self._input = self._input[written:]
        if not self._input:
            self._close_stdin()

    def _close_stdin(self) -> None:
        fd, self._stdin = self._stdin, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _read(self, name: str, fd: int) -> bool:
        """Read one chunk; return whether more may come (``False``: end of file, closed)."""
        try:
            chunk = os.read(fd, PIPE_CHUNK)
        except BlockingIOError:
            return True
        if chunk:
            self.kept[name].add(chunk)
            return True
        del self._outputs[name]
        os.close(fd)
        return False

    def drain(self) -> None:
        """Take what the outputs hold now, without waiting for more (something escaped may hold a
        pipe); close."""
        for name, fd in list(self._outputs.items()):
            while self._read(name, fd):
                try:
                    ready = select.poll()
                    ready.register(fd, select.POLLIN)
                    if not ready.poll(0):
                        break
                except OSError:
                    break
        self.close()

    def close(self) -> None:
        """Close every pipe still open (the command sees end of file or ``EPIPE``)."""
        self._close_stdin()
        outputs, self._outputs = self._outputs, {}
        for fd in outputs.values():
            with contextlib.suppress(OSError):
                os.close(fd)


def _write_without_sigpipe(fd: int, data: memoryview) -> int:
    """``os.write`` with SIGPIPE blocked in this thread around it: a gone reader costs ``EPIPE``
    only."""
    if signal.getsignal(signal.SIGPIPE) is signal.SIG_IGN:
        return os.write(fd, data)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    try:
        return os.write(fd, data)
    except BrokenPipeError:
        if signal.SIGPIPE not in before:
            signal.sigtimedwait({signal.SIGPIPE}, 0)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)

"""The command's output and input, on the caller's side: pipes read while the command runs.

A command that writes more than a pipe holds (64 KiB on Linux) blocks until
someone reads; a caller that writes input the command does not read blocks
too. :mod:`subprocess` avoids the deadlock by waiting for all its pipes at
once, and so does this module: every descriptor here is non-blocking, and the
callers of :class:`Exchange` wait for all of them together (``poll`` in a
thread, ``add_reader``/``add_writer`` in an event loop), never one after the
other and never in a helper thread.

Output is kept in memory, so it is bounded: :class:`HeadTail` keeps the first
and the last bytes of a stream up to a limit and counts what it dropped in
between, because the start of a log says what the command was doing and the
end says how it failed; the middle is what a runaway loop repeats.

:class:`OutputStream` is a stream of ``launch(..., stdout=PIPE)``: read whole,
by line in a ``for`` loop, or ``async for`` through the running loop.

Caller side: standard library only, and nothing heavy at import.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import select
import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Iterator
    from typing import Any, Final

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "Exchange",
    "HeadTail",
    "OutputStream",
    "decode_output",
    "default_encoding",
]

#: How much of each output stream ``run(..., capture_output=True)`` keeps by
#: default: 16 MiB, the first half and the last half.
DEFAULT_MAX_OUTPUT_BYTES: Final = 16 * 1024 * 1024

#: How much one read takes from a pipe.
_CHUNK: Final = 65536


def default_encoding() -> str:
    """The encoding ``text=True`` uses unless told otherwise: :mod:`subprocess`'s (the locale's)."""
    import locale

    return locale.getpreferredencoding(False)


class HeadTail:
    """A stream's bytes up to ``limit``: the first half, the last half, and how much fell between.

    ``limit`` of ``None`` keeps everything. Memory stays within ``limit``
    plus one read, whatever the command writes.
    """

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
    """The kept bytes, decoded when ``encoding`` is given; and how many bytes were dropped.

    Text is decoded as :mod:`subprocess` does (``\\r\\n`` and ``\\r`` become
    ``\\n``). Where the middle was dropped, a character cut in two at either
    edge is dropped with it (and counted), so the cut never invents one.
    """
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


def _wait_readable(fd: int, events: int = select.POLLIN) -> None:
    poller = select.poll()
    poller.register(fd, events)
    poller.poll()


class Exchange:
    """The pipes of one ``run()``: input to write, outputs to collect, all at once.

    ``stdin`` is the write end of the command's stdin pipe (closed at once if
    there is no ``input``: the command reads end of file), ``outputs`` maps
    ``"stdout"``/``"stderr"`` to the read ends. The owner waits for
    :meth:`wanted` and calls :meth:`ready`; when nothing is wanted any more
    every pipe is at its end. :meth:`close` lets go of whatever is left.
    """

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
            written = _write_without_sigpipe(self._stdin, self._input[:_CHUNK])
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
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return True
        if chunk:
            self.kept[name].add(chunk)
            return True
        del self._outputs[name]
        os.close(fd)
        return False

    def drain(self) -> None:
        """Take what the outputs hold now, without waiting for more; then close everything.

        For a run that is over: its tree is gone, so whatever is in the pipes
        is all there will be (unless something escaped the tree and still
        holds a pipe, which must not make the caller wait).
        """
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
    """``os.write``, but a command that stopped reading costs ``EPIPE``, never a SIGPIPE.

    Python ignores SIGPIPE, but a program may have put it back to the default
    (command line tools do), and then the write that finds the command gone
    would kill the caller. For a pipe there is no ``MSG_NOSIGNAL``: the
    signal, which goes to the writing thread, is blocked in this thread
    around the write and, if the write raised it, taken off again.
    """
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


class OutputStream:
    """The command's stdout or stderr, read by the caller while it runs (``launch(stdout=PIPE)``).

    Bytes, or text with ``encoding`` (newlines translated as in
    :mod:`subprocess`). Iterate it for lines — ``for line in t.stdout`` in
    plain code, ``async for line in t.stdout`` in a coroutine, which waits
    through the running event loop (``add_reader``), not in a thread — or
    :meth:`read` (:meth:`read_async`) it whole. Unread output fills the pipe
    and then blocks the command, exactly as with :class:`subprocess.Popen`.
    """

    def __init__(self, fd: int, *, encoding: str | None = None, errors: str | None = None) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd
        self._eof = False
        self._decoder: io.IncrementalNewlineDecoder | None = None
        if encoding is not None:
            inner = codecs.getincrementaldecoder(encoding)(errors or "strict")
            self._decoder = io.IncrementalNewlineDecoder(inner, translate=True)
        self._buffer = _Pieces("" if encoding is not None else b"")

    def fileno(self) -> int:
        """The pipe's read end (non-blocking); ``ValueError`` once closed."""
        if self._fd is None:
            raise ValueError("the stream is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        """Whether the stream was closed (by :meth:`close`, or when the run handed it on)."""
        return self._fd is None

    def close(self) -> None:
        """Let go of the pipe; a command still writing to it then gets ``EPIPE``."""
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        # As a file object does: a stream dropped unread lets go of its pipe.
        self.close()

    def detach(self) -> int:
        """Hand the descriptor over (to ``run()``'s collector); the stream is closed after."""
        fd = self.fileno()
        self._fd = None
        return fd

    # -- the one step both sides share ---------------------------------------

    def _take(self) -> bool:
        """Read what the pipe holds now into the buffer; ``False`` if it would block."""
        if self._eof or self._fd is None:
            self._eof = True
            return True
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return False
        if not chunk:
            self._eof = True
        if self._decoder is not None:
            self._buffer.add(self._decoder.decode(chunk, final=not chunk))
        else:
            self._buffer.add(chunk)
        return True

    def _line(self) -> Any:
        """A whole line from the buffer (or the last, unterminated one at the end), or ``None``."""
        line = self._buffer.line()
        if line is None and self._eof:
            return self._buffer.everything()
        return line

    # -- blocking ---------------------------------------------------------------

    def readline(self) -> Any:
        """The next line with its newline; empty at the end."""
        while (line := self._line()) is None:
            if not self._take():
                _wait_readable(self.fileno())
        return line

    def read(self) -> Any:
        """Everything up to the end (the command and all it started have closed the pipe)."""
        while not self._eof:
            if not self._take():
                _wait_readable(self.fileno())
        return self._buffer.everything()

    def __iter__(self) -> Iterator[Any]:
        while line := self.readline():
            yield line

    # -- asyncio ----------------------------------------------------------------

    async def _readable(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        fd = self.fileno()
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _resolve, readable)
        try:
            await readable
        finally:
            loop.remove_reader(fd)

    async def readline_async(self) -> Any:
        """:meth:`readline`, waiting through the running event loop."""
        while (line := self._line()) is None:
            if not self._take():
                await self._readable()
        return line

    async def read_async(self) -> Any:
        """:meth:`read`, waiting through the running event loop."""
        while not self._eof:
            if not self._take():
                await self._readable()
        return self._buffer.everything()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._lines_async()

    async def _lines_async(self) -> AsyncIterator[Any]:
        while line := await self.readline_async():
            yield line


class _Pieces:
    """What was read and not yet returned: the reads as they came, each searched once.

    Linear in what passes through, at any line length: a read is appended,
    never concatenated onto what came before (that copies the whole buffer
    per read); a line is looked for only in the reads not yet searched; and a
    line returned takes its own bytes, never a copy of the rest.
    """

    __slots__ = ("_empty", "_first", "_newline", "_pieces", "_searched", "_start")

    def __init__(self, empty: Any) -> None:
        self._empty = empty
        self._newline: Any = empty.__class__("\n" if isinstance(empty, str) else b"\n")
        self._pieces: list[Any] = []
        #: The first piece not yet returned whole, and where in it the rest begins.
        self._first = 0
        self._start = 0
        #: Pieces (from ``_first``) known to hold no newline after ``_start``.
        self._searched = 0

    def add(self, piece: Any) -> None:
        if piece:
            self._pieces.append(piece)

    def line(self) -> Any:
        """The next whole line, newline included; ``None`` while it is not all here."""
        pieces, first = self._pieces, self._first
        for index in range(first + self._searched, len(pieces)):
            start = self._start if index == first else 0
            end = pieces[index].find(self._newline, start)
            if end < 0:
                self._searched += 1
                continue
            if index == first:
                line = pieces[first][start : end + 1]
            else:
                parts = [pieces[first][self._start :], *pieces[first + 1 : index]]
                line = self._empty.join([*parts, pieces[index][: end + 1]])
            self._drop_to(index, end + 1)
            return line
        return None

    def everything(self) -> Any:
        """All that is left, at once (lines not taken included); the buffer is then empty."""
        pieces, first = self._pieces, self._first
        if first >= len(pieces):
            rest = self._empty
        elif first == len(pieces) - 1 and not self._start:
            rest = pieces[first]
        else:
            rest = self._empty.join([pieces[first][self._start :], *pieces[first + 1 :]])
        self._pieces, self._first, self._start, self._searched = [], 0, 0, 0
        return rest

    def _drop_to(self, index: int, start: int) -> None:
        """Forget everything before ``start`` in piece ``index``."""
        if start == len(self._pieces[index]):
            index, start = index + 1, 0
        self._first, self._start, self._searched = index, start, 0
        if index > 64 and 2 * index > len(self._pieces):  # amortised: each piece moves once
            del self._pieces[:index]
            self._first = 0


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)

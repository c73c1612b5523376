"""A stream of the command's output, read by the caller while it runs: ``launch(stdout=PIPE)``.

Read whole, by line, or ``async for`` through the running loop, unbounded as ``subprocess``'s
pipes are (docs/api.md, "The streams of a launched command").
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import select

from tether.caller.capture import PIPE_CHUNK

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Iterator
    from typing import Any

__all__ = ["OutputStream", "ready", "resolve"]


class OutputStream:
    """The command's stdout or stderr as ``launch(stdout=PIPE)`` hands it: read whole or by line,
    sync or async."""

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

    def _take(self) -> bool:
        """Read what the pipe holds now into the buffer; ``False`` if it would block."""
        if self._eof or self._fd is None:
            self._eof = True
            return True
        try:
            chunk = os.read(self._fd, PIPE_CHUNK)
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

    async def readline_async(self) -> Any:
        """:meth:`readline`, waiting through the running event loop."""
        while (line := self._line()) is None:
            if not self._take():
                await ready(self.fileno())
        return line

    async def read_async(self) -> Any:
        """:meth:`read`, waiting through the running event loop."""
        while not self._eof:
            if not self._take():
                await ready(self.fileno())
        return self._buffer.everything()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._lines_async()

    async def _lines_async(self) -> AsyncIterator[Any]:
        while line := await self.readline_async():
            yield line


class _Pieces:
    """What was read and not yet returned: the reads as they came, each searched once (linear at
    any line length)."""

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


async def ready(fd: int, *, writable: bool = False) -> None:
    """Wait through the running event loop (never a thread) until ``fd`` is readable or writable."""
    import asyncio

    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()
    if writable:
        loop.add_writer(fd, resolve, woken)
    else:
        loop.add_reader(fd, resolve, woken)
    try:
        await woken
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)


def resolve(future: asyncio.Future[None]) -> None:
    """Wake whoever awaits ``future`` (an event loop's reader or writer callback), once."""
    if not future.done():
        future.set_result(None)


def _wait_readable(fd: int, events: int = select.POLLIN) -> None:
    poller = select.poll()
    poller.register(fd, events)
    poller.poll()

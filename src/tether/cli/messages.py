"""What every ``tether`` subcommand says to a person, and how: one line, a documented status.

A usage error exits 125 (tether's own failure, as ``timeout(1)`` does), in
GNU's two lines: what was wrong, then ``Try '... --help' for more
information.`` (:func:`usage_error`; the review commands still show their
usage line); any other refusal is one line on stderr, ``tether: ...``;
output that a reader stopped reading (``tether ls | head``) is not an error
to report.

Streams that cannot be written change nothing of that. A message to a closed
stderr (``2>&-``) is dropped, not printed on stdout (where ``print`` would put
it, and where ``$(tether run ...)`` would capture it); one to a stderr that
refuses it (``2>/dev/full``) is dropped too, and the exit status still tells.
Output on stdout that cannot be written (``--help >/dev/full``) is tether's
failure: ``write error``, 125. Either way no traceback, and no different exit
status from the interpreter's own last flush.
"""

from __future__ import annotations

import errno
import os
import signal
import sys

from tether.core.reasons import TETHER_FAILED

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import IO, NoReturn

__all__ = [
    "fail",
    "print_out",
    "say",
    "say_help",
    "stderr_failed",
    "usage_error",
    "warn",
    "write_err",
    "write_out",
]


def usage_error(program: str, message: str, *, suggestion: str | None = None) -> NoReturn:
    """Refuse a command line as GNU tools do: what was wrong, where help is; status 125.

    ``tether run: unrecognized option '--deadlin' (did you mean '--deadline'?)``
    then ``Try 'tether run --help' for more information.``: one format for
    every usage error, and nothing started, nothing recorded.
    """
    hint = f" (did you mean '{suggestion}'?)" if suggestion else ""
    say(f"{program}: {message}{hint}")
    say(f"Try '{program} --help' for more information.")
    raise SystemExit(TETHER_FAILED)


def fail(message: str) -> NoReturn:
    """Refuse: one line on stderr, status 125."""
    say(f"tether: {message}")
    raise SystemExit(TETHER_FAILED)


def warn(message: str) -> None:
    """Say something a person should know, on stderr, and carry on."""
    say(f"tether: {message}")


def say_help(parser: argparse.ArgumentParser) -> None:
    """Write ``parser``'s help on stderr (never on stdout, even with stderr closed)."""
    write_err(parser.format_help())


def say(line: str, *, as_given: bool = False) -> None:
    """Write ``line`` on stderr, if stderr will take it (see the module).

    Messages quote what was typed (an option, a path): its control characters
    are shown escaped, never sent to the terminal to obey. ``as_given``: bytes
    that are not UTF-8 are written as they were given (see :func:`write_err`).
    """
    write_err(_visible(line, as_given=as_given) + "\n", as_given=as_given)


#: Whether a message could not be written on stderr (closed, full, a closed pipe):
#: ``tether timeout`` then exits as GNU's ``close_stdout`` makes GNU ``timeout`` exit.
_unwritten = [False]


def stderr_failed() -> bool:
    """Whether any message so far could not be written on stderr."""
    return _unwritten[0]


def write_err(text: str, *, as_given: bool = False) -> None:
    """Write ``text`` on stderr, flushed; note it if it cannot be written.

    ``as_given``: the bytes of an argument that are not UTF-8 (Python's
    ``surrogateescape`` stand-ins) are written as those bytes, as GNU's
    getopt writes them (``unrecognized option '--\\377'`` with byte 0xff).
    """
    stream = sys.stderr
    if stream is None:  # started with stderr closed: print() would fall back to stdout
        _unwritten[0] = True
        return
    try:
        buffer = getattr(stream, "buffer", None) if as_given else None
        if buffer is not None:
            stream.flush()
            buffer.write(text.encode(stream.encoding or "utf-8", "surrogateescape"))
            buffer.flush()
        else:
            stream.write(text)
            stream.flush()
    except (OSError, ValueError, UnicodeEncodeError):
        _unwritten[0] = True
        _discard(stream)


def write_out(text: str) -> OSError | None:
    """Write ``text`` to stdout, flushed; return why it could not be written, if it could not.

    After a failure stdout is pointed at ``/dev/null``, so that the
    interpreter's own flush at exit cannot fail again (and exit 120).
    """
    stream = sys.stdout
    try:
        if stream is None:  # started with stdout closed
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        stream.write(text)
        stream.flush()
    except (OSError, ValueError) as error:
        _discard(stream)
        if isinstance(error, OSError):
            return error
        return OSError(errno.EBADF, os.strerror(errno.EBADF))
    return None


def print_out(text: str) -> int:
    """Write ``text`` to stdout; return 0, or 141 for a reader that went away (``| head``).

    That is not an error to report; any other failure to write is (one line, 125).
    """
    error = write_out(text)
    if error is None:
        return 0
    if isinstance(error, BrokenPipeError):
        return 128 + signal.SIGPIPE
    fail(f"write error: {error.strerror or error}")


def _discard(stream: IO[str] | None) -> None:
    """Point ``stream``'s descriptor at ``/dev/null``: what is still buffered goes nowhere."""
    if stream is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)


def _visible(text: str, *, as_given: bool = False) -> str:
    """``text`` with control characters escaped, so a terminal shows them rather than obeys.

    ``as_given`` keeps the stand-ins of bytes that are not UTF-8 as they are.
    """
    if text.isprintable():
        return text
    return "".join(
        char
        if char.isprintable() or (as_given and "\udc80" <= char <= "\udcff")
        else repr(char)[1:-1]
        for char in text
    )

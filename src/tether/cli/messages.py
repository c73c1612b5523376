"""What every ``tether`` subcommand says to a person, and how: one line, a documented status
(docs/cli.md, "Bad input").
"""

from __future__ import annotations

import errno
import os
import signal
import sys

from tether.core.reasons import TETHER_FAILED

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import IO, NoReturn


def usage_error(
    program: str, message: str | None, *, suggestion: str | None = None, as_given: bool = False
) -> NoReturn:
    """Refuse a command line as GNU tools do (what was wrong, then ``Try '... --help'``); 125."""
    hint = f" (did you mean '{suggestion}'?)" if suggestion else ""
    if message is not None:
        say(f"{program}: {message}{hint}", as_given=as_given)
    say(f"Try '{program} --help' for more information.")
    raise SystemExit(TETHER_FAILED)


def fail(message: str, *, program: str = "tether") -> NoReturn:
    """Refuse: one line on stderr, status 125."""
    say(f"{program}: {message}")
    raise SystemExit(TETHER_FAILED)


def warn(message: str) -> None:
    """Say something a person should know, on stderr, and carry on."""
    say(f"tether: {message}")


def say_help(parser: argparse.ArgumentParser) -> None:
    """Write ``parser``'s help on stderr (never on stdout)."""
    write_err(parser.format_help())


def say(line: str, *, as_given: bool = False) -> None:
    """Write ``line`` on stderr, control characters escaped (``as_given``: :func:`write_err`)."""
    write_err(_visible(line, as_given=as_given) + "\n", as_given=as_given)


#: Whether a message could not be written on stderr (``tether timeout`` then exits as GNU's).
_unwritten = [False]


def stderr_failed() -> bool:
    return _unwritten[0]


def write_err(text: str, *, as_given: bool = False) -> None:
    """Write ``text`` on stderr, flushed, or note it could not be; ``as_given``: bytes that are
    not UTF-8 are written as given, as GNU's getopt writes them."""
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
    """Write ``text`` to stdout, flushed; return why not, and point stdout at ``/dev/null`` then
    (the interpreter's own last flush would fail again, and exit 120)."""
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


def print_out(text: str, *, program: str = "tether") -> int:
    """Write ``text`` to stdout; return 0, or 141 for a reader gone away; else fail (125)."""
    error = write_out(text)
    if error is None:
        return 0
    if isinstance(error, BrokenPipeError):
        return 128 + signal.SIGPIPE
    fail(f"write error: {error.strerror or error}", program=program)


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
    """``text`` with control characters escaped; ``as_given`` keeps non-UTF-8 stand-ins."""
    if text.isprintable():
        return text
    return "".join(
        char
        if char.isprintable() or (as_given and "\udc80" <= char <= "\udcff")
        else repr(char)[1:-1]
        for char in text
    )

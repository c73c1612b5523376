"""What every ``tether`` subcommand says to a person, and how: one line, a documented status.

A usage error exits 125 (tether's own failure, as ``timeout(1)`` does), with
the usage line and one line saying what was wrong; any other refusal is one
line on stderr, ``tether: ...``; output that a reader stopped reading
(``tether ls | head``) is not an error to report.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

from tether.core.reasons import TETHER_FAILED

__all__ = ["UsageParser", "fail", "print_out", "warn"]


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 125, tether's own-failure status."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(TETHER_FAILED, f"{self.prog}: error: {message}\n")


def fail(message: str) -> NoReturn:
    """Refuse: one line on stderr, status 125."""
    print(f"tether: {message}", file=sys.stderr, flush=True)
    raise SystemExit(TETHER_FAILED)


def warn(message: str) -> None:
    """Say something a person should know, on stderr, and carry on."""
    print(f"tether: {message}", file=sys.stderr, flush=True)


def print_out(text: str) -> int:
    """Write ``text`` to stdout; a reader that went away (``| head``) is not an error to report."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Keep the interpreter's own flush at exit from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 128 + signal.SIGPIPE
    return 0

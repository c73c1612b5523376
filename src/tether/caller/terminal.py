"""Whether the command is to use its caller's terminal, and so join its caller's process group.

When the caller is its terminal's foreground job, or when asked (``timeout --foreground``);
why and what the supervisor gives up: docs/cli.md, "Terminals and job control".
"""

from __future__ import annotations

import os

__all__ = ["terminal_group"]


def terminal_group(*, asked: bool = False) -> int | None:
    """The process group the command should join (this program's), or ``None``; ``asked``:
    ``--foreground``."""
    group = os.getpgrp()
    if asked:
        return group if group > 1 else None
    try:
        foreground = os.tcgetpgrp(0)  # fails unless stdin is our controlling terminal
    except OSError:
        return None
    return group if foreground == group and group > 1 else None

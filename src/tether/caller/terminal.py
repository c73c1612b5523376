"""Whether the command is to use its caller's terminal, and so join its caller's process group.

A terminal belongs to one session, and only the processes of its foreground
process group may read it, get its signals (Ctrl-C, Ctrl-Z, a resize) and
open it as ``/dev/tty``. A command that runs in the supervisor's session, as
tether's commands otherwise do, can read a terminal it was handed as standard
input, but has none of the rest: ``ssh`` and ``sudo`` cannot prompt, and a
full-screen program cannot ask for the terminal's foreground.

So when the caller is itself the terminal's foreground job (its standard
input is its controlling terminal, and its process group is the one in the
foreground), or when asked (``timeout --foreground``), the command joins the
caller's process group, in the caller's session, as a shell's job would, and
the supervisor stays in that session too, in a group of its own. What the
supervisor still holds then, and what it gives up, is in docs/cli.md
("Terminals").

Caller side: standard library only.
"""

from __future__ import annotations

import os

__all__ = ["terminal_group"]


def terminal_group(*, asked: bool = False) -> int | None:
    """The process group the command should join (this program's), or ``None`` for its own.

    ``asked`` (``--foreground``) joins even without a terminal in the foreground.
    """
    group = os.getpgrp()
    if asked:
        return group if group > 1 else None
    try:
        foreground = os.tcgetpgrp(0)  # fails unless stdin is our controlling terminal
    except OSError:
        return None
    return group if foreground == group and group > 1 else None

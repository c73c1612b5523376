"""The Linux mechanisms tether stands on, one small module each.

tether's guarantees come from Linux features with no portable equivalent:
pidfds (signal and watch a process without racing pid reuse), the child
subreaper flag (orphans come back to the supervisor instead of init),
``PR_SET_PDEATHSIG`` (a backstop if the supervisor itself is killed), and
``/proc`` (to find every descendant). Rather than pretend to run elsewhere and
quietly keep fewer promises, tether refuses to start on any other platform.
"""

from __future__ import annotations

import sys

__all__ = ["UnsupportedPlatform", "require_linux"]


class UnsupportedPlatform(RuntimeError):
    """tether was started somewhere it cannot keep its promises."""


def require_linux() -> None:
    """Raise :class:`UnsupportedPlatform` with a clear message unless this is Linux."""
    if not sys.platform.startswith("linux"):
        raise UnsupportedPlatform(
            f"tether runs on Linux only (it needs pidfds, a child subreaper and /proc); "
            f"this is {sys.platform}"
        )

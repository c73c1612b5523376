"""The Linux mechanisms tether stands on, one small module each; tether refuses to start
anywhere else (docs/containment.md).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final


class UnsupportedPlatform(RuntimeError):
    """tether was started somewhere it cannot keep its promises."""


#: What the sweep reads to find a process's children; its absence must not read as "none".
_CHILDREN: Final = "/proc/thread-self/children"


def require_linux() -> None:
    """Refuse (:class:`UnsupportedPlatform`) unless on Linux with ``/proc``'s children files."""
    if not sys.platform.startswith("linux"):
        raise UnsupportedPlatform(
            f"tether runs on Linux only (it needs pidfds, a child subreaper and /proc); "
            f"this is {sys.platform}"
        )
    if not os.path.exists(_CHILDREN):
        raise UnsupportedPlatform(
            f"{_CHILDREN} is missing (no /proc mounted here, or a kernel built without "
            "CONFIG_PROC_CHILDREN): without it a command's descendants cannot be found"
        )

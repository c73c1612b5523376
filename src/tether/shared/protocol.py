"""The two pipes between a caller and its supervisor, and what travels on them.

**The lifeline** (caller to supervisor). The caller holds the write end and
never shares it. Its end of file is the one message a dead caller can still
send, whatever killed it, SIGKILL included: the kernel closes the write end
when the last holder exits. One byte on it is a request: :data:`CANCEL` (stop
gracefully) or :data:`KILL_NOW`. A request on the pipe tells *cancelled* apart
from *caller lost* without signalling a pid that may have been reused.

**The status pipe** (supervisor to caller). One JSON object per line:
``started`` (supervisor pid, command pid and group), ``signal`` for each
signal sent to the tree (name, how many processes), then ``finished``
(reason, exit status, record path, and a message when there is one to show).
End of file without ``finished`` means the supervisor itself was lost.

Stdlib only, cheap to import: both sides use it.
"""

from __future__ import annotations

import json
import os

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["CANCEL", "FINISHED", "KILL_NOW", "STARTED", "StatusWriter", "decode"]

CANCEL: Final = b"c"
KILL_NOW: Final = b"k"

STARTED: Final = "started"
FINISHED: Final = "finished"


class StatusWriter:
    """The supervisor's end of the status pipe. A caller that went away is not an error."""

    def __init__(self, fd: int | None) -> None:
        self._fd: int | None = fd

    def send(self, kind: str, **fields: object) -> None:
        """Write one message; once the caller is gone, stop trying."""
        if self._fd is None:
            return
        data = (json.dumps({"event": kind, **fields}) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            self.close()

    def close(self) -> None:
        """Close the pipe (the caller then sees end of file)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def decode(line: bytes) -> dict[str, object]:
    """Parse one status line; a malformed line is reported as an ``error`` message."""
    try:
        message = json.loads(line)
    except ValueError:
        return {"event": "error", "message": f"unreadable status line {line[:80]!r}"}
    if not isinstance(message, dict):
        return {"event": "error", "message": f"unexpected status message {message!r}"}
    return message

"""The two channels between a caller and its supervisor, and what travels on the status one.

One JSON object a line, each a message class here, decoded with every field's type checked; a
line that cannot be read is :class:`Garbled`, never an exception. The lifeline's bytes are
:mod:`tether.shared.lifeline`. Why sockets, and what each message means: docs/architecture.md,
"Channels".
"""

from __future__ import annotations

import os

from tether.core.reasons import TETHER_FAILED, Reason

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, Self

__all__ = [
    "PASSED_ROLE",
    "Finished",
    "Garbled",
    "Message",
    "Placement",
    "Signalled",
    "Spawned",
    "Started",
    "StatusWriter",
    "decode",
]

#: The spec's role of a descriptor ``pass_fds`` hands on: ``pass:N``, N its number in the command.
PASSED_ROLE: Final = "pass:"


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class Placement:
    """Where a run's command is (supervisor, pid, group, cgroup directories, v2 first)."""

    __slots__ = ("cgroups", "pgid", "pid", "supervisor_pid")

    def __init__(
        self,
        *,
        supervisor_pid: int | None,
        pid: int | None,
        pgid: int | None,
        cgroups: list[str] | None = None,
    ) -> None:
        self.supervisor_pid = supervisor_pid
        self.pid = pid
        self.pgid = pgid
        self.cgroups = [] if cgroups is None else cgroups

    def fields(self) -> dict[str, object]:
        return {
            "supervisor_pid": self.supervisor_pid,
            "pid": self.pid,
            "pgid": self.pgid,
            "cgroups": self.cgroups,
        }

    @classmethod
    def read(cls, data: dict[str, object]) -> Self:
        listed = data.get("cgroups")
        return cls(
            supervisor_pid=_int(data.get("supervisor_pid")),
            pid=_int(data.get("pid")),
            pgid=_int(data.get("pgid")),
            cgroups=[item for item in listed if isinstance(item, str)]
            if isinstance(listed, list)
            else [],
        )


class Spawned(Placement):
    """The command exists and is about to run: sent by the command itself, before its exec."""

    __slots__ = ()
    KIND: Final = "spawned"


class Started(Placement):
    """The command runs: who is who, which is what a caller needs if the supervisor is lost."""

    __slots__ = ()
    KIND: Final = "started"


class Signalled:
    """A signal went to the tree (for callers that report it as it happens: ``timeout -v``)."""

    __slots__ = ("processes", "signal")
    KIND: Final = "signal"

    def __init__(self, *, signal: str, processes: int) -> None:
        self.signal = signal
        self.processes = processes

    def fields(self) -> dict[str, object]:
        return {"signal": self.signal, "processes": self.processes}

    @classmethod
    def read(cls, data: dict[str, object]) -> Signalled:
        return cls(
            signal=_str(data.get("signal")) or "?", processes=_int(data.get("processes")) or 0
        )


class Finished:
    """How the run ended: the last message a supervisor sends (fields as the record's)."""

    __slots__ = (
        "elapsed_seconds",
        "errno",
        "escalated_to_sigkill",
        "exit_status",
        "finished_at",
        "message",
        "outside_group",
        "processes_stopped",
        "reason",
        "record",
        "returncode",
        "shutdown_seconds",
        "started_at",
        "tree_usage",
    )
    KIND: Final = "finished"

    def __init__(
        self,
        *,
        reason: str,
        exit_status: int,
        returncode: int | None = None,
        record: str | None = None,
        message: str | None = None,
        errno: int | None = None,
        escalated_to_sigkill: bool = False,
        started_at: str | None = None,
        finished_at: str | None = None,
        elapsed_seconds: float | None = None,
        processes_stopped: int | None = None,
        outside_group: int | None = None,
        shutdown_seconds: float | None = None,
        tree_usage: dict[str, int | float | None] | None = None,
    ) -> None:
        self.reason = reason
        self.exit_status = exit_status
        self.returncode = returncode
        self.record = record
        self.message = message
        self.errno = errno
        self.escalated_to_sigkill = escalated_to_sigkill
        self.started_at = started_at
        self.finished_at = finished_at
        self.elapsed_seconds = elapsed_seconds
        self.processes_stopped = processes_stopped
        self.outside_group = outside_group
        self.shutdown_seconds = shutdown_seconds
        self.tree_usage = tree_usage

    def fields(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def read(cls, data: dict[str, object]) -> Finished:
        status = _int(data.get("exit_status"))
        return cls(
            reason=_str(data.get("reason")) or Reason.SUPERVISOR_LOST.value,
            exit_status=TETHER_FAILED if status is None else status,
            returncode=_int(data.get("returncode")),
            record=_str(data.get("record")),
            message=_str(data.get("message")) or None,
            errno=_int(data.get("errno")),
            escalated_to_sigkill=data.get("escalated_to_sigkill") is True,
            started_at=_str(data.get("started_at")),
            finished_at=_str(data.get("finished_at")),
            elapsed_seconds=_number(data.get("elapsed_seconds")),
            processes_stopped=_int(data.get("processes_stopped")),
            outside_group=_int(data.get("outside_group")),
            shutdown_seconds=_number(data.get("shutdown_seconds")),
            tree_usage=_usage(data.get("tree_usage")),
        )


def _usage(value: object) -> dict[str, int | float | None] | None:
    if not isinstance(value, dict):
        return None
    return {
        str(key): item
        for key, item in value.items()
        if item is None or (isinstance(item, int | float) and not isinstance(item, bool))
    }


class Garbled:
    """A status line that is not a message: a supervisor that died mid-write, or junk."""

    __slots__ = ("text",)
    KIND: Final = "garbled"

    def __init__(self, text: str) -> None:
        self.text = text


Message = Spawned | Started | Signalled | Finished | Garbled

_READERS: Final = {cls.KIND: cls for cls in (Spawned, Started, Signalled, Finished)}


def encode(message: Spawned | Started | Signalled | Finished) -> bytes:
    import json

    return (json.dumps({"event": message.KIND, **message.fields()}) + "\n").encode()


def decode(line: bytes) -> Message:
    """Read one status line; anything that is not a message is :class:`Garbled`."""
    import json

    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return Garbled(f"unreadable status line {line[:80]!r}")
    if not isinstance(data, dict):
        return Garbled(f"unexpected status message {line[:80]!r}")
    kind = data.get("event")
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        return Garbled(f"unknown status message {line[:80]!r}")
    message: Message = reader.read(data)
    return message


class StatusWriter:
    """The supervisor's end of the status pipe. A caller that went away is not an error."""

    def __init__(self, fd: int | None) -> None:
        self._fd: int | None = fd
        if fd is not None:
            # Now: ``spawned`` is sent between the command's fork and exec.
            import json  # noqa: F401

    def send(self, message: Spawned | Started | Signalled | Finished) -> None:
        """Write one message; once the caller is gone, stop trying."""
        if self._fd is not None:
            self.write(encode(message))

    @property
    def closed(self) -> bool:
        """Whether nothing more is written: no caller, or one gone."""
        return self._fd is None

    def write(self, data: bytes) -> None:
        """Write one message already encoded (:func:`encode`); as :meth:`send`."""
        if self._fd is None:
            return
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

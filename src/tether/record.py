"""The private JSON record a run leaves behind: how it is built, written and read.

The record is the only evidence, after the fact, of how a run ended — in
particular that a command whose caller was hard-killed was stopped rather than
left running. So it is written *once*, *atomically* and *privately*:

*Atomically*, because a reader (``tether show``, ``jq``, a CI step that waits
for the file) must see either no record or a whole one, never half of one,
even if the supervisor is killed mid-write or the machine loses power. The
document goes to a temporary file in the record's own directory (``rename`` is
atomic only within one file system), which is written, ``fsync``-ed,
``os.replace``-d over the record path, and then the directory is ``fsync``-ed
so the new name itself survives a crash. Every step happens relative to one
open directory descriptor, so the directory cannot be swapped for another
between the steps. Whatever fails, the temporary file is removed: a failed
write leaves nothing behind.

*Privately*, because the record is written by a process that may hold
credentials in its environment: the file is created ``0600`` (and ``fchmod``-ed
to be exact whatever the umask), and a directory tether creates for it is
``0700``, parents included. A directory that already exists belongs to the
operator and is left as it is: chmod-ing ``/tmp`` to ``0700`` would be a far
worse surprise than a private file in a shared directory. The record never
holds argv or environment values; nothing here even receives them.

*Symbolic links.* The temporary file is opened ``O_CREAT|O_EXCL|O_NOFOLLOW``, so
nobody can point it elsewhere. A symbolic link already sitting at the record
path is refused, before the run (:func:`check_record_path`) and again at write
time, rather than silently replaced: an operator who put it there expects the
record to land where it points, and following it is exactly what a hostile link
in a shared directory would want. (Should a link appear between that last check
and the rename, ``rename`` replaces the link itself and never writes through
it, so the race can only cost the link, never another file.) Anything else that
is not a regular file — a directory, a FIFO, ``/dev/null`` — is refused too:
replacing a device node with a record, as root, is not a favour to anyone.

*Two halves.* :func:`build_document` turns the core's
:class:`~tether.effects.Verdict` and the adapter's :class:`RunFacts` (pids,
signals, rusage: what only the adapter knows) into the document, keeping every
field of the seed supervisor's record with the same name and meaning so that
existing readers keep working. :func:`build_caller_document` is the
record a caller writes itself: when the supervisor vanished without a word,
or when a command line was refused before anything started. The JSON
Schema in ``tether/schema/record.v1.json`` documents every field for operators.

Adapter layer: this module uses :mod:`os`, but neither ``structlog`` nor
``transitions``, and it imports :mod:`importlib.resources` only when the schema
is asked for, because the caller's side imports it and must stay cheap.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import json
import math
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from tether._version import __version__
from tether.effects import Verdict
from tether.outcome import TETHER_FAILED, Reason

if TYPE_CHECKING:
    # Only annotations name it: paths arrive as Path objects, so this module
    # need not pay for importing pathlib (and urllib.parse behind it) itself.
    from pathlib import Path

__all__ = [
    "CONTAINMENTS",
    "RECORD_DIRECTORY_MODE",
    "RECORD_FILE_MODE",
    "RECORD_SCHEMA_VERSION",
    "RecordError",
    "ResourceUsage",
    "RunFacts",
    "SignalSent",
    "build_caller_document",
    "build_document",
    "check_record_path",
    "ensure_private_directory",
    "read_record",
    "record_schema",
    "write_record",
]

#: The record's ``schema_version``; a reader refuses anything else.
RECORD_SCHEMA_VERSION: Final = "tether.record.v1"

#: Owner read and write only.
RECORD_FILE_MODE: Final = 0o600

#: Owner only, for every directory tether creates to hold a record.
RECORD_DIRECTORY_MODE: Final = 0o700

#: A record is a few kilobytes; anything far larger is not one, and reading it
#: whole (``tether show /dev/zero``) must not hang or exhaust memory.
_MAX_RECORD_BYTES: Final = 1 << 20

#: How much of the record's file name the temporary file repeats, in bytes, so
#: that a stray temporary file (left by a power cut) still says whose it was
#: while its name stays well within ``NAME_MAX`` (255 bytes).
_TEMP_STEM_BYTES: Final = 128

_SCHEMA_PREFIX: Final = "tether.record."

#: How a supervisor can contain the command's tree (the record's ``containment``;
#: a caller's fallback record says ``unknown``).
CONTAINMENTS: Final = frozenset({"process_group", "sweep", "cgroup"})


class RecordError(OSError):
    """A record could not be checked, written or read; the message is one line for a person.

    An :class:`OSError` so that code which already treats "the file system said
    no" as one case keeps doing so. ``path`` is the file or directory concerned;
    ``errno`` is the underlying error number where there is one.
    """

    def __init__(self, message: str, *, path: Path, error_number: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.errno = error_number


# -- paths --------------------------------------------------------------------


def _shown(path: Path) -> str:
    """Return ``path`` for a one-line message: as is, or quoted if it holds control characters."""
    text = os.fsdecode(path)
    return text if text.isprintable() else repr(text)


def _problem(error: OSError) -> str:
    """Return the system's words for ``error`` (not ``str(error)``, which adds paths)."""
    if error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


def _missing_ancestors(path: Path) -> Iterator[Path]:
    """Yield ``path`` and its ancestors that do not exist yet, outermost first."""
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current)
        current = current.parent
    yield from reversed(missing)


def ensure_private_directory(path: Path) -> None:
    """Create ``path`` and any missing parents with mode ``0700``; accept an existing directory.

    Raise :class:`RecordError` if ``path`` (or a parent) exists but is not a
    directory, or cannot be created. An existing directory's mode is left alone.
    """
    if os.path.isdir(path):
        return
    for directory in _missing_ancestors(path):
        try:
            os.mkdir(directory, RECORD_DIRECTORY_MODE)
            # mkdir's mode is masked by the umask; say exactly what was meant.
            os.chmod(directory, RECORD_DIRECTORY_MODE)
        except FileExistsError:
            continue  # another tether made it first; checked below
        except NotADirectoryError:
            break  # a parent is a file; reported below
        except OSError as error:
            raise RecordError(
                f"cannot create the record directory {_shown(directory)}: {_problem(error)}",
                path=directory,
                error_number=error.errno,
            ) from None
    if not os.path.isdir(path):
        raise RecordError(
            f"cannot create the record directory {_shown(path)}: "
            f"{_shown(_first_non_directory(path))} is not a directory",
            path=path,
            error_number=errno_codes.ENOTDIR,
        )


def _first_non_directory(path: Path) -> Path:
    """Return the outermost existing part of ``path`` that is not a directory."""
    for candidate in (*reversed(path.parents), path):
        if os.path.lexists(candidate) and not os.path.isdir(candidate):
            return candidate
    return path


def _refuse_unusable_target(path: Path, *, name: str, directory_fd: int | None = None) -> None:
    """Raise :class:`RecordError` unless ``path`` is missing or an existing regular file.

    Looked at with ``lstat``: a symbolic link is refused as a link, whatever it points at.
    """
    try:
        if directory_fd is None:
            status = os.lstat(path)
        else:
            status = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as error:
        raise _write_error(path, error) from None
    kind = _kind_refused(status.st_mode)
    if kind is not None:
        raise RecordError(f"cannot write the record: {_shown(path)} is {kind}", path=path)


def _kind_refused(mode: int) -> str | None:
    """Return how to name a file of this ``mode`` that must not be replaced, or ``None``."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link (refusing to replace or follow it)"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _write_error(path: Path, error: OSError) -> RecordError:
    """Wrap ``error`` as the one-line failure to write the record at ``path``."""
    return RecordError(
        f"cannot write the record: {_shown(path)}: {_problem(error)}",
        path=path,
        error_number=error.errno,
    )


def check_record_path(path: Path) -> None:
    """Check, before any command starts, that a record can be written at ``path``.

    Creates the record's directory (``0700``) if it is missing, and raises
    :class:`RecordError` if it cannot be created or written, or if ``path`` is
    a directory, a symbolic link or some other non-regular file. What cannot
    be known in advance (a full disk, a directory removed later) is
    :func:`write_record`'s to report.
    """
    directory = path.parent
    ensure_private_directory(directory)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise RecordError(
            f"cannot write the record: directory {_shown(directory)} is not writable",
            path=directory,
            error_number=errno_codes.EACCES,
        )
    _refuse_unusable_target(path, name=path.name)


# -- writing ------------------------------------------------------------------


def _serialise(path: Path, document: Mapping[str, object]) -> bytes:
    """Return ``document`` as the record's bytes: sorted keys, indent 2, a final newline.

    ASCII-only (``\\u`` escapes) so that a label with odd bytes in it still makes
    valid JSON, and NaN is refused because ``jq`` cannot read it.
    """
    try:
        text = json.dumps(document, sort_keys=True, indent=2, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise RecordError(
            f"cannot write the record: {_shown(path)}: not serialisable as JSON ({error})",
            path=path,
        ) from None
    return (text + "\n").encode("ascii")


def _temp_name(name: str) -> str:
    """Return a fresh, hidden temporary file name beside the record ``name``."""
    stem = os.fsdecode(os.fsencode(name)[:_TEMP_STEM_BYTES])
    return f".{stem}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_temp(directory_fd: int, temp: str, data: bytes) -> None:
    """Create ``temp`` exclusively (never through a link), private, with ``data`` on disk."""
    flags = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_WRONLY | os.O_CLOEXEC
    fd = os.open(temp, flags, RECORD_FILE_MODE, dir_fd=directory_fd)
    try:
        os.fchmod(fd, RECORD_FILE_MODE)
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_record(path: Path, document: Mapping[str, object]) -> None:
    """Write ``document`` to ``path`` atomically and privately, creating its directory.

    Raises :class:`RecordError` (and leaves no temporary file) if the document
    is not JSON, if ``path`` is a directory, a symbolic link or another
    non-regular file, or if any step fails. An existing regular file at
    ``path`` is replaced.
    """
    data = _serialise(path, document)
    directory = path.parent
    ensure_private_directory(directory)
    try:
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise _write_error(path, error) from None
    try:
        _refuse_unusable_target(path, name=path.name, directory_fd=directory_fd)
        _replace_atomically(path, directory_fd, data)
    finally:
        os.close(directory_fd)


def _replace_atomically(path: Path, directory_fd: int, data: bytes) -> None:
    """Write ``data`` to a temporary file, rename it over ``path``, sync the directory."""
    temp = _temp_name(path.name)
    try:
        _write_temp(directory_fd, temp, data)
        os.replace(temp, path.name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=directory_fd)
        raise _write_error(path, error) from None
    except BaseException:
        # Even an interrupt must not leave a temporary file behind.
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=directory_fd)
        raise
    _sync_directory(path, directory_fd)


def _sync_directory(path: Path, directory_fd: int) -> None:
    """Make the record's new name durable; tolerate file systems that cannot sync a directory."""
    try:
        os.fsync(directory_fd)
    except OSError as error:
        if error.errno not in (errno_codes.EINVAL, errno_codes.ENOTSUP):
            raise _write_error(path, error) from None


# -- reading ------------------------------------------------------------------


def _read_error(path: Path, problem: str, error_number: int | None = None) -> RecordError:
    return RecordError(
        f"cannot read the record: {_shown(path)}: {problem}", path=path, error_number=error_number
    )


def _read_bytes(path: Path) -> bytes:
    """Return the bytes of the regular file at ``path`` (never blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise _read_error(path, _problem(error), error.errno) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise _read_error(path, f"it is {kind}")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > _MAX_RECORD_BYTES:
                raise _read_error(
                    path, f"not a tether record (larger than {_MAX_RECORD_BYTES} bytes)"
                )
        return b"".join(chunks)
    except OSError as error:
        if isinstance(error, RecordError):
            raise
        raise _read_error(path, _problem(error), error.errno) from None
    finally:
        os.close(fd)


def read_record(path: Path) -> dict[str, object]:
    """Return the record at ``path``, or raise :class:`RecordError` if it is not a tether record.

    Checks only what makes a file a record of this version (a JSON object whose
    ``schema_version`` is :data:`RECORD_SCHEMA_VERSION`); validating every field
    is the schema's job (:func:`record_schema`).
    """
    data = _read_bytes(path)
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        raise _read_error(path, "not a tether record (not JSON)") from None
    if not isinstance(document, dict):
        raise _read_error(path, "not a tether record (not a JSON object)")
    version = document.get("schema_version")
    if version == RECORD_SCHEMA_VERSION:
        return document
    if isinstance(version, str) and version.startswith(_SCHEMA_PREFIX):
        raise _read_error(
            path,
            f"record version {version!r} is not supported "
            f"(this tether {__version__} reads {RECORD_SCHEMA_VERSION!r})",
        )
    raise _read_error(
        path, f"not a tether record (schema_version is {version!r}, not {RECORD_SCHEMA_VERSION!r})"
    )


def record_schema() -> dict[str, object]:
    """Return the JSON Schema (draft 2020-12) of the record, as shipped with the package."""
    # Imported here: importlib.resources costs ~25 ms, and only readers of the
    # schema (tests, docs, `tether show --schema`) need it.
    from importlib.resources import files

    text = (files("tether") / "schema" / "record.v1.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    assert isinstance(schema, dict)
    return schema


# -- building -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignalSent:
    """One signal sent to the command's tree: which, when, and to how many processes.

    ``at_seconds`` counts from :attr:`RunFacts.started_monotonic`.
    """

    signal: str
    at_seconds: float
    processes: int


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """What the command's tree cost, from ``wait4``: CPU seconds and peak memory."""

    user_seconds: float
    system_seconds: float
    max_rss_kib: int


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What only the adapter knows about a run; the core's :class:`Verdict` knows the rest.

    ``started_at`` is the wall clock (timezone-aware) at the start, for people;
    ``started_monotonic`` is the same moment on the monotonic clock, for
    arithmetic. ``deadline_seconds`` is ``0`` when there is no deadline.
    ``stragglers`` counts processes still running after the command exited on
    its own, which then had to be stopped. ``containment`` is one of
    :data:`CONTAINMENTS`. Nothing is validated here: these facts are gathered
    when the record is due, and a record must not be lost to a check.
    """

    label: str | None
    started_at: datetime
    started_monotonic: float
    deadline_seconds: float
    grace_seconds: float
    supervisor_pid: int
    command_pid: int | None
    command_pgid: int | None
    hostname: str
    containment: str
    signals: tuple[SignalSent, ...] = ()
    descendants_stopped: int = 0
    stragglers: int = 0
    rusage: ResourceUsage | None = None


def _iso(moment: datetime) -> str:
    """Return ``moment`` in ISO 8601, in UTC, as the seed wrote it (``...+00:00``).

    A naive ``moment`` is taken to be UTC already: building the record must not
    raise, because the record is due exactly when things have gone wrong.
    """
    if moment.utcoffset() is None:
        return moment.replace(tzinfo=UTC).isoformat()
    return moment.astimezone(UTC).isoformat()


def _seconds(value: float) -> float:
    """Round a duration to the millisecond, as the seed did; never below zero."""
    return round(max(value, 0.0), 3)


def _grace(value: float) -> float | None:
    """The grace as JSON can hold it: ``None`` for "never escalate" (an infinite grace)."""
    return None if math.isinf(value) else value


def _launch_error(verdict: Verdict) -> dict[str, object] | None:
    """Return the launch error's errno, its symbolic name and a message, or ``None``.

    Where the errno is known, the message is the bare ``strerror``: the
    supervisor's own message quotes the command's file name (``failed to run
    command 'x'``), and the record must not hold argv. The event log keeps the
    full message, redacted, for the operator.
    """
    number, message = verdict.launch_errno, verdict.launch_error
    if number is None and message is None:
        return None
    if number is not None:
        message = os.strerror(number)
    return {
        "errno": number,
        "errno_name": None if number is None else errno_codes.errorcode.get(number),
        "message": message,
    }


def _signals(signals: tuple[SignalSent, ...]) -> list[dict[str, object]]:
    return [
        {
            "signal": sent.signal,
            "at_seconds": _seconds(sent.at_seconds),
            "processes": sent.processes,
        }
        for sent in signals
    ]


def _rusage(usage: ResourceUsage | None) -> dict[str, object] | None:
    if usage is None:
        return None
    return {
        "user_seconds": _seconds(usage.user_seconds),
        "system_seconds": _seconds(usage.system_seconds),
        "max_rss_kib": usage.max_rss_kib,
    }


def build_document(
    verdict: Verdict, facts: RunFacts, *, finished_at: datetime
) -> dict[str, object]:
    """Return the record of a run the supervisor saw to its end.

    Every field of the seed's record keeps its name and meaning; see
    ``tether/schema/record.v1.json`` for each one.
    """
    shutdown = verdict.shutdown_seconds
    return {
        # The seed's fields, in the seed's order.
        "schema_version": RECORD_SCHEMA_VERSION,
        "variant": facts.label,
        "reason": verdict.reason.value,
        "started_at": _iso(facts.started_at),
        "finished_at": _iso(finished_at),
        "elapsed_seconds": _seconds(verdict.finished_at - facts.started_monotonic),
        "deadline_seconds": facts.deadline_seconds,
        "grace_seconds": _grace(facts.grace_seconds),
        "supervisor_pid": facts.supervisor_pid,
        "eval_pid": facts.command_pid,
        "eval_process_group": facts.command_pgid,
        # As subprocess reports it: negative means killed by that signal.
        "eval_exit_code": verdict.returncode,
        "supervisor_exit_code": verdict.exit_status,
        "escalated_to_sigkill": verdict.escalated_to_sigkill,
        "shutdown_seconds": None if shutdown is None else _seconds(shutdown),
        # What an operator needs beyond the seed.
        "tether_version": __version__,
        "hostname": facts.hostname,
        "containment": facts.containment,
        "signals": _signals(facts.signals),
        "descendants_stopped": facts.descendants_stopped,
        "stragglers": facts.stragglers,
        "unkillable": verdict.unkillable,
        "rusage": _rusage(facts.rusage),
        "launch_error": _launch_error(verdict),
        "tether_error": None,
    }


def build_caller_document(
    *,
    reason: Reason = Reason.SUPERVISOR_LOST,
    label: str | None,
    started_at: datetime,
    finished_at: datetime,
    elapsed_seconds: float,
    deadline_seconds: float | None,
    grace_seconds: float | None,
    supervisor_pid: int | None,
    command_pid: int | None = None,
    command_pgid: int | None = None,
    message: str,
    hostname: str | None = None,
) -> dict[str, object]:
    """Return a record written by a caller rather than by a supervisor.

    Two cases: a supervisor that vanished without a word (``supervisor_lost``),
    and a command line refused before anything was started (``launch_failed``:
    a bad duration, an unusable ``--parent-fd``). Either way the record says
    only what the caller knows: the exit status is tether's own failure (125),
    the containment ``unknown``, a duration that could not be read ``null``,
    and the counts only a supervisor keeps are ``null`` rather than a
    reassuring ``0``. ``message`` (one line, no argv) says what the caller saw,
    in ``tether_error``. ``hostname`` defaults to this machine's node name.
    """
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "variant": label,
        "reason": reason.value,
        "started_at": _iso(started_at),
        "finished_at": _iso(finished_at),
        "elapsed_seconds": _seconds(elapsed_seconds),
        "deadline_seconds": deadline_seconds,
        "grace_seconds": None if grace_seconds is None else _grace(grace_seconds),
        "supervisor_pid": supervisor_pid,
        "eval_pid": command_pid,
        "eval_process_group": command_pgid,
        "eval_exit_code": None,
        "supervisor_exit_code": TETHER_FAILED,
        "escalated_to_sigkill": False,
        "shutdown_seconds": None,
        "tether_version": __version__,
        "hostname": os.uname().nodename if hostname is None else hostname,
        "containment": "unknown",
        "signals": [],
        "descendants_stopped": None,
        "stragglers": None,
        "unkillable": False,
        "rusage": None,
        "launch_error": None,
        "tether_error": " ".join(message.split()),
    }

"""The file a run's record lives in: checked before the run, written once, read back
(docs/record.md, "Where the evidence goes, and what a fault costs").
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import math
import os
import stat

from tether._version import __version__
from tether.shared.paths import events_name_for, normal_path, parent_and_name, with_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path
    from typing import Final

    from tether.core.redaction import Redactor

#: The record's ``schema_version``; a reader refuses anything else.
RECORD_SCHEMA_VERSION: Final = "tether.record.v1"

RECORD_FILE_MODE: Final = 0o600

#: Owner only, for every directory tether creates to hold a record.
RECORD_DIRECTORY_MODE: Final = 0o700

#: A record is a few kilobytes; this bounds reading one (``tether show /dev/zero``).
_MAX_RECORD_BYTES: Final = 1 << 20

#: How much of the record's name a temporary file repeats, within ``NAME_MAX``.
_TEMP_STEM_BYTES: Final = 128

_SCHEMA_PREFIX: Final = "tether.record."

#: One step of the walk: a directory, never a link, looked at without being read.
_STEP_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: The directory held for the run: readable, because only then can it be fsync-ed.
_HELD_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

#: As many links as the kernel follows in one lookup (``MAXSYMLINKS``).
_MAX_LINKS_FOLLOWED: Final = 40


class RecordError(OSError):
    """A record could not be checked, written or read; the message is one line for a person."""

    def __init__(self, message: str, *, path: Path | str, error_number: int | None = None) -> None:
        from pathlib import Path

        super().__init__(message)
        self.path = Path(path)
        self.errno = error_number

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_record_error, (str(self.args[0]), self.path, self.errno))


def _rebuild_record_error(message: str, path: Path, error_number: int | None) -> RecordError:
    return RecordError(message, path=path, error_number=error_number)


def _shown(path: Path | str) -> str:
    """Return ``path`` for a one-line message: as is, or quoted if it holds control characters."""
    text = os.fsdecode(path)
    return text if text.isprintable() else repr(text)


def _problem(error: OSError) -> str:
    """Return the system's words for ``error`` (not ``str(error)``, which adds paths)."""
    if error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


def open_record_directory(directory: Path | str) -> int:
    """A read-only descriptor of ``directory``, made ``0700`` where missing, found safely."""
    try:
        found = _walk(directory)
    except RecordError:
        raise
    except OSError as error:
        raise _directory_error(directory, error) from None
    try:
        return os.open(".", _HELD_FLAGS, dir_fd=found)
    except OSError as error:
        raise _directory_error(directory, error) from None
    finally:
        os.close(found)


def ensure_private_directory(path: Path) -> None:
    """Make ``path`` and any missing parents with mode ``0700``; accept an existing directory."""
    os.close(open_record_directory(path))


def _components(text: str) -> list[str]:
    """The names along a path, last first (so that ``pop()`` gives the next), without ``.``."""
    return [name for name in reversed(text.split("/")) if name not in ("", ".")]


def _walk(directory: Path | str) -> int:
    """Return an ``O_PATH`` descriptor of ``directory``, reached through trusted links only."""
    text = os.fsdecode(directory)
    where = "/" if text.startswith("/") else "."
    current = os.open(where, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    pending = _components(text)
    followed = 0
    try:
        while pending:
            name = pending.pop()
            shown = os.path.join(where, name)
            found = _open_component(current, name, shown=shown, directory=directory)
            if isinstance(found, int):
                os.close(current)
                current, where = found, shown
                continue
            followed += 1
            if followed > _MAX_LINKS_FOLLOWED:
                raise _directory_error(directory, OSError(errno_codes.ELOOP, ""))
            pending += _components(found)
            if found.startswith("/"):
                root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                os.close(current)
                current, where = root, "/"
        return current
    except BaseException:
        os.close(current)
        raise


def _open_component(
    parent: int, name: str, *, shown: str, directory: Path | str, may_make: bool = True
) -> int | str:
    """Open directory ``name`` in ``parent`` (made if missing), or a trusted link's target."""
    try:
        return os.open(name, _STEP_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not may_make:
            raise
        made = _make_directory(parent, name, shown=shown)
        if made is not None:
            return made
        # Made by someone else meanwhile (another tether): used as it is found.
        return _open_component(parent, name, shown=shown, directory=directory, may_make=False)
    except NotADirectoryError:
        return _trusted_link_target(parent, name, shown=shown, directory=directory)


def _make_directory(parent: int, name: str, *, shown: str) -> int | None:
    """Make directory ``name`` in ``parent``, ``0700``, and open it; ``None`` if it exists."""
    try:
        os.mkdir(name, RECORD_DIRECTORY_MODE, dir_fd=parent)
    except FileExistsError:
        return None
    except OSError as error:
        message = f"cannot create the record directory {_shown(shown)}: {_problem(error)}"
        raise RecordError(message, path=shown, error_number=error.errno) from None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        made = os.open(name, flags, dir_fd=parent)
    except PermissionError:
        # umask 0777 made a directory its maker cannot open: its mode first.
        _make_private(parent, name)
        made = os.open(name, flags, dir_fd=parent)
    try:
        if os.fstat(made).st_uid == os.geteuid():
            os.fchmod(made, RECORD_DIRECTORY_MODE)
    except BaseException:
        os.close(made)
        raise
    return made


def _make_private(parent: int, name: str) -> None:
    """Set directory ``name`` in ``parent`` to ``0700`` if ours, through its own descriptor."""
    found = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        if os.fstat(found).st_uid == os.geteuid():
            os.chmod(f"/proc/self/fd/{found}", RECORD_DIRECTORY_MODE)
    finally:
        os.close(found)


def _trusted_link_target(parent: int, name: str, *, shown: str, directory: Path | str) -> str:
    """Return the target of link ``name`` if root or the effective user owns it; else refuse."""
    link = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    try:
        status = os.fstat(link)
        if not stat.S_ISLNK(status.st_mode):
            raise RecordError(
                f"cannot create the record directory {_shown(directory)}: "
                f"{_shown(shown)} is not a directory",
                path=directory,
                error_number=errno_codes.ENOTDIR,
            )
        if status.st_uid not in (0, os.geteuid()):
            raise RecordError(
                f"cannot write the record: {_shown(shown)} is a symbolic link owned by uid "
                f"{status.st_uid}, neither root nor you (refusing to follow it)",
                path=shown,
                error_number=errno_codes.ELOOP,
            )
        return os.readlink("", dir_fd=link)
    finally:
        os.close(link)


def _directory_error(directory: Path | str, error: OSError) -> RecordError:
    message = f"cannot write the record: directory {_shown(directory)}: {_problem(error)}"
    return RecordError(message, path=directory, error_number=error.errno)


def hold_record_directory(path: Path | str) -> int:
    """Check before the run that a record can be written at ``path``; return its directory, held."""
    text = normal_path(os.fspath(path))
    parent, name = parent_and_name(text)
    directory_fd = open_record_directory(parent)
    try:
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=directory_fd):
            message = f"cannot write the record: directory {_shown(parent)} is not writable"
            raise RecordError(message, path=parent, error_number=errno_codes.EACCES)
        _refuse_unusable_target(text, name, directory_fd)
        events = events_name_for(name)
        _refuse_unusable_target(with_name(text, events), events, directory_fd, what="the event log")
    except BaseException:
        os.close(directory_fd)
        raise
    return directory_fd


def check_record_path(path: Path | str) -> None:
    """:func:`hold_record_directory`, letting go of the directory at once."""
    os.close(hold_record_directory(path))


def _refuse_unusable_target(
    path: str, name: str, directory_fd: int, *, what: str = "the record"
) -> None:
    """Refuse ``path`` (``name`` in ``directory_fd``) unless missing or a regular file."""
    if name in ("", ".."):
        raise RecordError(f"cannot write {what}: {_shown(path)} is a directory", path=path)
    try:
        status = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as error:
        raise _write_error(path, error, what=what) from None
    kind = _kind_refused(status.st_mode)
    if kind is not None:
        raise RecordError(f"cannot write {what}: {_shown(path)} is {kind}", path=path)


#: How to name what must not be replaced at a record's (or event log's) name.
_KINDS_REFUSED: Final = (
    (stat.S_ISLNK, "a symbolic link (refusing to replace or follow it)"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "not a regular file (a FIFO)"),
    (stat.S_ISSOCK, "not a regular file (a socket)"),
    (stat.S_ISCHR, "not a regular file (a device)"),
    (stat.S_ISBLK, "not a regular file (a device)"),
)


def _kind_refused(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    for is_kind, kind in _KINDS_REFUSED:
        if is_kind(mode):
            return kind
    return "not a regular file"


def _write_error(path: Path | str, error: OSError, *, what: str = "the record") -> RecordError:
    message = f"cannot write {what}: {_shown(path)}: {_problem(error)}"
    return RecordError(message, path=path, error_number=error.errno)


def _serialise(path: Path, document: object) -> bytes:
    """``document`` as the record's bytes: sorted, indented, ASCII, no NaN (``jq`` reads it)."""
    import json  # here, not at the top: the seed door checks the record's path without it

    try:
        text = json.dumps(document, sort_keys=True, indent=2, allow_nan=False)
    except (TypeError, ValueError) as error:
        message = f"cannot write the record: {_shown(path)}: not serialisable as JSON ({error})"
        raise RecordError(message, path=path) from None
    return (text + "\n").encode("ascii")


def _temp_name(name: str) -> str:
    stem = os.fsdecode(os.fsencode(name)[:_TEMP_STEM_BYTES])
    return f".{stem}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


def _write_all(fd: int, data: bytes) -> None:
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


def write_record(
    path: Path,
    document: Mapping[str, object],
    *,
    redactor: Redactor,
    directory_fd: int | None = None,
) -> None:
    """Write ``document``, redacted, atomically and privately, in ``directory_fd`` when given."""
    data = _serialise(path, redactor.redact(document))
    if directory_fd is not None:
        _write_in(path, directory_fd, data)
        return
    held = open_record_directory(path.parent)
    try:
        _write_in(path, held, data)
    finally:
        os.close(held)


def write_evidence(path: Path, data: bytes, *, what: str = "the event log") -> None:
    """Write ``data`` (already redacted evidence) to ``path`` as :func:`write_record` would."""
    held = open_record_directory(path.parent)
    try:
        _refuse_unusable_target(str(path), path.name, held, what=what)
        _replace_atomically(path, held, data)
    finally:
        os.close(held)


def _write_in(path: Path, directory_fd: int, data: bytes) -> None:
    _refuse_unusable_target(str(path), path.name, directory_fd)
    _replace_atomically(path, directory_fd, data)


def _replace_atomically(path: Path, directory_fd: int, data: bytes) -> None:
    """Write ``data`` to a temporary file, rename it over ``path``, sync the directory."""
    temp = _temp_name(path.name)
    try:
        _write_temp(directory_fd, temp, data)
        os.replace(temp, path.name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=directory_fd)
        raise _failure_in(path, directory_fd, error) from None
    except BaseException:
        # Even an interrupt must not leave a temporary file behind.
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=directory_fd)
        raise
    _sync_directory(path, directory_fd)


def _failure_in(path: Path, directory_fd: int, error: OSError) -> RecordError:
    if error.errno == errno_codes.ENOENT and _removed(directory_fd):
        return RecordError(
            f"cannot write the record: {_shown(path)}: its directory was removed "
            "(the record is not written anywhere else)",
            path=path,
            error_number=error.errno,
        )
    return _write_error(path, error)


def _removed(directory_fd: int) -> bool:
    try:
        return os.fstat(directory_fd).st_nlink == 0
    except OSError:
        return False


def _sync_directory(path: Path, directory_fd: int) -> None:
    try:
        os.fsync(directory_fd)
    except OSError as error:
        if error.errno not in (errno_codes.EINVAL, errno_codes.ENOTSUP):
            raise _write_error(path, error) from None


# Reading is bounded in everything a file controls (size, kind, what its JSON holds):
# docs/record.md, "Reading records".

#: How deeply a document may nest (a record nests three levels, an event-log line two).
_MAX_JSON_DEPTH: Final = 32

#: The longest integer read, in digits: ``sys.int_info.str_digits_check_threshold``.
_MAX_INT_DIGITS: Final = 640


class JSONRefused(ValueError):
    """Bytes that are not JSON a reader will hold; the message says why, in a few words."""


def _refuse_constant(name: str) -> object:
    raise JSONRefused(f"holds {name}, which JSON does not allow")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise JSONRefused("holds a number too large for a float")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise JSONRefused(f"holds an integer of more than {_MAX_INT_DIGITS} digits")
    return int(text)


def _nests_too_deeply(value: object) -> bool:
    """Whether any container in ``value`` lies deeper than :data:`_MAX_JSON_DEPTH` (iteratively)."""
    pending: list[tuple[dict[str, object] | list[object], int]] = []
    if isinstance(value, dict | list):
        pending.append((value, 1))
    while pending:
        container, depth = pending.pop()
        if depth > _MAX_JSON_DEPTH:
            return True
        children: Iterable[object] = (
            container.values() if isinstance(container, dict) else container
        )
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def parse_bounded_json(data: bytes) -> object:
    """``data`` as JSON, or :class:`JSONRefused`: no NaN or infinity, bounded integers and depth."""
    import json

    try:
        value = json.loads(
            data, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
    except JSONRefused:
        raise
    except RecursionError:
        raise JSONRefused(f"nested deeper than {_MAX_JSON_DEPTH} levels") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise JSONRefused("not JSON") from None
    # Only so many brackets cannot nest deeper than their number: no walk needed.
    brackets = data.count(b"[") + data.count(b"{")
    if brackets > _MAX_JSON_DEPTH and _nests_too_deeply(value):
        raise JSONRefused(f"nested deeper than {_MAX_JSON_DEPTH} levels")
    return value


def _read_error(path: Path, problem: str, error_number: int | None = None) -> RecordError:
    message = f"cannot read the record: {_shown(path)}: {problem}"
    return RecordError(message, path=path, error_number=error_number)


def _kind_unreadable(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return "it is a directory" if stat.S_ISDIR(mode) else "it is not a regular file"


def _read_bytes(path: Path) -> bytes:
    """The bytes of the regular file at ``path`` (checked before and after opening), bounded."""
    try:
        kind = _kind_unreadable(os.stat(path).st_mode)
        if kind is not None:
            raise _read_error(path, kind)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except RecordError:
        raise
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise _read_error(path, _reason(error), getattr(error, "errno", None)) from None
    try:
        kind = _kind_unreadable(os.fstat(fd).st_mode)
        if kind is not None:
            raise _read_error(path, kind)
        data = _read_at_most(fd, _MAX_RECORD_BYTES + 1)
    except RecordError:
        raise
    except OSError as error:
        raise _read_error(path, _problem(error), error.errno) from None
    finally:
        os.close(fd)
    if len(data) > _MAX_RECORD_BYTES:
        raise _read_error(path, f"not a tether record (larger than {_MAX_RECORD_BYTES} bytes)")
    return data


def _reason(error: OSError | ValueError) -> str:
    return _problem(error) if isinstance(error, OSError) else "not a usable path"


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(1 << 16, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_record(path: Path) -> dict[str, object]:
    """The record at ``path`` (a JSON object of this schema version; fields unchecked), bounded."""
    data = _read_bytes(path)
    try:
        document = parse_bounded_json(data)
    except JSONRefused as refusal:
        raise _read_error(path, f"not a tether record ({refusal})") from None
    if not isinstance(document, dict):
        raise _read_error(path, "not a tether record (not a JSON object)")
    version = document.get("schema_version")
    if version == RECORD_SCHEMA_VERSION:
        return document
    if isinstance(version, str) and version.startswith(_SCHEMA_PREFIX):
        raise _read_error(
            path,
            f"record version {_brief(version)} is not supported "
            f"(this tether {__version__} reads {RECORD_SCHEMA_VERSION!r})",
        )
    raise _read_error(
        path,
        f"not a tether record (schema_version is {_brief(version)}, not {RECORD_SCHEMA_VERSION!r})",
    )


def record_schema() -> dict[str, object]:
    """The record's JSON Schema, read beside the code (``importlib.resources`` is slow to load)."""
    import json
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "schema" / "record.v1.json").read_text(
        encoding="utf-8"
    )
    schema = json.loads(text)
    assert isinstance(schema, dict)
    return schema

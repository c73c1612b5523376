"""The file a run's record lives in: checked before the run, written once, read back.

The record is the only evidence, after the fact, of how a run ended — in
particular that a command whose caller was hard-killed was stopped rather than
left running. So it is written *once*, *atomically*, *privately*, and *only
where it was meant to go*:

*Atomically*, because a reader (``tether show``, ``jq``, a CI step that waits
for the file) must see either no record or a whole one, never half of one,
even if the supervisor is killed mid-write or the machine loses power. The
document goes to a temporary file in the record's own directory (``rename`` is
atomic only within one file system), which is written, ``fsync``-ed,
``os.replace``-d over the record path, and then the directory is ``fsync``-ed
so the new name itself survives a crash. Whatever fails, the temporary file is
removed: a failed write leaves nothing behind.

*Held by descriptor.* The record's directory is looked up once, before the
command starts (:func:`hold_record_directory`), and from then on only its
descriptor is used: the temporary file, the rename, the directory's ``fsync``
and the event log beside the record all go through ``dir_fd``. Nothing that
happens to the *path* during the run (``rm -rf runs; ln -s /etc runs``) can
redirect a write, which matters most when tether runs as root: a directory
that was removed stays removed, and writing into it fails with one line
instead of landing elsewhere. (A directory that was merely renamed still gets
its record, under its new name.)

*Looked up without trusting strangers' links.* ``O_NOFOLLOW`` guards only the
last component of a path, so the lookup walks the path one component at a
time from ``/`` (or from the working directory), each component opened
``O_PATH|O_DIRECTORY|O_NOFOLLOW`` relative to the one before. A component that
is a symbolic link is followed only if the link belongs to root or to the
effective user: nobody else can have planted it. That is the idea of the
kernel's ``protected_symlinks`` made stricter, and it keeps ``/home ->
/usr/home`` and an operator's own links working while a link another user
placed anywhere on the path is refused in one line. The link is itself opened
(``O_PATH``), and its owner and target are read from that descriptor, so it
cannot be swapped between the check and the read. Missing directories are
made in the same walk (``mkdirat``, then opened without following), so no
link can be slipped in between making a directory and using it.
``openat2(RESOLVE_NO_SYMLINKS)`` would refuse every link, root's own included,
and needs Linux 5.6; the walk works everywhere for a few system calls per
component.

*Privately*, because the record is written by a process that may hold
credentials in its environment: the file is created ``0600`` (and ``fchmod``-ed
to be exact whatever the umask), and a directory tether creates for it is
``0700``, parents included. A directory that already exists belongs to the
operator and is left as it is: chmod-ing ``/tmp`` to ``0700`` would be a far
worse surprise than a private file in a shared directory. The record never
holds argv or environment values; nothing here even receives them.

*What is at the record's name.* The temporary file is opened
``O_CREAT|O_EXCL|O_NOFOLLOW``, so nobody can point it elsewhere. A symbolic
link already sitting at the record path is refused, before the run
(:func:`hold_record_directory`) and again at write time, rather than silently
replaced: an operator who put it there expects the record to land where it
points, and following it is exactly what a hostile link in a shared directory
would want. (Should a link appear between that last check and the rename,
``rename`` replaces the link itself and never writes through it, so the race
can only cost the link, never another file.) Anything else that is not a
regular file — a directory, a FIFO, ``/dev/null`` — is refused too: replacing
a device node with a record, as root, is not a favour to anyone. The event
log's name beside the record is checked the same way before the run, because
the supervisor that writes the log must never block on a FIFO or write through
a link.

Reading and writing the file is kept apart from building the document
(:mod:`tether.shared.record_document`) so that checking a record path before a run, which
every door does before it starts the command, costs little: this module
imports neither ``dataclasses`` nor ``typing`` at run time, nor the core, nor
``pathlib`` (the checks before a run take the record path as a string, read as
``pathlib`` reads one; the ``Path`` objects other callers pass work the same).
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

__all__ = [
    "RECORD_DIRECTORY_MODE",
    "RECORD_FILE_MODE",
    "RECORD_SCHEMA_VERSION",
    "JSONRefused",
    "RecordError",
    "check_record_path",
    "ensure_private_directory",
    "hold_record_directory",
    "open_record_directory",
    "parse_bounded_json",
    "read_record",
    "record_schema",
    "write_evidence",
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

#: One step of the walk: a directory, never a link, looked at without being read.
_STEP_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: The directory held for the run: readable, because only then can it be fsync-ed.
_HELD_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC

#: As many links as the kernel follows in one lookup (``MAXSYMLINKS``).
_MAX_LINKS_FOLLOWED: Final = 40


class RecordError(OSError):
    """A record could not be checked, written or read; the message is one line for a person.

    An :class:`OSError` so that code which already treats "the file system said
    no" as one case keeps doing so. ``path`` is the file or directory concerned;
    ``errno`` is the underlying error number where there is one.
    """

    def __init__(self, message: str, *, path: Path | str, error_number: int | None = None) -> None:
        # Here, not with the module: a path refused is no reason to load pathlib
        # on every run's way to its launch, where record paths are strings.
        from pathlib import Path

        super().__init__(message)
        self.path = Path(path)
        self.errno = error_number

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by the keywords (:class:`OSError` would rebuild ``RecordError(message)``)."""
        return (_rebuild_record_error, (str(self.args[0]), self.path, self.errno))


def _rebuild_record_error(message: str, path: Path, error_number: int | None) -> RecordError:
    return RecordError(message, path=path, error_number=error_number)


# -- paths --------------------------------------------------------------------


def _shown(path: Path | str) -> str:
    """Return ``path`` for a one-line message: as is, or quoted if it holds control characters."""
    text = os.fsdecode(path)
    return text if text.isprintable() else repr(text)


def _problem(error: OSError) -> str:
    """Return the system's words for ``error`` (not ``str(error)``, which adds paths)."""
    if error.errno is not None:
        return os.strerror(error.errno)
    return str(error) or type(error).__name__


# -- the record's directory, held by descriptor --------------------------------


def open_record_directory(directory: Path | str) -> int:
    """Return a descriptor of ``directory``, made ``0700`` where missing, found safely.

    Walks the path as the module says: a symbolic link on the way is followed
    only if root or the effective user owns it. The descriptor is read-only
    and close-on-exec; the caller closes it. Raises :class:`RecordError` if a
    part of the path is not a directory, is a stranger's link, or cannot be
    made or opened. An existing directory's mode is left alone.
    """
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
    """Make ``path`` and any missing parents with mode ``0700``; accept an existing directory.

    Raises :class:`RecordError` as :func:`open_record_directory` does.
    """
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
    """Open directory ``name`` in ``parent`` (made if missing), or return a trusted link's target.

    ``may_make`` is ``False`` on the second look, after someone else made it.
    """
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
        raise RecordError(
            f"cannot create the record directory {_shown(shown)}: {_problem(error)}",
            path=shown,
            error_number=error.errno,
        ) from None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        made = os.open(name, flags, dir_fd=parent)
    except PermissionError:
        # A umask without the owner's read (umask 0777) made a directory its
        # maker cannot open: give it its mode first, then open it.
        _make_private(parent, name)
        made = os.open(name, flags, dir_fd=parent)
    try:
        # mkdir's mode is masked by the umask; say exactly what was meant (of
        # this very directory, found without following anything).
        if os.fstat(made).st_uid == os.geteuid():
            os.fchmod(made, RECORD_DIRECTORY_MODE)
    except BaseException:
        os.close(made)
        raise
    return made


def _make_private(parent: int, name: str) -> None:
    """Set directory ``name`` in ``parent`` to ``0700``, if it is the effective user's own.

    Through an ``O_PATH`` descriptor of the directory itself (found without
    following a link, and opened without any permission on it) and its
    ``/proc/self/fd`` name, never through the name in ``parent``, which could
    lead elsewhere by then.
    """
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
    """Wrap ``error`` as the one-line failure to use the record's directory."""
    return RecordError(
        f"cannot write the record: directory {_shown(directory)}: {_problem(error)}",
        path=directory,
        error_number=error.errno,
    )


def hold_record_directory(path: Path | str) -> int:
    """Check before the run that a record can be written at ``path``; return its directory, held.

    Returns the record directory's descriptor (see :func:`open_record_directory`),
    which the caller keeps for the whole run and closes. Creates the
    directory (``0700``) if it is missing, and raises :class:`RecordError` if
    it cannot be created, opened or written, if ``path`` is a directory, a
    symbolic link or some other non-regular file, or if the event log's name
    beside it is. What cannot be known in advance (a full disk, a directory
    removed later) is :func:`write_record`'s to report.
    """
    # As strings, read as pathlib reads them: the run's way to its launch has no pathlib.
    text = normal_path(os.fspath(path))
    parent, name = parent_and_name(text)
    directory_fd = open_record_directory(parent)
    try:
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=directory_fd):
            raise RecordError(
                f"cannot write the record: directory {_shown(parent)} is not writable",
                path=parent,
                error_number=errno_codes.EACCES,
            )
        _refuse_unusable_target(text, name, directory_fd)
        events = events_name_for(name)
        _refuse_unusable_target(with_name(text, events), events, directory_fd, what="the event log")
    except BaseException:
        os.close(directory_fd)
        raise
    return directory_fd


def check_record_path(path: Path | str) -> None:
    """Check, before any command starts, that a record can be written at ``path``.

    :func:`hold_record_directory`, letting go of the directory at once.
    """
    os.close(hold_record_directory(path))


def _refuse_unusable_target(
    path: str, name: str, directory_fd: int, *, what: str = "the record"
) -> None:
    """Raise :class:`RecordError` unless ``path`` (``name`` in the directory held as
    ``directory_fd``) is missing or an existing regular file.

    Looked at in the held directory without following: a symbolic link is
    refused as a link, whatever it points at.
    """
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
    """Return how to name a file of this ``mode`` that must not be replaced, or ``None``."""
    if stat.S_ISREG(mode):
        return None
    for is_kind, kind in _KINDS_REFUSED:
        if is_kind(mode):
            return kind
    return "not a regular file"


def _write_error(path: Path | str, error: OSError, *, what: str = "the record") -> RecordError:
    """Wrap ``error`` as the one-line failure to write the record at ``path``."""
    return RecordError(
        f"cannot write {what}: {_shown(path)}: {_problem(error)}",
        path=path,
        error_number=error.errno,
    )


# -- writing ------------------------------------------------------------------


def _serialise(path: Path, document: object) -> bytes:
    """Return ``document`` as the record's bytes: sorted keys, indent 2, a final newline.

    ASCII-only (``\\u`` escapes) so that a label with odd bytes in it still makes
    valid JSON, and NaN is refused because ``jq`` cannot read it.
    """
    import json  # here, not at the top: the seed door checks the record's path without it

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


def write_record(
    path: Path,
    document: Mapping[str, object],
    *,
    redactor: Redactor,
    directory_fd: int | None = None,
) -> None:
    """Write ``document``, redacted, to ``path`` atomically and privately.

    Every record goes through here, whoever writes it, and ``redactor`` is not
    optional: no writer can forget the caller's secrets. ``directory_fd`` is
    the record's directory as held since before the run
    (:func:`hold_record_directory`): the record goes there and nowhere else,
    whatever became of the path meanwhile. Without it the directory is looked
    up (and made) now, as :func:`open_record_directory` does. Raises
    :class:`RecordError` (and leaves no temporary file) if the document is not
    JSON, if ``path`` is a directory, a symbolic link or another non-regular
    file, if the held directory has been removed, or if any step fails. An
    existing regular file at ``path`` is replaced.
    """
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
    """Write ``data`` to ``path`` atomically and privately, as :func:`write_record` would.

    For evidence that is already what it should be (an event log brought from
    another host, redacted where it was written): the same directory checks,
    the same temporary file, rename and fsync, no JSON and no redaction.
    """
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
    """The one-line failure to write in the held directory; says so if it was removed."""
    if error.errno == errno_codes.ENOENT and _removed(directory_fd):
        return RecordError(
            f"cannot write the record: {_shown(path)}: its directory was removed "
            "(the record is not written anywhere else)",
            path=path,
            error_number=error.errno,
        )
    return _write_error(path, error)


def _removed(directory_fd: int) -> bool:
    """Whether the held directory has been removed (it has no name left)."""
    try:
        return os.fstat(directory_fd).st_nlink == 0
    except OSError:
        return False


def _sync_directory(path: Path, directory_fd: int) -> None:
    """Make the record's new name durable; tolerate file systems that cannot sync a directory."""
    try:
        os.fsync(directory_fd)
    except OSError as error:
        if error.errno not in (errno_codes.EINVAL, errno_codes.ENOTSUP):
            raise _write_error(path, error) from None


# -- reading ------------------------------------------------------------------
#
# Records are read by people reviewing runs, often from a directory anything
# could have been dropped into, so reading is bounded in everything a file
# controls: its size (read_record), the kind of file (nothing but a regular
# file is even opened), and what the JSON may hold (parse_bounded_json). What is read
# can then be printed, compared and serialised again without any care: no
# value nests deeply enough to exhaust the interpreter's recursion, no number
# is NaN or infinite, and no integer is too long to print. The event-log reader
# of ``tether show`` parses its lines with the same parse_bounded_json.

#: How deeply a document may nest. A record nests three levels deep and an
#: event-log line two; this keeps every later recursion (printing, ``json.dumps``,
#: comparing) far below the interpreter's limit.
_MAX_JSON_DEPTH: Final = 32

#: The longest integer read, in digits: the least limit Python can be set to for
#: converting integers to and from text (``sys.int_info.str_digits_check_threshold``),
#: so an integer that was read can always be printed again, and reading one is never slow.
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
    """Whether any container in ``value`` lies deeper than :data:`_MAX_JSON_DEPTH`.

    Iterative, so that measuring a deep value cannot itself run out of stack.
    """
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
    """Return ``data`` as a JSON value, bounded so that it is safe to print and compare.

    Raise :class:`JSONRefused` if ``data`` is not JSON (or not UTF-8), holds
    ``NaN``, ``Infinity`` or a number beyond a float's range (Python's json takes
    them; ``jq`` and every comparison choke on them), an integer of more than
    :data:`_MAX_INT_DIGITS` digits, or nests deeper than :data:`_MAX_JSON_DEPTH`.
    """
    import json

    try:
        value = json.loads(
            data,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except JSONRefused:
        raise
    except RecursionError:
        # json recurses once per level and stops at the interpreter's limit.
        raise JSONRefused(f"nested deeper than {_MAX_JSON_DEPTH} levels") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise JSONRefused("not JSON") from None
    # Only so many brackets cannot nest deeper than their number: no walk needed.
    brackets = data.count(b"[") + data.count(b"{")
    if brackets > _MAX_JSON_DEPTH and _nests_too_deeply(value):
        raise JSONRefused(f"nested deeper than {_MAX_JSON_DEPTH} levels")
    return value


def _read_error(path: Path, problem: str, error_number: int | None = None) -> RecordError:
    return RecordError(
        f"cannot read the record: {_shown(path)}: {problem}", path=path, error_number=error_number
    )


def _kind_unreadable(mode: int) -> str | None:
    """How to name a file of this ``mode`` that is never read as a record, or ``None``."""
    if stat.S_ISREG(mode):
        return None
    return "it is a directory" if stat.S_ISDIR(mode) else "it is not a regular file"


def _read_bytes(path: Path) -> bytes:
    """Return the bytes of the regular file at ``path``, at most :data:`_MAX_RECORD_BYTES`.

    Anything but a regular file is refused before it is opened (opening a
    device can have effects of its own) and again once it is (it may have been
    swapped in between); it is opened non-blocking, so a FIFO that appears in
    between does not block either.
    """
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
    """Read from ``fd`` until end of file or ``limit`` bytes, whichever comes first."""
    chunks: list[bytes] = []
    size = 0
    while size < limit and (chunk := os.read(fd, min(1 << 16, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _brief(value: object) -> str:
    """``repr(value)`` for a one-line message, cut short if long."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_record(path: Path) -> dict[str, object]:
    """Return the record at ``path``, or raise :class:`RecordError` if it is not a tether record.

    Checks only what makes a file a record of this version (a JSON object whose
    ``schema_version`` is :data:`RECORD_SCHEMA_VERSION`); validating every field
    is the schema's job (:func:`record_schema`). What is returned is bounded as
    :func:`parse_bounded_json` says; any field may still hold any JSON type.
    """
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
    """Return the JSON Schema (draft 2020-12) of the record, as shipped with the package.

    Read from beside the package's code (``tether/schema/record.v1.json``), not
    through ``importlib.resources``, which costs tens of milliseconds to import:
    the supervisor reads the schema's field names for every record it redacts.
    """
    import json
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "schema" / "record.v1.json").read_text(
        encoding="utf-8"
    )
    schema = json.loads(text)
    assert isinstance(schema, dict)
    return schema

"""Building a run's request: what every door was given, checked once, as one :class:`RunSpec`.

:func:`build_request` turns each door's options (``--deadline``, ``DURATION``,
``deadline=``...) into one spec: durations parsed, defaults defined once
(:mod:`tether.core.spec`), the record's path chosen and checked; nothing starts until it
all passed. :class:`RequestError` (a :class:`ValueError`) names the option as the door
spells it; a :class:`TypeError` is a program's mistake. A default record directory that
cannot be written costs no run: the run goes on without a record, warned once
(:func:`warn_no_record_once`); a named one is refused. ``docs/record.md`` says more.
"""

from __future__ import annotations

import math
import os

from tether.core.durations import DurationError, duration_seconds
from tether.core.limits import LimitError, limit_controllers, limit_files_v1, parse_limits
from tether.core.spec import DEFAULT_GRACE_SECONDS, DEFAULT_STOP_SIGNAL, RunSpec

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Final

__all__ = [
    "MAX_LABEL_CHARACTERS",
    "LimitsUnavailable",
    "RequestError",
    "build_request",
    "command_words",
    "ignored_now",
    "limits_refusal",
    "record_choice",
    "record_path_for",
    "umask_in",
    "warn_no_record_once",
]

#: How the API names its options in messages; each door passes its own words.
_API_NAMES: Final = {"deadline": "deadline", "grace": "grace", "label": "label"}

#: The longest label a request takes, in characters. A label names a run in a
#: table; the record that keeps it must stay far below the size a reader of
#: records accepts (1 MiB), even with every character written as a ``\\u``
#: escape, or the evidence of the run could not be read back.
MAX_LABEL_CHARACTERS: Final = 4096


class RequestError(ValueError):
    """A request that cannot be run: one line for a person; ``option`` names the option wrong
    (its API name: ``argv``, ``deadline``, ``grace``, ``label``, ``record``, a limit's name)."""

    def __init__(self, message: str, *, option: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle by the keyword (the default would call ``RequestError(message)``)."""
        return (_rebuild_request_error, (type(self), str(self.args[0]), self.option))


def _rebuild_request_error(kind: type[RequestError], message: str, option: str) -> RequestError:
    return kind(message, option=option)


class LimitsUnavailable(RequestError):
    """Limits asked for where nothing can enforce them: the machine's shape, not a typing
    mistake (status 125); nothing was started."""


def build_request(
    argv: Sequence[str | os.PathLike[str]],
    *,
    asked_at: float,
    deadline: object = None,
    grace: object = DEFAULT_GRACE_SECONDS,
    record: object = None,
    label: object = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stop_signal: str = DEFAULT_STOP_SIGNAL,
    record_argv: object = False,
    flags: Mapping[str, str] = _API_NAMES,
    ignored_signals: Sequence[int] | None = None,
    join_group: int | None = None,
    limits: Mapping[str, object] | None = None,
    own_caller: bool = False,
    idle: object = None,
) -> RunSpec:
    """Check what a door was given and return the request, or raise (see the module).

    ``deadline``/``idle`` ``None`` or ``0``: none; ``grace`` ``None``: never SIGKILL; ``record``
    ``None``/``True``/path/``False`` (``docs/api.md``); ``flags``: the door's names for messages;
    ``ignored_signals``: default :func:`ignored_now`; ``join_group``: the caller's group, for a
    command on its terminal; ``own_caller``: ``tether run`` itself, which may move into a leaf."""
    words = command_words(argv)
    deadline_seconds = _seconds(deadline, "deadline", flags) if deadline is not None else 0.0
    idle_seconds = _seconds(idle, "idle", flags) if idle is not None else 0.0
    grace_seconds = math.inf if grace is None else _seconds(grace, "grace", flags)
    checked_label = _label(label, flags)
    from tether.shared.signals import is_signal_name

    if not is_signal_name(stop_signal):
        raise RequestError(f"not a signal name: {stop_signal!r}", option="stop_signal")
    checked_cwd = None if cwd is None else os.fspath(cwd)
    checked_env = environment_copy(env)
    if not isinstance(record_argv, bool):
        raise TypeError(f"record_argv must be True or False, not {record_argv!r}")
    checked_limits = _limits(limits or {}, flags, mover=os.getpid() if own_caller else None)
    umask = None
    if ignored_signals is None:
        # The caller's umask too, from the same reading (as the launch would read it).
        ignored_signals, umask = _ignored_and_umask()
    # Last: the only check that touches the file system (it makes the
    # record's directory), so a request refused for anything else leaves nothing.
    record_path, no_record_reason = record_choice(record)
    return RunSpec(
        argv=words,
        deadline_seconds=deadline_seconds or None,
        grace_seconds=grace_seconds,
        asked_at=asked_at,
        record_path=record_path,
        label=checked_label,
        cwd=checked_cwd,
        env=checked_env,
        stop_signal=stop_signal,
        no_record_reason=no_record_reason,
        record_argv=record_argv,
        ignored_signals=tuple(ignored_signals),
        umask=umask,
        join_group=join_group,
        limits=checked_limits or None,
        idle_seconds=idle_seconds or None,
    )


def ignored_now() -> tuple[int, ...]:
    """The signals this process ignores now, but SIGPIPE and SIGXFSZ (``subprocess``'s way)."""
    return _ignored_and_umask()[0]


def _ignored_and_umask() -> tuple[tuple[int, ...], int | None]:
    """:func:`ignored_now` and the umask (``None``: unread), from one reading of
    ``/proc/self/status``."""
    import signal

    from tether.linux.proctree import read_file
    from tether.shared.signals import ignored_in

    umask = None
    try:
        status = read_file("/proc/self/status")
        umask = umask_in(status)
        found = ignored_in(status)
        if found is not None:
            return found, umask
    except OSError:
        pass
    python_ignores = (signal.SIGPIPE, signal.SIGXFSZ)
    ignored = []
    for number in signal.valid_signals():
        if number in python_ignores:
            continue
        try:
            if signal.getsignal(number) is signal.SIG_IGN:
                ignored.append(int(number))
        except (OSError, ValueError):
            continue
    return tuple(ignored), umask


def umask_in(status: bytes) -> int | None:
    """The umask a ``/proc/<pid>/status`` text shows (its ``Umask`` line), ``None`` without one."""
    at = status.find(b"\nUmask:")
    if at < 0:
        return None
    try:
        return int(status[at + len(b"\nUmask:") :].split(None, 1)[0], 8)
    except (ValueError, IndexError):
        return None


def record_choice(record: object) -> tuple[str | None, str | None]:
    """Where the record goes, or why there is none: ``(path, None)`` or ``(None, why)``;
    ``record=False`` is ``(None, None)``."""
    if record is not None and record is not True:
        return record_path_for(record), None
    from tether.shared.record_file import RecordError

    try:
        path = record_path_for(True)
    except RecordError as error:
        if record is True:
            raise
        why = str(error)
        warn_no_record_once(why)
        return None, why
    assert path is not None
    from tether.shared.paths import maybe_prune

    maybe_prune(os.path.dirname(path))
    return path, None


_warned_no_record = False


def warn_no_record_once(why: str) -> None:
    """Say on stderr, once per process, that runs go ahead without a record, and why (never
    raises: stderr may be closed)."""
    global _warned_no_record  # noqa: PLW0603 - once per process is the point
    if _warned_no_record:
        return
    _warned_no_record = True
    import sys

    try:
        sys.stderr.write(f"tether: running without a record: {why}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _limits(
    values: Mapping[str, object], flags: Mapping[str, str], *, mover: int | None = None
) -> dict[str, int | float]:
    """The resource limits, checked, and cgroups ready to enforce them, or why not: checked here
    too (read only) so that a refused run starts nothing; the supervisor is the authority."""
    checked: dict[str, int | float] = {}
    for name, value in values.items():
        try:
            checked.update(parse_limits({name: value}, flags))
        except LimitError as error:
            raise RequestError(str(error), option=name) from None
    if not checked:
        return checked
    shown = ", ".join(flags.get(name, name) for name in checked)
    from tether.linux.cgroup import CgroupUnavailable
    from tether.linux.run_cgroups import plan_backends

    try:
        if os.environ.get("TETHER_CONTAINMENT") == "sweep":  # supervisor.command's variable
            raise CgroupUnavailable("TETHER_CONTAINMENT=sweep forbids a cgroup of the run's own")
        backends, _hierarchies = plan_backends(limit_controllers(checked), check=False, mover=mover)
        if backends.get("memory") == "cgroup1":
            try:
                limit_files_v1(checked)
            except LimitError as error:
                raise CgroupUnavailable(str(error)) from None
    except CgroupUnavailable as why:
        raise LimitsUnavailable(
            f"cannot enforce {shown} here: {why} (tether sets limits only on cgroups "
            "of the run's own; it does not fall back to per-process rlimits)",
            option="limits",
        ) from None
    return checked


def limits_refusal(limits: Mapping[str, object]) -> str | None:
    """Why ``limits`` cannot be enforced here, ``None`` if they can, for a caller that would
    rather run without inferred limits (:mod:`tether.ray`); a value that is no limit raises."""
    try:
        _limits(limits, _API_NAMES)
    except LimitsUnavailable as why:
        return str(why)
    return None


def _seconds(value: object, option: str, flags: Mapping[str, str]) -> float:
    try:
        return duration_seconds(value, flag=flags.get(option, option))
    except DurationError as error:
        raise RequestError(str(error), option=option) from None


def _label(label: object, flags: Mapping[str, str]) -> str | None:
    """``label``, checked: a string of at most :data:`MAX_LABEL_CHARACTERS`, or ``None`` (any
    characters kept; the message does not repeat it)."""
    if label is None:
        return None
    if not isinstance(label, str):
        raise TypeError(f"label must be a string or None, not {type(label).__name__}")
    if len(label) > MAX_LABEL_CHARACTERS:
        raise RequestError(
            f"{flags.get('label', 'label')}: a label of {len(label)} characters is too long "
            f"(at most {MAX_LABEL_CHARACTERS})",
            option="label",
        )
    return label


def command_words(argv: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    """``argv`` as a tuple of strings; refuse one string, non-strings and an empty command."""
    if isinstance(argv, str | bytes):
        raise TypeError(f"argv must be a list of words, not one string: {_list_hint(argv)}")
    words = tuple(os.fspath(word) for word in argv)
    for word in words:
        if not isinstance(word, str):
            raise TypeError(f"argv must hold strings (or paths), not {word!r}")
    if not words:
        raise RequestError("there is no command to run", option="argv")
    return words


def _list_hint(argv: str | bytes) -> str:
    """What to write instead of a one-string ``argv``: its words, as ``shlex.split`` makes them."""
    import shlex

    text = argv.decode(errors="replace") if isinstance(argv, bytes) else argv
    try:
        words = shlex.split(text)
    except ValueError:
        words = text.split()
    shown = repr(words) if len(repr(words)) <= 80 else "[...]"
    if len(words) <= 1:
        return f"write {shown}"
    return f"write {shown}, or shlex.split(command_line) (no shell is involved)"


def environment_copy(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """A copy of ``env``, checked to map strings to strings."""
    if env is None:
        return None
    copied = dict(env)
    for key, value in copied.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map strings to strings, not {key!r} to {type(value)}")
    return copied


def record_path_for(record: object) -> str | None:
    """The absolute record path for a ``record`` option, checked (``RecordError``); ``None``
    for no record."""
    if record is False:
        return None
    from tether.shared.paths import normal_path
    from tether.shared.record_file import check_record_path

    # Strings read as pathlib reads them (normal_path): no pathlib on the way to the launch.
    if record is None or record is True:
        from tether.shared.paths import new_record_path_text

        path = new_record_path_text()
    elif isinstance(record, str | os.PathLike):
        text = os.fspath(record)
        if not isinstance(text, str):
            from pathlib import Path

            text = str(Path(text))  # refused as pathlib refuses it
        path = normal_path(text)
    else:
        raise TypeError(f"record must be a path, True, False or None, not {record!r}")
    if not path.startswith("/"):
        try:
            path = normal_path(os.path.join(os.getcwd(), path))
        except FileNotFoundError:
            raise RequestError(
                f"cannot place the record {path!r}: the current directory is gone "
                "(give an absolute path)",
                option="record",
            ) from None
    check_record_path(path)
    return path

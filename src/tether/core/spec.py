"""What the caller asks for, as one value that travels to the supervisor (never on a command
line: its argv and environment may hold credentials).

Checked where the request is made and again, strictly, where it arrives
(:meth:`RunSpec.from_fields`). Why: docs/architecture.md, "Processes" and "The launch".
"""

from __future__ import annotations

import math

from tether.core.durations import seconds_for_json, seconds_from_json
from tether.core.limits import LimitError, parse_limits
from tether.core.numbers import shown_value
from tether.core.values import DeclaredValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_STOP_SIGNAL",
    "ROLES",
    "RunSpec",
    "SpecError",
    "command_name",
    "script_name",
]

#: The most characters of the command's name a record or a launch line keeps.
MAX_NAME_CHARACTERS: Final = 4096

#: How long the stop signal gets before SIGKILL, unless the caller says otherwise.
DEFAULT_GRACE_SECONDS: Final = 10.0

#: The gentle signal that starts a stop, unless a door asks for another (``timeout -s``).
DEFAULT_STOP_SIGNAL: Final = "SIGTERM"


#: The roles of the descriptors every supervisor's spec holds.
ROLES: Final = ("lifeline", "status", "stdin", "stdout", "stderr")


class SpecError(ValueError):
    """A spec that cannot describe a run; the message is ready for a person."""


class RunSpec(DeclaredValue, kw_only=True):
    """One command to run under supervision, and the policy for stopping it."""

    argv: tuple[str, ...]
    deadline_seconds: float | None
    grace_seconds: float
    asked_at: float
    record_path: str | None = None
    label: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    umask: int | None = None
    stop_signal: str = DEFAULT_STOP_SIGNAL
    #: Why the run keeps no record although it was to keep one in the default directory.
    no_record_reason: str | None = None
    #: Whether the record keeps the whole command line (redacted), not only its name.
    record_argv: bool = False
    #: Signal numbers the command starts with ignored, as its caller had them (``nohup``).
    ignored_signals: tuple[int, ...] = ()
    #: The caller's process group, for a command on its terminal (docs/cli.md, "Terminals").
    join_group: int | None = None
    #: Resource limits by name (:data:`~tether.core.limits.LIMIT_NAMES`), as plain numbers.
    limits: dict[str, int | float] | None = None
    #: Stop the run once it has produced no output and used no CPU for this long.
    idle_seconds: float | None = None
    #: The caller's descriptors in the supervisor, by role (``lifeline``, ``status``, ``stdin``,
    #: ``stdout``, ``stderr``; ``cwd``, ``record_dir``, ``pass:N`` where they apply).
    fds: dict[str, int] = {}  # noqa: RUF012 - a default, copied for each spec (DeclaredValue)

    @property
    def deadline_at(self) -> float | None:
        """The monotonic time the command must be stopped at, ``None`` for no deadline."""
        return None if self.deadline_seconds is None else self.asked_at + self.deadline_seconds

    def to_json(self) -> bytes:
        """Serialise for the spec pipe (strict JSON: an endless grace is ``null``)."""
        import json  # here, not at the top: the seed door launches without it

        data = self.as_dict()
        data["grace_seconds"] = seconds_for_json(self.grace_seconds)
        return json.dumps(data, allow_nan=False).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> RunSpec:
        """Read a spec written by :meth:`to_json`; raise :class:`SpecError` if it is not one."""
        import json

        try:
            data = json.loads(raw)
        except ValueError as error:
            raise SpecError(f"not a tether run spec: {error}") from None
        return cls.from_fields(data)

    @classmethod
    def from_fields(cls, fields: object) -> RunSpec:
        """Read a spec from the fields of its JSON, already parsed (they are not changed);
        raise :class:`SpecError` if they are not a spec's, each field of its own kind."""
        if not isinstance(fields, dict):
            raise SpecError("not a tether run spec: not a JSON object")
        try:
            data = dict(fields)
            for name in ("argv", "ignored_signals"):
                if isinstance(data.get(name), list):
                    data[name] = tuple(data[name])
            data["grace_seconds"] = seconds_from_json(data["grace_seconds"])
            spec = cls(**data)
        except (ValueError, TypeError, KeyError) as error:
            raise SpecError(f"not a tether run spec: {error}") from None
        spec.check()
        return spec

    def check(self) -> None:
        """Raise :class:`SpecError` unless this spec describes a run the core can keep."""
        self._check_kinds()
        if not self.argv or not all(isinstance(word, str) for word in self.argv):
            raise SpecError("no command to run")
        for name in ("deadline_seconds", "idle_seconds"):
            seconds = getattr(self, name)
            # Written so that NaN fails too.
            if seconds is not None and not 0 < seconds < math.inf:
                raise SpecError(f"{name} must be a finite number > 0, not {seconds!r}")
        if not self.grace_seconds >= 0:
            raise SpecError(f"grace_seconds must be a number >= 0, not {self.grace_seconds!r}")
        if not all(_whole(number) and 0 < number < 65 for number in self.ignored_signals):
            raise SpecError(f"ignored_signals must be signal numbers, not {self.ignored_signals!r}")
        if self.join_group is not None and self.join_group < 2:
            raise SpecError(f"join_group must be a process group id, not {self.join_group!r}")
        if self.umask is not None and not 0 <= self.umask <= 0o777:
            raise SpecError(f"umask must be from 0 to 0o777, not {self.umask!r}")
        if not _looks_like_a_signal(self.stop_signal):
            raise SpecError(
                f"stop_signal must be a signal name like SIGTERM, not {self.stop_signal!r}"
            )
        if self.limits is not None:
            try:
                parse_limits(self.limits)
            except LimitError as error:
                raise SpecError(str(error)) from None

    def _check_kinds(self) -> None:
        for kind, words, names in _KINDS:
            for name in names:
                value = getattr(self, name)
                if (value is not None or name in _NEEDED) and (
                    not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)
                ):
                    raise SpecError(f"{name} must be {words}, not {shown_value(value)}")
        for name, mapping, value_kind, words in (
            ("env", self.env, str, "names to strings"),
            ("fds", self.fds, int, "roles to descriptors"),
        ):
            if mapping and not all(
                isinstance(key, str) and isinstance(value, value_kind) and _not_bool(value)
                for key, value in mapping.items()
            ):
                raise SpecError(f"{name} must map {words}")


#: The kind of each field's value (``None`` too where that is its default, but in :data:`_NEEDED`).
_KINDS: Final[tuple[tuple[type | tuple[type, ...], str, tuple[str, ...]], ...]] = (
    ((int, float), "a number", ("deadline_seconds", "grace_seconds", "asked_at", "idle_seconds")),
    (str, "a string", ("record_path", "label", "cwd", "stop_signal", "no_record_reason")),
    (dict, "a mapping", ("env", "limits", "fds")),
    (tuple, "a list", ("argv", "ignored_signals")),
    (int, "a whole number", ("umask", "join_group")),
    (bool, "true or false", ("record_argv",)),
)
_NEEDED: Final = frozenset(
    ("argv", "grace_seconds", "asked_at", "stop_signal", "record_argv", "ignored_signals", "fds")
)


def _not_bool(value: object) -> bool:
    return not isinstance(value, bool)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def command_name(argv: tuple[str, ...] | list[str]) -> str:
    """The name a run goes by: ``argv[0]``'s last component (``/usr/bin/python3``: ``python3``)."""
    name = argv[0].rstrip("/").rsplit("/", 1)[-1] if argv else ""
    return name[:MAX_NAME_CHARACTERS]


#: Interpreters whose first operand is the program they run: Python's, and POSIX shells.
_PYTHON_RE: Final = r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[a-z]?"
_SHELLS: Final = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
#: Python's options that take a value (``-W error``, ``-X dev``): skipped, never kept.
_PYTHON_VALUE_LETTERS: Final = frozenset("WXQ")
_PYTHON_LONG_WITH_VALUE: Final = frozenset({"--check-hash-based-pycs"})
_MODULE_RE: Final = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"


def script_name(argv: tuple[str, ...] | list[str]) -> str | None:
    """What an interpreter ran (``evaluate.py``, ``pkg.mod``, ``python -c``), never an argument
    after it; ``None`` for any other command: docs/record.md, ``script``."""
    if len(argv) < 2:
        return None
    import re  # not on the launch path

    interpreter = command_name(argv)
    if re.fullmatch(_PYTHON_RE, interpreter):
        return _python_program(interpreter, argv[1:])
    return _shell_program(interpreter, argv[1:]) if interpreter in _SHELLS else None


def _python_program(interpreter: str, words: Sequence[str]) -> str | None:
    import re

    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return _script(words[index + 1]) if index + 1 < len(words) else None
        if word == "-":
            return f"{interpreter} -"
        if word.startswith("--"):
            index += 2 if word in _PYTHON_LONG_WITH_VALUE else 1
            continue
        if not word.startswith("-"):
            return _script(word)
        for position, letter in enumerate(word[1:], start=1):
            rest = word[position + 1 :]
            if letter == "c":
                return f"{interpreter} -c"
            if letter == "m":
                module = rest or (words[index + 1] if index + 1 < len(words) else "")
                known = re.fullmatch(_MODULE_RE, module)
                return module[:MAX_NAME_CHARACTERS] if known else None
            if letter in _PYTHON_VALUE_LETTERS:
                index += 0 if rest else 1
                break
        index += 1
    return None


def _shell_program(interpreter: str, words: Sequence[str]) -> str | None:
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return _script(words[index + 1]) if index + 1 < len(words) else None
        if word.startswith("--"):
            index += 2 if word in ("--rcfile", "--init-file") else 1
            continue
        if len(word) < 2 or word[0] not in "-+":
            return None if word == "-" else _script(word)
        letters = word[1:]
        if word[0] == "-" and "c" in letters:
            return f"{interpreter} -c"
        if word[0] == "-" and "s" in letters:
            return None  # the program comes on stdin
        # ``-o NAME``, ``+o NAME``, ``-O NAME`` (bash): the option's name comes next.
        index += 2 if ("o" in letters or "O" in letters) else 1
    return None


def _script(path: str) -> str | None:
    """A script's last path component, or ``None`` when there is none to give."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name[:MAX_NAME_CHARACTERS] if name and "=" not in name else None


def _looks_like_a_signal(name: str) -> bool:
    """``SIGTERM``, ``SIGRTMIN+2``, ``SIGRTMAX-1``, ``0``: by shape (the core knows no numbers)."""
    if name == "0":
        return True
    base, _, offset = name.replace("-", "+").partition("+")
    return (
        base.startswith("SIG")
        and base[3:].isalnum()
        and base[3:].isascii()
        and (not offset or (offset.isascii() and offset.isdigit()))
    )

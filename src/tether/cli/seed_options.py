"""The seed door's options, read by hand on the way to the launch (``argparse`` costs
milliseconds there), answering exactly as the reference :func:`parser` would; anything else
goes to that parser (``tests/test_seed_options.py`` holds the two together).
"""

from __future__ import annotations

from tether.core.values import DeclaredValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Final, NoReturn

__all__ = ["PROG", "SeedOptions", "UsageError", "descriptor_refusal", "parser", "read_options"]

PROG: Final = "python -m tether.supervisor"

#: The options, as ``argparse`` defines them (in this order: its "required" message's).
_OPTIONS: Final = (
    ("--variant", "variant", "the run's label, kept in the record"),
    ("--parent-fd", "parent_fd", "read end of a pipe the caller holds open"),
    ("--record", "record", "where to write the JSON record"),
    ("--deadline-seconds", "deadline_seconds", "stop the command after this long (0: never)"),
    ("--grace-seconds", "grace_seconds", "time between SIGTERM and SIGKILL"),
)
_DESTINATIONS: Final = {name: destination for name, destination, _help in _OPTIONS}

#: The lifeline's whole vocabulary; rare, so the hand reader leaves it to ``argparse``.
ALL_REQUESTS_FLAG: Final = "--all-lifeline-requests"

#: A descriptor number is below 2**31.
_MAX_DESCRIPTOR_DIGITS: Final = 10


class UsageError(Exception):
    """A command line the seed door refuses; the message as ``argparse`` words it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SeedOptions(DeclaredValue):
    """The five options' values (``parent_fd`` a number, the rest as typed), and the flag."""

    variant: str
    parent_fd: int
    record: str
    deadline_seconds: str
    grace_seconds: str
    all_lifeline_requests: bool = False


def descriptor_refusal(text: str) -> str | None:
    """Why ``text`` is no ``--parent-fd`` (``int()`` would take ``" 3"``, ``"1_0"``, ``"٣"``), or
    ``None`` for plain ASCII digits, as any worker writes."""
    if text.isascii() and text.isdigit() and len(text) <= _MAX_DESCRIPTOR_DIGITS:
        return None
    shown = text if len(text) <= _MAX_DESCRIPTOR_DIGITS else text[:_MAX_DESCRIPTOR_DIGITS] + "..."
    return f"not a descriptor number: {shown!r}"


def read_options(words: list[str]) -> tuple[SeedOptions, list[str]]:
    """The options in ``words`` (before ``--``) and the words left over; :class:`UsageError`."""
    read = _read_by_hand(words)
    return read if read is not None else _read_with_argparse(words)


def _read_by_hand(words: list[str]) -> tuple[SeedOptions, list[str]] | None:
    """:func:`read_options` for the documented spelling; ``None`` for anything else."""
    split = _split(words)
    if split is None:
        return None
    given, extras = split
    # Now as argparse goes: option by option, the first error wins; the missing ones last.
    values: dict[str, str | int] = {}
    for name, value in given:
        if value is None:
            raise UsageError(f"argument {name}: expected one argument")
        if name == "--parent-fd":
            refusal = descriptor_refusal(value)
            if refusal is not None:
                raise UsageError(f"argument {name}: {refusal}")
            values[_DESTINATIONS[name]] = int(value)
        else:
            values[_DESTINATIONS[name]] = value
    missing = [name for name, destination, _help in _OPTIONS if destination not in values]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    return SeedOptions(**values), extras  # type: ignore[arg-type]


def _split(words: list[str]) -> tuple[list[tuple[str, str | None]], list[str]] | None:
    """The options given, in order, with their values (``None``: missing), and the words left
    over; ``None`` for any other word starting with ``-``, here or as a value."""
    given: list[tuple[str, str | None]] = []
    extras: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        if not word.startswith("-"):
            extras.append(word)
            continue
        name, equals, value = word.partition("=")
        if name not in _DESTINATIONS:
            return None
        if equals:
            given.append((name, value))
        elif index == len(words):
            given.append((name, None))
        elif words[index].startswith("-"):
            return None
        else:
            given.append((name, words[index]))
            index += 1
    return given, extras


def _read_with_argparse(words: list[str]) -> tuple[SeedOptions, list[str]]:
    parsed, extras = parser().parse_known_args(words)
    options = SeedOptions(
        **{destination: getattr(parsed, destination) for destination in _DESTINATIONS.values()},
        all_lifeline_requests=parsed.all_lifeline_requests,
    )
    return options, extras


def parser() -> argparse.ArgumentParser:
    """The seed door's parser, the reference for :func:`read_options` (raises UsageError)."""
    import argparse

    from tether.cli.parsers import UsageParser

    class _Parser(UsageParser):
        def error(self, message: str) -> NoReturn:
            raise UsageError(message)

    def descriptor_number(text: str) -> int:
        refusal = descriptor_refusal(text)
        if refusal is not None:
            raise argparse.ArgumentTypeError(refusal)
        return int(text)

    made = _Parser(
        prog=PROG,
        description="Supervise one command in the foreground, bound to a pipe its caller holds.",
        epilog="The command follows --. Exit status: the command's own, or 124 (deadline), "
        "125 (tether failed), 126/127 (cannot execute / not found), 130 (cancelled, caller lost).",
    )
    for name, _destination, help_text in _OPTIONS:
        if name == "--parent-fd":
            made.add_argument(name, required=True, type=descriptor_number, help=help_text)
        else:
            made.add_argument(name, required=True, help=help_text)
    made.add_argument(
        ALL_REQUESTS_FLAG,
        action="store_true",
        help="also honour t, z, r and signals to pass on written to the pipe "
        "(default: only end of file, c and k)",
    )
    return made

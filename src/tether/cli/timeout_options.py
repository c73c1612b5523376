"""``tether timeout``'s command line, read by hand as GNU's ``getopt_long(..., "+fk:ps:v", ...)``
reads it (docs/timeout.md, "Options"): :mod:`getopt` would cost ``gettext`` and ``re`` before the
launch. Held to :mod:`getopt` by ``tests/test_timeout_options.py``, to GNU by ``test_timeout_gnu``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

#: Every long option, in the order ``--help`` lists them: whether it takes a value.
LONG_OPTIONS: Final = {
    "kill-after": True,
    "signal": True,
    "verbose": False,
    "preserve-status": False,
    "foreground": False,
    "help": False,
    "version": False,
    "record": True,
    "no-record": False,
    "label": True,
}

#: Every short option, and the long option it stands for.
SHORT_OPTIONS: Final = {
    "f": "foreground",
    "k": "kill-after",
    "p": "preserve-status",
    "s": "signal",
    "v": "verbose",
}


class OptionError(Exception):
    """A word of the command line refused, in GNU ``getopt_long``'s words."""


def read_command_line(argv: list[str], take: Callable[[str, str], None]) -> list[str]:
    """Hand each option to ``take(long name, value or "")`` as it is read; return what follows;
    :class:`OptionError` at the first word that is not a valid option."""
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if word == "--":
            return argv[index:]
        if word[:1] != "-" or word == "-":
            return argv[index - 1 :]
        if word[1] == "-":
            index = _long_option(word, argv, index, take)
        else:
            index = _short_options(word, argv, index, take)
    return []


def _long_option(word: str, argv: list[str], index: int, take: Callable[[str, str], None]) -> int:
    """Read ``--name[=value]`` (or its value at ``argv[index]``); the next index."""
    typed, attached, value = word[2:].partition("=")
    name = _full_name(typed, word)
    if LONG_OPTIONS[name]:
        if not attached:
            if index == len(argv):
                raise OptionError(f"option '--{name}' requires an argument")
            value = argv[index]
            index += 1
    elif attached:
        raise OptionError(f"option '--{name}' doesn't allow an argument")
    take(name, value)
    return index


def _full_name(typed: str, word: str) -> str:
    if typed in LONG_OPTIONS:
        return typed
    names = [name for name in LONG_OPTIONS if name.startswith(typed)]
    if not names:
        raise OptionError(f"unrecognized option '{word}'")
    if len(names) > 1:
        choices = " ".join(f"'--{name}'" for name in names)
        raise OptionError(f"option '{word}' is ambiguous; possibilities: {choices}")
    return names[0]


def _short_options(word: str, argv: list[str], index: int, take: Callable[[str, str], None]) -> int:
    """Read ``-abc`` (one that needs a value ends it); the next index."""
    for position in range(1, len(word)):
        letter = word[position]
        name = SHORT_OPTIONS.get(letter)
        if name is None:
            raise OptionError(f"invalid option -- '{letter}'")
        if not LONG_OPTIONS[name]:
            take(name, "")
            continue
        if position + 1 < len(word):
            take(name, word[position + 1 :])
        elif index < len(argv):
            take(name, argv[index])
            index += 1
        else:
            raise OptionError(f"option requires an argument -- '{letter}'")
        break
    return index

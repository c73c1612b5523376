"""``tether timeout``'s command line, read as GNU ``timeout`` reads its own: by hand.

GNU ``timeout`` reads its options with ``getopt_long(argc, argv, "+fk:ps:v",
...)``; this module reads them the same way, without :mod:`getopt`, whose
messages come through :mod:`gettext`, which imports :mod:`re`: together a
millisecond and a half that every ``timeout 5 true`` in a shell loop paid
before its command could start (``docs/performance.md``).

What ``getopt_long`` does, and so what this does: options are read one word
at a time, in order, and each one acts as it is read (``--help`` prints before
a later word is looked at; ``-k bad`` is refused before a later unknown
option); the first word that is not an option (``-`` included), or the word
after ``--``, ends them, whatever ``POSIXLY_CORRECT`` says (the ``+``);
short options group (``-vpk5``), and one that takes a value takes the rest of
its word or else the next word, whatever it is (``-k -5``); a long option may
be abbreviated to any prefix that names one option (``--pres``), and takes
its value after ``=`` or as the next word. Refusals are GNU's words:
``tests/test_timeout_options.py`` holds them against :mod:`getopt`'s reading
on random command lines, and ``tests/test_timeout_gnu.py`` against GNU's.
"""

from __future__ import annotations

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Final

__all__ = ["LONG_OPTIONS", "SHORT_OPTIONS", "OptionError", "read_command_line"]

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
    """Hand each option of ``argv`` to ``take`` as it is read; return what follows them.

    ``take(name, value)`` gets the long name (``kill-after`` for ``-k``) and
    the value (``""`` for an option that takes none), before the next word is
    read: it may end the program (``--help``). Raises :class:`OptionError`
    at the first word that is not a valid option.
    """
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
    """Read ``--name[=value]`` (``argv[index]`` its value, if it needs one); the next index."""
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
    """The long option ``typed`` names, whole or by a prefix of one option only."""
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
    """Read ``-abc`` (one option a letter; one that needs a value ends it); the next index."""
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

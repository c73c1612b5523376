"""The one reading of a number that a person typed, for every door (options and variables).

``int()`` and ``float()`` read more than people write on a command line:
digits of any script (``٣`` is three, an Arabic-Indic one point five a number too), digit-grouping
underscores (``1_0`` is ten), surrounding spaces, and ``int()`` refuses more
than 4300 digits with an error of its own (a traceback, if nobody expected
it). Every door reads numbers through here instead: ASCII only, no
underscores, no hexadecimal, at most :data:`MAX_CHARACTERS` characters. What
is refused is refused by the caller with a message that names the option
(:func:`shown` keeps a hostile value short in it).

Pure: no I/O, no clock, no ``re``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = ["MAX_CHARACTERS", "decimal_text", "shown", "too_long", "whole_number"]

#: The longest number read: more digits than any value tether takes (8 EiB
#: has 19), few enough that no reading of it can cost anything.
MAX_CHARACTERS: Final = 40

_DIGITS: Final = frozenset("0123456789")
_DECIMAL: Final = frozenset("0123456789.eE+-")


def too_long(text: str) -> bool:
    """Whether ``text`` is longer than any number tether reads."""
    return len(text) > MAX_CHARACTERS


def whole_number(text: str) -> int | None:
    """``text`` as a whole number >= 0, if it is 1 to :data:`MAX_CHARACTERS` ASCII digits."""
    if not text or too_long(text) or not _DIGITS.issuperset(text):
        return None
    return int(text)


def decimal_text(text: str) -> bool:
    """Whether ``float()`` may read ``text`` as a person meant it.

    ASCII digits, at most one point, an optional sign and exponent (``1.5``,
    ``.5``, ``2e3``), or the words ``inf`` and ``nan`` (which the caller
    refuses with its own words); no underscores, no hexadecimal, no other
    script's digits, at most :data:`MAX_CHARACTERS` characters.
    """
    if not text or too_long(text):
        return False
    if text.lstrip("+-").lower() in ("inf", "infinity", "nan"):
        return True
    return _DECIMAL.issuperset(text) and any(character in _DIGITS for character in text)


def shown(text: str) -> str:
    """``text`` for a message: quoted, and cut after :data:`MAX_CHARACTERS` characters.

    Cut further where its escapes would make it long (a control character
    or an unprintable one is shown as up to ten), so that a message stays
    about two lines' worth whatever the input.
    """
    kept = text[:MAX_CHARACTERS]
    while len(repr(kept)) > 2 * MAX_CHARACTERS:
        kept = kept[:-1]
    if kept != text:
        return repr(kept) + f"... ({len(text)} characters)"
    return repr(text)

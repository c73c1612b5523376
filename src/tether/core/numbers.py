"""The one reading of a number that a person typed, for every door (options and variables):
ASCII digits only (docs/cli.md, "Numbers"); :func:`shown` keeps a hostile value short.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

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
    """Whether ``float()`` may read ``text`` as a person meant it: ASCII digits, a point, a sign
    and an exponent (``1.5``, ``.5``, ``2e3``), or ``inf`` and ``nan`` (the caller refuses them)."""
    if not text or too_long(text):
        return False
    if text.lstrip("+-").lower() in ("inf", "infinity", "nan"):
        return True
    return _DECIMAL.issuperset(text) and any(character in _DIGITS for character in text)


def shown(text: str) -> str:
    """``text`` for a message: quoted, cut after :data:`MAX_CHARACTERS` characters, and
    further where its escapes would make it long (about two lines whatever the input)."""
    kept = text[:MAX_CHARACTERS]
    while len(repr(kept)) > 2 * MAX_CHARACTERS:
        kept = kept[:-1]
    if kept != text:
        return repr(kept) + f"... ({len(text)} characters)"
    return repr(text)


def shown_value(value: object) -> str:
    """``value`` for a message: at most 40 characters, a huge integer by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"(an integer of {value.bit_length()} bits)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

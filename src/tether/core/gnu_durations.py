"""Durations exactly as GNU ``timeout`` reads them (``strtod``, then one unit letter), for
``tether timeout``: every rule in docs/timeout.md, "Options". Plain decimals are read without
:mod:`re`, which ``timeout 5 true`` would otherwise import for one word (about a millisecond).
"""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

#: "Practically forever": a duration no timer could count down.
FOREVER: Final = math.inf

#: What a positive duration that underflowed becomes: it times out at once.
SMALLEST: Final = 1e-9

_UNITS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

#: strtod's grammar, for what :func:`_plain` does not read (compiled on first use).
_NUMBER: Final = (
    r"[ \t\n\v\f\r]*"
    r"(?P<sign>[+-]?)"
    r"(?:"
    r"(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<inf>[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
    r"|(?P<nan>[nN][aA][nN](?:\([0-9A-Za-z_]*\))?)"
    r")"
)

_DIGITS: Final = frozenset("0123456789")


def parse_gnu_duration(text: str) -> float | None:
    """Seconds for ``text`` as GNU ``timeout`` reads it (``0``: no timeout; at least
    :data:`SMALLEST` otherwise); ``None`` if GNU refuses it."""
    read = _plain(text) or _read(text)
    if read is None:
        return None
    negative, kind, digits, unit = read
    if unit not in _UNITS or kind == "nan":
        return None
    if kind == "inf":
        return None if negative else FOREVER
    value = _magnitude(digits, hexadecimal=kind == "hex")
    if value == 0 and _has_nonzero_digit(digits, hexadecimal=kind == "hex"):
        value = SMALLEST  # underflowed: not zero
    elif value == 0:
        return 0.0  # "0", "-0", "0x0": no timeout
    if negative:
        return None
    seconds = value * _UNITS[unit]
    return FOREVER if math.isinf(seconds) else seconds


def _plain(text: str) -> tuple[bool, str, str, str] | None:
    """A plain decimal and its unit (``5``, ``.5``, ``1.5m``) read by hand; None for the rest."""
    unit = text[-1:]
    digits, unit = (text[:-1], unit) if unit in "smhd" and unit else (text, "")
    whole, _, fraction = digits.partition(".")
    if (whole or fraction) and _DIGITS.issuperset(whole) and _DIGITS.issuperset(fraction):
        return False, "dec", digits, unit
    return None


def _read(text: str) -> tuple[bool, str, str, str] | None:
    """Sign, kind (``hex``, ``dec``, ``inf`` or ``nan``), number and what follows it, as
    ``strtod`` reads them; None if there is no number."""
    import re

    match = re.match(_NUMBER, text)
    if match is None:
        return None
    kind = next(name for name in ("hex", "dec", "inf", "nan") if match[name] is not None)
    return match["sign"] == "-", kind, match[kind], text[match.end() :]


def _magnitude(digits: str, *, hexadecimal: bool) -> float:
    if hexadecimal:
        try:
            return float.fromhex(digits)
        except OverflowError:
            return math.inf
    return float(digits)  # overflows to inf, underflows to 0.0


def _has_nonzero_digit(digits: str, *, hexadecimal: bool) -> bool:
    """Whether the mantissa (before any exponent) has a digit other than 0."""
    mantissa = digits[2:] if hexadecimal else digits
    for marker in "pP" if hexadecimal else "eE":
        mantissa = mantissa.partition(marker)[0]
    return any(char not in "0." for char in mantissa)

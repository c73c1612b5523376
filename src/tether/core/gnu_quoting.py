"""A command-line word quoted as GNU tools quote it in their messages (gnulib's ``quote``):
docs/timeout.md. Pure: the locale is read from the environment given.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    "'": "\\'",
}
#: Python's stand-ins for the bytes of a word that are not UTF-8 (``surrogateescape``).
_STAND_INS: Final = range(0xDC80, 0xDD00)


def utf8_locale(environ: Mapping[str, str]) -> bool:
    """Whether the environment's character type (``LC_ALL``, ``LC_CTYPE``, ``LANG``) is UTF-8."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = environ.get(name)
        if value:
            value = value.lower()
            return "utf-8" in value or "utf8" in value
    return False


def gnu_quote(word: str, *, utf8: bool) -> str:
    """``word`` between ``'``, escaped as GNU's messages escape it (docs/timeout.md)."""
    out = ["'"]
    for char in word:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code in _STAND_INS:  # a byte that is not UTF-8: its own value, in octal
            out.append(f"\\{code - 0xDC00:03o}")
        elif code < 0x80:
            out.append(char if 0x20 <= code < 0x7F else f"\\{code:03o}")
        elif utf8 and char.isprintable():
            out.append(char)
        else:
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8", "surrogatepass"))
    out.append("'")
    return "".join(out)

"""A record's path as text, read exactly as :class:`pathlib.PurePosixPath` reads it.

The record's path is checked, and its directory held, before the command is
launched (:mod:`tether.shared.record_file`). ``pathlib`` would cost that
launch milliseconds of imports (``urllib.parse``, ``ipaddress``, ``fnmatch``
and ``ntpath`` come with it) for four things done to one string: making it
normal, asking if it is absolute, and taking its directory and its name. They
are done here on the string, with ``pathlib``'s answers (a path written
``a//./b/`` is ``a/b``, ``..`` is kept as it is, two leading slashes stay two),
so the record goes where it always went and messages show the same path;
``tests/test_path_text.py`` compares the two on random paths.

Pure: no I/O.
"""

from __future__ import annotations

__all__ = ["is_absolute", "joined", "name_of", "normal", "parent_of", "with_name"]


def normal(text: str) -> str:
    """``str(PurePosixPath(text))``: empty and ``.`` parts dropped, ``.`` for nothing at all."""
    if text.startswith("//") and not text.startswith("///"):
        root = "//"  # POSIX leaves two leading slashes to the implementation: kept
    elif text.startswith("/"):
        root = "/"
    else:
        root = ""
    return root + "/".join(part for part in text.split("/") if part and part != ".") or "."


def is_absolute(path: str) -> bool:
    """Whether the normal ``path`` starts at the root."""
    return path.startswith("/")


def name_of(path: str) -> str:
    """The normal ``path``'s last part, ``""`` for ``/``, ``//`` and ``.`` (``PurePath.name``)."""
    return "" if path in (".", "/", "//") else path.rpartition("/")[2]


def parent_of(path: str) -> str:
    """The normal ``path``'s directory (``PurePath.parent``); ``/``, ``//``, ``.``: their own."""
    if path in (".", "/", "//"):
        return path
    head, slash, _name = path.rpartition("/")
    if not slash:
        return "."
    return head + "/" if head in ("", "/") else head


def with_name(path: str, name: str) -> str:
    """The normal ``path`` with its last part replaced by ``name`` (``PurePath.with_name``).

    Neither ``path``'s name nor ``name`` may be empty (``pathlib`` would raise).
    """
    return name if parent_of(path) == "." else path[: len(path) - len(name_of(path))] + name


def joined(base: str, path: str) -> str:
    """``str(PurePosixPath(base, path))``: ``path`` if it is absolute, else under ``base``."""
    if path.startswith("/"):
        return normal(path)
    start, rest = normal(base), normal(path)
    if rest == ".":
        return start
    if start == ".":
        return rest
    return start + rest if start.endswith("/") else f"{start}/{rest}"

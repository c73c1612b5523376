"""The import budget, read from its one table in ``docs/architecture.md`` ("The import budget")."""

from __future__ import annotations

import re
import sys

from conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
_ROW = re.compile(r"^\| `([\w-]+)` \| (?:`([\w-]+)`)? ?\| (.*) \|$")
_MODULE = re.compile(r"`([\w.]+)`(?:<3\.(\d+))?")


def _rows() -> dict[str, tuple[str, str]]:
    section = DOC.read_text(encoding="utf-8").split("### The import budget\n", 1)[1]
    rows = (_ROW.match(line) for line in section.split("\n#", 1)[0].splitlines())
    return {row[1]: (row[2] or "", row[3]) for row in rows if row}


def kept_off(path: str) -> tuple[str, ...]:
    """The modules the table says ``path`` never loads, with those of the row it adds to."""
    base, cell = _rows()[path]
    if _MODULE.sub("", cell).strip():
        raise ValueError(f"not a module name in the {path} row: {cell!r}")
    found = _MODULE.findall(cell)
    names = [name for name, minor in found if not minor or sys.version_info < (3, int(minor))]
    return (*(kept_off(base) if base else ()), *names)

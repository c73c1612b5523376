"""The module table in ``docs/architecture.md`` names every module, and only modules that exist.

The table is where a reader learns what each module is for, one job a row:
a module it does not name is one nobody was told the purpose of, and a row
for a module that was moved or removed sends the reader to nothing. So both
fail here, read from the tree (no hand-kept list) and from the table's first
column, which names one or more modules as ``package/module`` (the package's
own ``__init__`` as ``tether/__init__``). An ``__init__.py`` that only says
what its package is and re-exports names, ``__main__`` entry points and the
generated ``_version`` need no row: they hold no job of their own. An
``__init__.py`` that defines a function or a class does hold one, and needs
its row.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tether
from conftest import ROOT

#: The package as it is imported: the checkout's under an editable install,
#: the installed copy of the same files under tox (a wheel).
PACKAGE = Path(tether.__file__).parent
DOC = ROOT / "docs" / "architecture.md"

#: Files that need no row: entry points, the generated version.
NO_ROW = frozenset({"__main__.py", "_version.py"})


def defines_something(path: Path) -> bool:
    """Whether ``path`` defines a function or a class (anywhere, under ``if`` included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef | ast.ClassDef) for node in ast.walk(tree))


def modules_in_tree() -> set[str]:
    """Every module of the package that holds a job, as the table names it (``caller/start``)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name in NO_ROW or (path.name == "__init__.py" and not defines_something(path)):
            continue
        name = path.relative_to(PACKAGE).with_suffix("").as_posix()
        found.add("tether/__init__" if name == "__init__" else name)
    return found


def modules_in_table() -> list[str]:
    """The modules the table's rows name, in order, repeats kept."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("| module | its one job |")
    named: list[str] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first = line.split("|")[1]
        named += re.findall(r"`([^`]+)`", first)
    return named


def test_the_table_is_found_and_the_tree_read() -> None:
    named, found = modules_in_table(), modules_in_tree()
    assert {"supervisor/loop", "caller/start", "tether/__init__", "linux/__init__"} <= found
    assert "supervisor/loop" in named
    assert "review/__init__" not in found  # re-exports only


def test_every_module_has_a_row() -> None:
    missing = sorted(modules_in_tree() - set(modules_in_table()))
    assert missing == [], f"modules with no row in {DOC.name}: {missing}"


def test_every_row_names_a_module_that_exists() -> None:
    stale = sorted(set(modules_in_table()) - modules_in_tree())
    assert stale == [], f"rows in {DOC.name} for modules that do not exist: {stale}"


def test_no_module_has_two_rows() -> None:
    named = modules_in_table()
    assert sorted({name for name in named if named.count(name) > 1}) == []

"""The core stays pure: it imports nothing that touches the operating system or a clock.

The core's tests can drive it with a fake clock and no processes only because
it never asks the system anything (DESIGN.md §3): events bring the time in,
effects carry the decisions out. One ``import time`` or ``import os`` would
quietly end that, and nothing else would fail at first, so this test reads the
sources (an AST, not a regex, so docstrings and comments do not count) and
refuses such imports in the core and in every tether module the core imports.
It also keeps ``transitions`` behind ``machine.py``'s facade, and the core free
of ``structlog``, so that ``import tether`` stays cheap.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether

PACKAGE = Path(tether.__file__).parent

CORE = ["machine", "events", "effects", "outcome", "durations"] + [
    name for name in ("redaction",) if (PACKAGE / f"{name}.py").exists()
]

FORBIDDEN = frozenset(
    {
        "os",
        "signal",
        "subprocess",
        "selectors",
        "time",
        "structlog",
        "threading",
        "socket",
        # Ways around the rule above.
        "importlib",
        "ctypes",
        "multiprocessing",
        "asyncio",
    }
)

#: The only core module allowed to use ``transitions``.
TABLE_INTERPRETER = "machine"


def imports(module: str) -> list[tuple[str, int]]:
    """Every absolute module name ``tether.<module>`` imports, with its line."""
    return list(imports_in(PACKAGE / f"{module}.py"))


def imports_in(path: Path) -> Iterator[tuple[str, int]]:
    """Yield every absolute module name the source at ``path`` imports, with its line.

    ``from tether import name`` yields ``tether.name`` too when that is a
    tether module, so that the closure below follows it. ``__import__(...)``
    calls are yielded as ``__import__``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # Relative: resolve against the tether package (the core is flat).
                base = ".".join(["tether", *filter(None, [node.module])])
            else:
                assert node.module is not None
                base = node.module
            yield base, node.lineno
            for alias in node.names:
                if base == "tether" and (PACKAGE / f"{alias.name}.py").exists():
                    yield f"tether.{alias.name}", node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            yield "__import__", node.lineno


def closure(module: str) -> dict[str, list[tuple[str, int]]]:
    """``module`` and every tether module it reaches by imports, each with its imports."""
    found: dict[str, list[tuple[str, int]]] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found[current] = list(imports(current))
        for name, _ in found[current]:
            parts = name.split(".")
            if parts[0] == "tether" and len(parts) > 1 and (PACKAGE / f"{parts[1]}.py").exists():
                todo.append(parts[1])
    return found


def top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_nothing_impure(module: str) -> None:
    offenders = [
        f"tether/{reached}.py:{line} imports {name}"
        for reached, names in sorted(closure(module).items())
        for name, line in names
        if top(name) in FORBIDDEN or name == "__import__"
    ]
    assert offenders == []


@pytest.mark.parametrize("module", CORE)
def test_only_the_machine_uses_transitions(module: str) -> None:
    uses = [name for name, _ in imports(module) if top(name) == "transitions"]
    if module == TABLE_INTERPRETER:
        assert uses, "machine.py is the table interpreter: it should import transitions"
        return
    assert uses == []
    # Nor through another tether module: the other core modules never reach the machine.
    reached = closure(module)
    assert TABLE_INTERPRETER not in reached
    assert [
        name for names in reached.values() for name, _ in names if top(name) == "transitions"
    ] == []


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A checker that finds nothing must be finding nothing for the right reason."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os.path\n"
        "from time import monotonic\n"
        "from . import events\n"
        "from .outcome import Reason\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import signal as s\n"
        "def f() -> None:\n"
        "    import subprocess\n"
        "    __import__('socket')\n",
        encoding="utf-8",
    )

    found = {name for name, _ in imports_in(sample)}

    assert found == {
        "os.path",
        "time",
        "tether",
        "tether.events",
        "tether.outcome",
        "typing",
        "signal",
        "subprocess",
        "__import__",
    }


def test_the_closure_follows_tether_imports() -> None:
    # machine imports events, effects and outcome; the closure must check them too.
    assert {"machine", "events", "effects", "outcome"} <= set(closure("machine"))

"""The floors of the package, and who may import whom: read from the sources, whole packages.

``src/tether/`` is built in floors (``docs/architecture.md`` draws them)::

    surfaces    cli/ · api/ · ray/ · tether/__init__.py · every __main__.py
    ───────────────────────────────────────────────────────────────
    caller/     supervisor/     review/
    ───────────────────────────────────────────────────────────────
    shared/  (the pipes, the record, where records live)     linux/
    ───────────────────────────────────────────────────────────────
    core/    (pure)

A module may import its own floor's package and the floors below it, never a
sibling on its floor, never a floor above. The rules are checked on every
module the packages hold, found by walking the tree (no hand-kept list), from
an AST, so docstrings and comments do not count while imports inside functions
and under ``TYPE_CHECKING`` do. Two more rules: the core imports nothing that
touches the operating system or a clock (and only ``core/machine.py`` uses
``transitions``), and nothing a caller runs (``caller/``, ``api/``, ``shared/``,
``review/``, ``linux/``) imports ``transitions`` or ``structlog``, directly or
through another tether module. And jeepney (D-Bus, for the user's systemd
scope) is imported by one module only, ``tether.linux.systemd_scope``, and
only where a supervisor asks for a scope: inside a function, never when a
module loads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import tether

PACKAGE = Path(tether.__file__).parent

#: Each package and the tether packages it may import (itself included).
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "linux": frozenset({"linux"}),
    "shared": frozenset({"core", "shared"}),
    "caller": frozenset({"core", "shared", "linux", "caller"}),
    "supervisor": frozenset({"core", "shared", "linux", "supervisor"}),
    "review": frozenset({"core", "shared", "review"}),
    "api": frozenset({"core", "shared", "caller", "api"}),
    "cli": frozenset({"core", "shared", "linux", "caller", "supervisor", "review", "cli"}),
    "ray": frozenset({"core", "shared", "caller", "api", "ray"}),
}

#: The floors that are surfaces: they may also import the package itself (``tether._LOADED_AT``).
SURFACES = frozenset({"cli", "api", "ray"})

#: Modules outside the floors that anything may import: constants only.
ANYWHERE = frozenset({"tether._version"})

#: Standard modules the core must not import: the operating system, clocks, ways around both.
IMPURE = frozenset(
    {
        "os",
        "signal",
        "subprocess",
        "selectors",
        "select",
        "time",
        "threading",
        "socket",
        "structlog",
        "importlib",
        "ctypes",
        "multiprocessing",
        "asyncio",
    }
)

#: The packages whose code runs inside the caller's process.
CALLER_SIDE = ("caller", "api", "shared", "review", "linux", "ray")
HEAVY = frozenset({"transitions", "structlog"})


def modules() -> Iterator[str]:
    """Every module of the package, as a dotted name."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def path_of(module: str) -> Path | None:
    """The source of the tether module ``module``, or ``None`` if it is not one."""
    base = PACKAGE.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports_in(path: Path, package: str = "tether") -> Iterator[tuple[str, int]]:
    """Yield every absolute module name the source at ``path`` imports, with its line.

    ``from tether.x import name`` also yields ``tether.x.name`` when that is a
    module. Relative imports are resolved against ``package`` (the module's
    own package). ``__import__(...)`` calls are yielded as ``__import__``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *filter(None, [node.module])])
            else:
                assert node.module is not None
                base = node.module
            yield base, node.lineno
            for alias in node.names:
                if path_of(f"{base}.{alias.name}") is not None:
                    yield f"{base}.{alias.name}", node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            yield "__import__", node.lineno


def own_imports(module: str) -> list[tuple[str, int]]:
    """What the tether module ``module`` imports itself."""
    path = path_of(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return list(imports_in(path, package))


def closure(module: str) -> dict[str, list[tuple[str, int]]]:
    """``module`` and every tether module it reaches by imports, each with its imports."""
    found: dict[str, list[tuple[str, int]]] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found[current] = own_imports(current)
        todo += [name for name, _ in found[current] if name.startswith("tether.") and path_of(name)]
    return found


def floor_of(module: str) -> str | None:
    """The package a tether module belongs to; ``None`` for a surface outside the floors."""
    parts = module.split(".")
    if parts[-1] == "__main__" or len(parts) < 2:
        return None  # entry points and the package's own __init__ are surfaces
    return parts[1] if parts[1] in ALLOWED else None


FLOORED = [name for name in modules() if floor_of(name) is not None]
CORE = [name for name in FLOORED if floor_of(name) == "core"]
CALLER_MODULES = [name for name in FLOORED if floor_of(name) in CALLER_SIDE]


def test_every_module_lives_on_a_floor() -> None:
    strays = [
        name
        for name in modules()
        if floor_of(name) is None
        and not name.endswith(".__main__")
        and name not in ("tether", *ANYWHERE)
    ]
    assert strays == [], "each module belongs in core/, shared/, linux/, caller/, ..."


@pytest.mark.parametrize("module", FLOORED)
def test_imports_go_down_the_floors(module: str) -> None:
    floor = floor_of(module)
    assert floor is not None
    wrong = [
        f"{module}:{line} imports {name}"
        for name, line in own_imports(module)
        if (name == "tether" and floor not in SURFACES)
        or (
            name.startswith("tether.")
            and name not in ANYWHERE
            and name.split(".")[1] not in ALLOWED[floor]
        )
    ]
    assert wrong == []


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_nothing_impure(module: str) -> None:
    offenders = [
        f"{module}:{line} imports {name}"
        for name, line in own_imports(module)
        if name.split(".")[0] in IMPURE or name == "__import__"
    ]
    assert offenders == []


@pytest.mark.parametrize("module", CORE)
def test_only_the_machine_uses_transitions(module: str) -> None:
    uses = [name for name, _ in own_imports(module) if name.split(".")[0] == "transitions"]
    if module == "tether.core.machine":
        assert uses, "the machine is the table interpreter: it should import transitions"
    else:
        assert uses == []


@pytest.mark.parametrize("module", CALLER_MODULES)
def test_the_callers_side_never_reaches_transitions_or_structlog(module: str) -> None:
    heavy = [
        f"{where}:{line} imports {name}"
        for where, names in sorted(closure(module).items())
        for name, line in names
        if name.split(".")[0] in HEAVY
    ]
    assert heavy == []


def import_time_imports(path: Path) -> Iterator[tuple[str, int]]:
    """The top-level module names ``path`` imports as it loads: not in a function's body,
    nor under ``if TYPE_CHECKING:`` (class bodies run as the module loads: they count)."""
    todo: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"), filename=str(path))]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            todo += node.orelse
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module.split(".")[0], node.lineno
        todo += ast.iter_child_nodes(node)


def test_only_the_scope_module_uses_jeepney_and_only_when_asked() -> None:
    users = sorted(
        module
        for module in modules()
        if (path := path_of(module)) is not None
        and any(name.split(".")[0] == "jeepney" for name, _ in imports_in(path))
    )
    assert users == ["tether.linux.systemd_scope"]
    at_load = [
        f"{module}:{line}"
        for module in modules()
        if (path := path_of(module)) is not None
        for name, line in import_time_imports(path)
        if name == "jeepney"
    ]
    assert at_load == []


def test_the_load_time_checker_skips_only_functions_and_type_checking(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import jeepney.io\n"
        "if TYPE_CHECKING:\n"
        "    import signal\n"
        "else:\n"
        "    import socket\n"
        "class C:\n"
        "    import time\n"
        "def f() -> None:\n"
        "    import subprocess\n",
        encoding="utf-8",
    )
    assert {name for name, _ in import_time_imports(sample)} == {"jeepney", "socket", "time"}


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A checker that finds nothing must be finding nothing for the right reason."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os.path\n"
        "from time import monotonic\n"
        "from . import events\n"
        "from .reasons import Reason\n"
        "from ..shared import protocol\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import signal as s\n"
        "def f() -> None:\n"
        "    import subprocess\n"
        "    __import__('socket')\n",
        encoding="utf-8",
    )

    found = {name for name, _ in imports_in(sample, "tether.core")}

    assert found == {
        "os.path",
        "time",
        "tether.core",
        "tether.core.events",
        "tether.core.reasons",
        "tether.shared",
        "tether.shared.protocol",
        "typing",
        "signal",
        "subprocess",
        "__import__",
    }


def test_the_rules_would_catch_a_breach() -> None:
    """The floors are found, and the closure follows imports into other modules."""
    assert {"tether.core.machine", "tether.caller.start", "tether.supervisor.loop"} <= set(FLOORED)
    assert floor_of("tether.supervisor.__main__") is None
    assert floor_of("tether") is None
    assert "supervisor" not in ALLOWED["caller"]
    assert "caller" not in ALLOWED["supervisor"]
    reached = closure("tether.core.machine")
    assert {"tether.core.events", "tether.core.effects", "tether.core.reasons"} <= set(reached)
    assert any(name == "transitions" for name, _ in reached["tether.core.machine"])

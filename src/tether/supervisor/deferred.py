"""Loading a library without the modules it merely binds, or merely might use.

:func:`deferred` puts a stand-in in ``sys.modules`` that loads the real module on first use;
:func:`absent` makes modules unimportable for a while; :func:`uncollected` holds off garbage
collection. Why, and what it depends on: docs/architecture.md, "The import budget".
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.machinery
import importlib.util
import sys
import types

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["absent", "deferred", "uncollected"]


class _Deferred(types.ModuleType):
    """A module's stand-in that loads the module when first asked for a name it lacks."""

    def __getattr__(self, name: str) -> object:
        full_name = self.__name__
        if sys.modules.get(full_name) is self:
            del sys.modules[full_name]
        real = importlib.import_module(full_name)
        self.__dict__.update(real.__dict__)
        return getattr(real, name)


def _spec_of(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where ``name`` would be loaded from, found without importing it or its package."""
    package, _, _ = name.rpartition(".")
    if not package:
        return importlib.util.find_spec(name)
    outer = _spec_of(package)
    if outer is None or outer.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(outer.submodule_search_locations))


@contextlib.contextmanager
def deferred(*names: str) -> Iterator[None]:
    """Within this block, importing a module of ``names`` binds a stand-in that loads it on use."""
    stand_ins: dict[str, _Deferred] = {}
    for name in names:
        if name in sys.modules:
            continue
        spec = _spec_of(name)
        if spec is None:
            continue
        stand_in = _Deferred(name)
        stand_in.__spec__ = spec
        stand_in.__file__ = spec.origin
        sys.modules[name] = stand_ins[name] = stand_in
    switch = "logAsyncioTasks"  # Python 3.12 and later
    tasks = None
    if "asyncio" in stand_ins:
        import logging  # structlog loads it anyway

        tasks = getattr(logging, switch, None)
    if tasks is not None:
        setattr(logging, switch, False)
    try:
        yield
    except BaseException:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
        raise
    finally:
        if tasks is not None:
            setattr(logging, switch, tasks)


@contextlib.contextmanager
def absent(*names: str) -> Iterator[None]:
    """Within this block, ``import`` of a module of ``names`` fails as if it were not installed."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not found"
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


@contextlib.contextmanager
def uncollected() -> Iterator[None]:
    """Within this block, no garbage collection; after it, what was made is frozen."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()
            gc.enable()

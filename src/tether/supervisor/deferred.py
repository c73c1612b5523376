"""Loading a library without the modules it merely binds, or merely might use.

The supervisor loads ``transitions`` and ``structlog`` once its command runs,
while the caller waits for a command that may exit at once; some of what they
import is never used by tether:

* structlog's logger classes offer ``async`` twins of every method, so two of
  its modules ``import asyncio`` as they load; asyncio in turn loads ``ssl``,
  the C library behind it and a few dozen modules more (tens of milliseconds,
  and about 8 MiB of a 24 MiB supervisor). Its package also binds
  ``structlog.stdlib`` and ``structlog.threadlocal`` (which load ``uuid`` and
  ``platform``); tether uses neither.
* ``transitions`` imports :mod:`inspect` (and with it ``ast``, ``dis``,
  ``tokenize``...) for one check made only when a model's own method has a
  trigger's name, which tether's never has; and :mod:`logging`, which
  imports :mod:`traceback` (with ``linecache``, ``tokenize`` and
  ``textwrap``, about 5 ms) to format exceptions that no logger of a
  supervisor formats. (A run with an event log loads it all the same:
  structlog takes a name from it as it loads.)
* structlog's console renderer looks for ``colorama``, ``better_exceptions``
  and ``rich``, and its package for ``twisted``: installed, they cost a
  supervisor tens of milliseconds more (``rich`` alone is more than structlog);
  absent, each is a search of the whole import path.

So within :func:`deferred`, ``sys.modules`` holds a stand-in
(:class:`_Deferred`) for each module named: ``import asyncio`` (or ``from
structlog import stdlib``) binds it, and the real module is loaded the first
time anything asks the stand-in for one of its names; from then on the
stand-in forwards to it, and ``sys.modules`` holds the real module, so there
is never a second copy. The supervisor never asks, so these modules are never
loaded. (:class:`importlib.util.LazyLoader` cannot do this: the import
statement itself reads the module's ``__spec__``, which loads it.) Within
:func:`absent`, the modules named cannot be imported (as if not installed),
which is what the libraries looking for them handle. And within
:func:`uncollected`, no garbage collection runs: structlog makes thousands of
objects as it loads, all alive for good, and the half a dozen collections
they would trigger find nothing to free (1 to 3 ms here).

This depends on the libraries only binding those modules at import time,
never using them; a release that did would load them as before, correctly
and only slower, and ``tests/test_deferred_imports.py`` would say so. The
structlog versions it was checked with are pinned in ``pyproject.toml``.
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
    """Within this block, importing a module of ``names`` binds a stand-in that loads it on use.

    A module already loaded, or not installed, is left as it is. A stand-in
    stays in :data:`sys.modules` after the block (that is the point), unless
    the block failed. Since Python 3.12 a :class:`logging.LogRecord` asks
    asyncio for the current task whenever ``asyncio`` is in :data:`sys.modules`,
    and structlog makes one as it loads: ``logging.logAsyncioTasks`` (the
    documented switch for that) is off for the block when asyncio is deferred,
    so the stand-in is not taken for a loaded asyncio.
    """
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
    """Within this block, ``import`` of a module of ``names`` fails as if it were not installed.

    A module already loaded is left as it is; after the block, the others can
    be imported again.
    """
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
    """Within this block, no garbage collection; after it, what was made is frozen.

    As :func:`tether.supervisor.detach.loaded` does for the code loaded before
    the launch: frozen objects are never scanned again (nor written to by the
    collector, so pages shared with a parent stay shared). Collection resumes
    only if it was on before the block.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()
            gc.enable()

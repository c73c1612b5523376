"""Loading structlog without loading :mod:`asyncio` (and :mod:`ssl`) with it.

structlog's logger classes offer ``async`` twins of every method, so two of
its modules ``import asyncio`` as they load; asyncio in turn loads ``ssl``,
the C library behind it and a few dozen modules more. That is more than a
third of what importing structlog costs (tens of milliseconds, and about
8 MiB of a 24 MiB supervisor), for methods the supervisor never calls: it
logs from one thread, synchronously.

So while structlog loads, ``sys.modules["asyncio"]`` is a stand-in
(:class:`_Deferred`): ``import asyncio`` binds it, and the real module is
loaded the first time anything asks the stand-in for one of asyncio's names;
from then on the stand-in forwards to it, and ``sys.modules`` holds the real
module, so there is never a second copy. The supervisor never asks, so asyncio
is never loaded. (:class:`importlib.util.LazyLoader` cannot do this: the
import statement itself reads the module's ``__spec__``, which loads it.)

This depends on structlog only binding the module at import time, never
using it; a structlog that did would load asyncio as before, correctly and
only slower, and ``tests/test_deferred_imports.py`` would say so.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["asyncio_deferred"]

_NAME = "asyncio"


class _Deferred(types.ModuleType):
    """A module's stand-in that loads the module when first asked for a name it lacks."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get(_NAME) is self:
            del sys.modules[_NAME]
        real = importlib.import_module(_NAME)
        self.__dict__.update(real.__dict__)
        return getattr(real, name)


@contextlib.contextmanager
def asyncio_deferred() -> Iterator[None]:
    """Within this block, ``import asyncio`` binds a stand-in that loads asyncio on first use.

    Since Python 3.12 a :class:`logging.LogRecord` asks asyncio for the current
    task whenever ``asyncio`` is in :data:`sys.modules`, and structlog makes one
    as it loads: ``logging.logAsyncioTasks`` (the documented switch for that) is
    off for the block, so the stand-in is not taken for a loaded asyncio.
    """
    import logging

    if _NAME not in sys.modules:
        spec = importlib.util.find_spec(_NAME)
        if spec is not None:
            stand_in = _Deferred(_NAME)
            stand_in.__spec__ = spec
            stand_in.__file__ = spec.origin
            sys.modules[_NAME] = stand_in
    switch = "logAsyncioTasks"  # Python 3.12 and later
    tasks = getattr(logging, switch, None)
    if tasks is not None:
        setattr(logging, switch, False)
    try:
        yield
    finally:
        if tasks is not None:
            setattr(logging, switch, tasks)

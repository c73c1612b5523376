"""The supervisor loads structlog and transitions without what they merely bind.

Each check runs in a fresh interpreter that imports what a supervisor imports, in its order.
The first fails if a structlog (or transitions) release starts *using* a deferred module as it
loads (docs/architecture.md, "The import budget", row ``event-log``); the others show that a
deferred module is the real one once asked for, and that one kept absent can be imported after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import BOUND
from import_budget import kept_off

_SUPERVISOR_SIDE = """
import json, sys
from pathlib import Path
from tether.supervisor import detach, launch
from tether.supervisor import loop
from tether.core.redaction import Redactor
from tether.supervisor.event_log import EventLog
log = EventLog.open(Path(sys.argv[1]), Redactor())
log.emit("hello", n=1)
log.close()
heavy = sys.argv[2:]
def loaded(name):
    module = sys.modules.get(name)
    return module is not None and type(module).__name__ != "_Deferred"
print(json.dumps([name for name in heavy if loaded(name)]))
"""

_DEFERRED_STILL_WORK = """
import sys
from tether.supervisor import loop
from tether.supervisor.event_log import EventLog
import inspect, structlog, transitions
from structlog import stdlib, threadlocal
print(
    structlog.stdlib.get_logger is stdlib.get_logger,
    type(sys.modules["structlog.stdlib"]).__name__,
    threadlocal.wrap_dict is sys.modules["structlog.threadlocal"].wrap_dict,
    transitions.core.inspect.ismethod(print) is inspect.ismethod(print),
    type(sys.modules["inspect"]).__name__,
)
"""

_ABSENT_ONLY_WHILE_LOADING = """
import sys
from tether.supervisor.event_log import EventLog
import structlog.dev
blocked = [name for name in ("colorama", "rich", "twisted") if name in sys.modules]
print(structlog.dev.colorama is None, blocked)
"""

_NO_COLLECTION_WHILE_LOADING = """
import gc, sys
from tether.supervisor import launch, loop
gc.collect()
collections = []
gc.callbacks.append(lambda phase, info: collections.append(phase))
from tether.supervisor.event_log import EventLog
print(len(collections), gc.isenabled(), gc.get_freeze_count() > 0)
"""

_ASYNCIO_STILL_WORKS = """
import sys
from tether.supervisor.event_log import EventLog
import structlog._native
import asyncio
async def answer():
    return structlog._native.asyncio.get_running_loop() is asyncio.get_running_loop()
print(asyncio.run(answer()), sys.modules["asyncio"].run is asyncio.run)
"""


def _python(code: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=True,
    )
    return result.stdout


def test_the_supervisor_side_never_loads_asyncio_or_ssl(tmp_path: Path) -> None:
    log = str(tmp_path / "r.events.jsonl")
    loaded = json.loads(_python(_SUPERVISOR_SIDE, log, *kept_off("event-log")))
    assert loaded == []
    line = json.loads((tmp_path / "r.events.jsonl").read_text().splitlines()[0])
    assert line["event"] == "hello"


def test_asyncio_is_the_real_one_once_asked_for() -> None:
    assert _python(_ASYNCIO_STILL_WORKS).split() == ["True", "True"]


def test_deferred_modules_are_the_real_ones_once_asked_for() -> None:
    assert _python(_DEFERRED_STILL_WORK).split() == ["True", "module", "True", "True", "module"]


def test_modules_kept_absent_while_structlog_loads_are_not_blocked_afterwards() -> None:
    assert _python(_ABSENT_ONLY_WHILE_LOADING).split() == ["True", "[]"]


def test_no_garbage_collection_runs_while_structlog_loads() -> None:
    assert _python(_NO_COLLECTION_WHILE_LOADING).split() == ["0", "True", "True"]

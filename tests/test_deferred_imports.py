"""The supervisor loads structlog without asyncio and ssl, and asyncio still works if asked for.

Each check runs in a fresh interpreter, which imports what a supervisor
imports, in its order (the launch, then the loop and the event log), writes
an event log through structlog, and reports which modules are loaded. If a
structlog release starts *using* asyncio as it loads, the first test fails:
the deferral (:mod:`tether.supervisor.deferred`) no longer pays, and the
pinned structlog versions in ``pyproject.toml`` need a look.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import BOUND

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
heavy = ("asyncio.base_events", "_asyncio", "ssl", "_ssl")
print(json.dumps([name for name in heavy if name in sys.modules]))
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
    loaded = json.loads(_python(_SUPERVISOR_SIDE, str(tmp_path / "r.events.jsonl")))
    assert loaded == []
    line = json.loads((tmp_path / "r.events.jsonl").read_text().splitlines()[0])
    assert line["event"] == "hello"


def test_asyncio_is_the_real_one_once_asked_for() -> None:
    assert _python(_ASYNCIO_STILL_WORKS).split() == ["True", "True"]

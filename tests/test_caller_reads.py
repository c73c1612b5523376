"""What an API launch reads in its caller's process: each fact once (issue 36, the caller's CPU).

Counted by an audit hook (every ``open``, ``os.open`` included) in a caller of its own, on a
launch through a zygote already started; no timing is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import api_caller

_COUNTED = """
import json, sys
import tether

tether.run(["true"], record=False)  # the zygote is started: what follows is a launch as usual
opened = []
counting = False


def hook(event, args):
    if counting and event == "open" and isinstance(args[0], str):
        opened.append(args[0])


sys.addaudithook(hook)
counting = True
tether.run(["true"], record=False)
counting = False
print(json.dumps(opened))
"""


def test_a_launch_reads_the_callers_status_once_for_the_request_and_once_for_the_zygote(
    tmp_path: Path,
) -> None:
    """The request's ignored signals and umask come from one reading of ``/proc/self/status``,
    the zygote's request's from the fingerprint's own reading of the thread's (was four)."""
    result = api_caller(["-c", _COUNTED], tmp_path)
    assert result.returncode == 0, result.stderr
    opened = json.loads(result.stdout)
    statuses = [path for path in opened if path.endswith("/status")]
    assert statuses == ["/proc/self/status", "/proc/thread-self/status"], opened

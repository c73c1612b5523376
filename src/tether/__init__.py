"""tether: run one command so that it cannot outlive the process that asked for it.

Its whole process tree is stopped at its deadline, on cancel, or when this program dies::

    outcome = tether.run(["python", "evaluate.py"], deadline="2h", label="eval-42")
    print(outcome)          # the verdict: what ended the run, what tether did, the record
    with tether.launch(["sleep", "600"], grace=5) as job:   # start, and carry on
        job.cancel()        # SIGTERM, then SIGKILL after the grace

``run``, ``launch``, ``run_async`` and ``launch_async`` take the same options; every run leaves
a private JSON record. Linux only. The guide and the reference: docs/api.md.
"""

from time import monotonic as _monotonic

#: The programs' deadlines count from here at the latest, not after their imports (the API's
#: from the call to ``launch``).
_LOADED_AT = _monotonic()

TYPE_CHECKING = False

from tether._version import __version__
from tether.core.reasons import Reason

if TYPE_CHECKING:
    from tether.api.functions import launch, launch_async, run, run_async
    from tether.api.handle import Tether
    from tether.api.options import DEVNULL, PIPE, STDOUT
    from tether.api.outcome import CommandFailed, Outcome, OutputDecodeError, TimeoutExpired
    from tether.caller.launch_errors import CommandNotExecutable, CommandNotFound, LaunchError
    from tether.caller.output_stream import OutputStream

__all__ = [
    "DEVNULL",
    "PIPE",
    "STDOUT",
    "CommandFailed",
    "CommandNotExecutable",
    "CommandNotFound",
    "LaunchError",
    "Outcome",
    "OutputDecodeError",
    "OutputStream",
    "Reason",
    "Tether",
    "TimeoutExpired",
    "__version__",
    "launch",
    "launch_async",
    "run",
    "run_async",
]

#: Public names loaded on first use, and their modules.
_LAZY = {
    name: f"tether.{module}"
    for module, names in (
        ("api.options", ("DEVNULL", "PIPE", "STDOUT")),
        ("caller.output_stream", ("OutputStream",)),
        ("api.outcome", ("CommandFailed", "Outcome", "OutputDecodeError", "TimeoutExpired")),
        ("caller.launch_errors", ("CommandNotExecutable", "CommandNotFound", "LaunchError")),
        ("api.handle", ("Tether",)),
        ("api.functions", ("launch", "launch_async", "run", "run_async")),
    )
    for name in names
}


if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name is still an error

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'tether' has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(module), name)
        globals()[name] = value  # later look-ups skip this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

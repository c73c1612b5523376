"""tether: run one command so that it cannot outlive the process that asked for it.

The command is stopped, with its whole process tree, when its deadline
passes, when you cancel it, or when this program dies, however it dies::

    import tether

    outcome = tether.run(["python", "evaluate.py"], deadline="2h", label="eval-42")
    print(outcome)          # the verdict: what ended the run, what tether did, the record
    outcome.check()         # raise CommandFailed unless it completed with status 0

    with tether.launch(["sleep", "600"], grace=5) as job:   # start, and carry on
        ...
        job.cancel()        # SIGTERM, then SIGKILL after the grace
    job.outcome.reason      # Reason.CANCELLED

``run`` and ``launch`` (and ``run_async``, ``launch_async``) take the same
options (:class:`~tether.api.options.LaunchOptions`): ``deadline``, ``grace``,
``record``, ``record_argv``, ``label``, ``cwd``, ``env``, ``stdin``,
``stdout``, ``stderr``. Every run leaves a private JSON record (read it with
``outcome.read_record()``, or ``tether show --last`` at the shell). Linux only.

Importing the package is cheap and changes nothing in your process: the API is
loaded on first use of one of its names, and neither ``transitions`` nor
``structlog`` (the supervisor's) is ever imported here.
"""

from time import monotonic as _monotonic

#: When this package was first imported. The programs (``tether``, ``python -m
#: tether.supervisor``) count their deadline from here, the earliest moment
#: the package can read a clock, rather than after their own imports: the
#: caller asked when it started them, and the deadline must not grow by the
#: time Python takes to load a command-line parser. (The Python API counts
#: from the call to ``launch``.)
_LOADED_AT = _monotonic()

# ``typing`` costs milliseconds at run time; type checkers know this idiom.
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

#: Public names loaded on first use, and the module each comes from.
_LAZY = {
    "DEVNULL": "tether.api.options",
    "PIPE": "tether.api.options",
    "STDOUT": "tether.api.options",
    "OutputStream": "tether.caller.output_stream",
    "CommandFailed": "tether.api.outcome",
    "CommandNotExecutable": "tether.caller.launch_errors",
    "CommandNotFound": "tether.caller.launch_errors",
    "LaunchError": "tether.caller.launch_errors",
    "Outcome": "tether.api.outcome",
    "OutputDecodeError": "tether.api.outcome",
    "Tether": "tether.api.handle",
    "TimeoutExpired": "tether.api.outcome",
    "launch": "tether.api.functions",
    "launch_async": "tether.api.functions",
    "run": "tether.api.functions",
    "run_async": "tether.api.functions",
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

"""tether: run one command so that it cannot outlive the process that asked for it.

Importing this package is cheap on purpose: it loads neither ``transitions``
nor ``structlog`` (only the supervisor process needs them), so a program that
launches hundreds of commands pays for them zero times. The API itself
(:mod:`tether.api`) is loaded on first use of one of its names, through the
module ``__getattr__`` below, so ``import tether`` does not even pay for
``subprocess`` or ``threading``; :mod:`asyncio` is loaded only by the
``async`` functions. Type checkers see the names through the
``TYPE_CHECKING`` imports.
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
    from tether.api.outcome import CommandFailed, Outcome, TimeoutExpired
    from tether.caller.capture import OutputStream
    from tether.caller.start import LaunchError

__all__ = [
    "DEVNULL",
    "PIPE",
    "STDOUT",
    "CommandFailed",
    "LaunchError",
    "Outcome",
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
    "OutputStream": "tether.caller.capture",
    "CommandFailed": "tether.api.outcome",
    "LaunchError": "tether.caller.start",
    "Outcome": "tether.api.outcome",
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

"""tether: run one command so that it cannot outlive the process that asked for it.

Importing this package is cheap on purpose: it loads neither ``transitions`` nor
``structlog`` (only the supervisor process needs them), so a program that
launches hundreds of commands pays for them zero times.
"""

from tether._version import __version__
from tether.outcome import Reason

__all__ = ["Reason", "__version__"]

"""The argument parsers of ``tether run``, the seed door and the review commands.

Apart from :mod:`tether.cli.messages` because they load ``argparse``, which
``tether timeout`` (its options read by hand) never needs: its path to the command's launch
stays without it.
"""

from __future__ import annotations

import argparse
import sys

from tether.cli.messages import print_out, say, usage_error, write_err
from tether.core.reasons import TETHER_FAILED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from _typeshed import SupportsWrite

__all__ = ["GnuStyleParser", "UsageParser"]


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 125, tether's own-failure status.

    It also hands every option its value as typed, ``--`` included
    (``--name=--``): argparse before Python 3.13 drops a ``--`` it finds among
    an option's values and stores the empty list that is left, which is no
    value at all (a label of ``[]``, a duration of ``[]``) for the request
    builder to choke on.
    """

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """Help and version on stdout (a failed write is tether's failure); the rest on stderr."""
        if not message:
            return
        if file is not None and file is sys.stderr:
            write_err(message)
        else:
            status = print_out(message)
            if status:
                raise SystemExit(status)

    def error(self, message: str) -> NoReturn:
        write_err(self.format_usage())
        say(f"{self.prog}: error: {message}")
        raise SystemExit(TETHER_FAILED)


class GnuStyleParser(UsageParser):
    """A parser whose every usage error reads as GNU tools' do (:func:`usage_error`)."""

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, message)

"""The argument parsers of ``tether run``, the seed door and the review commands, apart from
:mod:`tether.cli.messages` because they load ``argparse`` (``tether timeout`` never does)."""

from __future__ import annotations

import argparse
import sys

from tether.cli.messages import print_out, say, usage_error, write_err
from tether.core.reasons import TETHER_FAILED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from _typeshed import SupportsWrite

    #: An option as a table row: its flags, its metavar (``None``: a switch), its help, and
    #: any other keywords of ``add_argument``.
    Option = (
        tuple[tuple[str, ...], str | None, str] | tuple[tuple[str, ...], str, str, dict[str, Any]]
    )


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors exit 125, and which hands an option its value
    ``--`` as typed (``--name=--``; argparse before 3.13 stores ``[]``)."""

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.option_strings and action.nargs is None and arg_strings == ["--"]:
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # Help and version on stdout (a failed write is tether's failure); the rest on stderr.
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


def add_options(parser: argparse.ArgumentParser, *options: Option) -> None:
    """Add each :data:`Option`; one whose flag is a bare name is an optional positional."""
    for flags, metavar, text, *more in options:
        if metavar is None:
            parser.add_argument(*flags, action="store_true", help=text)
        elif flags[0].startswith("-"):
            parser.add_argument(*flags, metavar=metavar, help=text, **(more[0] if more else {}))
        else:
            parser.add_argument(*flags, nargs="?", metavar=metavar, help=text)


class GnuStyleParser(UsageParser):
    """A parser whose every usage error reads as GNU tools' do (:func:`usage_error`)."""

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, message)

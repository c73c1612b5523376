"""``tether run``'s options, read by hand from a table of the parser's options: no ``argparse``
on the way to the launch (docs/architecture.md, "The import budget").

``argparse`` reads only ``--help`` and a short option with something attached (``-vx``):
:func:`read_options` then returns ``None``. ``tests/test_run_options.py`` holds both readings.
"""

from __future__ import annotations

from tether.cli.messages import usage_error
from tether.core.limits import LIMITS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, NoReturn

PROGRAM: Final = "tether run"

#: Every option string of ``tether run``, in the parser's order: where its value
#: goes (``help``: argparse's to print), and whether it takes one.
OPTIONS: Final = {
    "-h": ("help", False),
    "--help": ("help", False),
    "--deadline": ("deadline", True),
    "--grace": ("grace", True),
    "--idle": ("idle", True),
    "--record": ("record", True),
    "--no-record": ("no_record", False),
    "--record-argv": ("record_argv", False),
    "--label": ("label", True),
    "--name": ("label", True),
    "-v": ("verbose", False),
    "--verbose": ("verbose", False),
    **{limit.flag: (limit.name, True) for limit in LIMITS},
}

#: ``--record`` and ``--no-record`` exclude each other (an argparse group in the parser).
_EXCLUSIVE: Final = {"record": "no_record", "no_record": "record"}
_FLAG: Final = {"record": "--record", "no_record": "--no-record"}


class RunOptions:
    """What the options asked for (the parser's defaults for the rest); also the namespace the
    parser fills when it reads them (``parse_args(..., namespace=RunOptions())``)."""

    def __init__(self) -> None:
        self.deadline: str | None = None
        self.grace: str | None = None
        self.idle: str | None = None
        self.record: str | None = None
        self.no_record = False
        self.record_argv = False
        self.label: str | None = None
        self.verbose = False
        for limit in LIMITS:
            setattr(self, limit.name, None)

    def limits(self) -> dict[str, str | None]:
        """The limits' values, by API name (:data:`~tether.core.limits.LIMITS`)."""
        given: dict[str, str | None] = {limit.name: getattr(self, limit.name) for limit in LIMITS}
        return given


def _usage(message: str, *, suggestion: str | None = None) -> NoReturn:
    usage_error(PROGRAM, message, suggestion=suggestion)


def split_command_line(argv: list[str]) -> tuple[list[str], list[str]]:
    """``tether run``'s options (each joined to its value: ``--label=-x``), and the command,
    from the first word that is not one or after ``--``; a word that looks like an option and is
    none is refused with the nearest as a suggestion (``--deadlin 5m make`` runs nothing)."""
    options: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return options, argv[index + 1 :]
        if not word.startswith("-") or word == "-":
            return options, argv[index:]
        long = word.startswith("--")
        name = word.split("=", 1)[0] if long else word[:2]
        option = _resolve(name)
        takes_value = OPTIONS[option][1]
        attached = "=" in word if long else len(word) > 2
        if takes_value and not attached:
            if index + 1 == len(argv):
                _usage(f"option '{option}' requires an argument")
            index += 1
            word = f"{option}={argv[index]}"
        elif not takes_value and attached and long:
            _usage(f"option '{option}' doesn't allow an argument")
        options.append(word)
        index += 1
    return options, []


def _resolve(name: str) -> str:
    """``name`` if it is an option as spelt (never abbreviated), or a refusal naming the nearest."""
    if name in OPTIONS:
        return name
    if name.startswith("--"):
        import difflib

        close = difflib.get_close_matches(name, [o for o in OPTIONS if o.startswith("--")], n=1)
        _usage(f"unrecognized option '{name}'", suggestion=close[0] if close else None)
    _usage(f"invalid option -- '{name[1:]}'")


def read_options(options: list[str]) -> RunOptions | None:
    """The values of ``options`` (from :func:`split_command_line`; the last of a repeated one
    counts), a refusal, or ``None`` when the parser must read them (``--help``, ``-vx``)."""
    for word in options:
        if word in ("-h", "--help") or (
            not word.startswith("--") and len(word) > 2 and word.strip("v") != "-"
        ):
            return None
    values = RunOptions()
    seen: set[str] = set()
    for word in options:
        name, _, value = word.partition("=") if word.startswith("--") else (word[:2], "", "")
        dest, takes_value = OPTIONS[name]
        other = _EXCLUSIVE.get(dest)
        if other is not None and other in seen:
            _usage(f"argument {_FLAG[dest]}: not allowed with argument {_FLAG[other]}")
        seen.add(dest)
        setattr(values, dest, value if takes_value else True)
    return values

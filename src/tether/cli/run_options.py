"""``tether run``'s options, read by hand: no ``argparse`` on the way to the command's launch.

``argparse`` (with ``gettext``, and the ``shutil``, ``locale`` and
compression modules its help formatter pulls in) and building the parser
cost ``tether run`` several milliseconds before it can fork its supervisor,
every run, for a command line of a few flags. So the command line is read
here, from a table of the options :func:`tether.cli.run._run_parser`
declares, and ``argparse`` is loaded only for what only it can say the same
way: ``--help`` (its text, and the man page and completions generated from
the same parser), and a short option with something attached (``-vx``,
``-v=1``, ``-vh``), whose handling is argparse's own and rare. For those,
:func:`read_options` returns ``None`` and the caller hands the options to
the parser.

What is read must be exactly what the parser would read, message for message
and value for value: ``tests/test_run_options.py`` checks the table against
the parser and the two readings against each other on random command lines.
"""

from __future__ import annotations

from tether.cli.messages import usage_error

# On the path to the command's launch: no ``typing`` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, NoReturn

__all__ = ["OPTIONS", "PROGRAM", "RunOptions", "read_options", "split_command_line"]

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
    "--memory-max": ("memory_max", True),
    "--memory-swap-max": ("memory_swap_max", True),
    "--cpus": ("cpus", True),
    "--pids-max": ("pids_max", True),
}

#: ``--record`` and ``--no-record`` exclude each other (an argparse group in the parser).
_EXCLUSIVE: Final = {"record": "no_record", "no_record": "record"}
_FLAG: Final = {"record": "--record", "no_record": "--no-record"}


class RunOptions:
    """What the options asked for; an option not given keeps the parser's default.

    Also the namespace the parser fills when it reads the options instead
    (``parse_args(..., namespace=RunOptions())``), so both readings give the
    same object.
    """

    def __init__(self) -> None:
        self.deadline: str | None = None
        self.grace: str | None = None
        self.idle: str | None = None
        self.record: str | None = None
        self.no_record = False
        self.record_argv = False
        self.label: str | None = None
        self.verbose = False
        self.memory_max: str | None = None
        self.memory_swap_max: str | None = None
        self.cpus: str | None = None
        self.pids_max: str | None = None


def _usage(message: str, *, suggestion: str | None = None) -> NoReturn:
    usage_error(PROGRAM, message, suggestion=suggestion)


def split_command_line(argv: list[str]) -> tuple[list[str], list[str]]:
    """``tether run``'s options, and the command: options end at ``--`` or at the first word
    that is not one, as with ``timeout``, ``env`` and ``nice`` (``tether run sleep 1``).

    An option that takes a value takes the next word whatever it is
    (``--label -x``), and is returned joined to it (``--label=-x``), so that
    the parser too takes a value like ``-x`` as the value it is. A word that
    looks like an option and is none is refused here, with the nearest option
    as a suggestion, rather than taken for the command: ``--deadlin 5m make``
    must not run ``--deadlin``.
    """
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
    """``name`` if it is an option, or a refusal with the nearest option as a suggestion.

    Options are taken as spelt, never abbreviated (``--dead`` for
    ``--deadline``): a script that abbreviates breaks the day an option is
    added with the same beginning, and a typo must not pass for an option.
    """
    if name in OPTIONS:
        return name
    if name.startswith("--"):
        import difflib

        close = difflib.get_close_matches(name, [o for o in OPTIONS if o.startswith("--")], n=1)
        _usage(f"unrecognized option '{name}'", suggestion=close[0] if close else None)
    _usage(f"invalid option -- '{name[1:]}'")


def read_options(options: list[str]) -> RunOptions | None:
    """The values of ``options`` (as :func:`split_command_line` returns them), or a refusal.

    ``None`` when the parser must read them: ``--help``, or a short option
    with something attached other than more ``v`` (``-vv`` is ``-v``).
    Repeated options are allowed and the last one counts, as with the
    parser; ``--record`` and ``--no-record`` together are refused with the
    parser's words, at the second of the two.
    """
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

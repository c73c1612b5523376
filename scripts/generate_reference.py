"""Write (or, with --check, compare) tether's manual page and shell completions.

Generated from the argument parsers (:mod:`tether.cli.reference`) with
argparse-manpage and shtab, and shipped in the package under ``tether/data/``:
``man/tether.1``, ``completions/tether.bash`` and ``completions/_tether`` (zsh).
``--check`` exits 1 naming each file that is out of date, for CI (tox -e docs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "src" / "tether" / "data"


def generated() -> dict[str, str]:
    """Each shipped file's path under ``tether/data`` and what it must hold."""
    import shtab
    from argparse_manpage.manpage import Manpage

    from tether._version import __version__
    from tether.cli.reference import examples_section, exit_status_section, reference_parser

    manpage = Manpage(
        reference_parser(),
        _data={
            "project_name": "tether",
            "version": __version__,
            "manual_title": "tether manual",
            "manual_section": 1,
            "description": "run one command so that it cannot outlive the process that asked "
            "for it",
        },
    )
    manpage.date = __version__  # not the day it was made: the page must not change with it
    manpage.add_section("exit status", "=", exit_status_section())
    manpage.add_section("examples", "=", examples_section())
    return {
        "man/tether.1": str(manpage),
        "completions/tether.bash": shtab.complete(reference_parser(), shell="bash"),
        "completions/_tether": shtab.complete(reference_parser(), shell="zsh"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generated().items():
        path = DATA / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name in stale:
        print(f"out of date: src/tether/data/{name} (run python scripts/generate_reference.py)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())

"""A record's path as text reads exactly as :class:`pathlib.PurePosixPath` reads it.

:mod:`tether.shared.path_text` keeps ``pathlib`` off the path to the
command's launch; the record must still go where ``pathlib`` would have put
it, and messages must show the same path. Compared here on random paths,
made of the pieces that matter: slashes (one, two, three), ``.``, ``..``,
dots in names, empty names.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tether.shared.path_text import is_absolute, joined, name_of, normal, parent_of, with_name
from tether.shared.paths import events_name_for

PIECES = st.sampled_from(["/", "//", "///", ".", "..", "a", "b.json", ".json", "a.", "x y", "é"])
PATHS = st.lists(PIECES, max_size=8).map("".join)


@settings(max_examples=1000, deadline=None)
@given(PATHS)
@example("")
@example("//")
@example("//a/./b/")
@example("///a")
def test_a_path_reads_as_pathlib_reads_it(text: str) -> None:
    path = normal(text)
    expected = PurePosixPath(text)
    assert path == str(expected)
    assert is_absolute(path) == expected.is_absolute()
    assert name_of(path) == expected.name
    assert parent_of(path) == str(expected.parent)
    assert normal(path) == path
    if expected.name:
        assert with_name(path, "x.events.jsonl") == str(expected.with_name("x.events.jsonl"))
        assert events_name_for(expected.name) == expected.stem + ".events.jsonl"


@settings(max_examples=500, deadline=None)
@given(PATHS, PATHS)
@example("/", "a")
@example("//", "a")
@example("/cwd", ".")
def test_a_path_joins_as_pathlib_joins_it(base: str, text: str) -> None:
    assert joined(base, text) == str(PurePosixPath(base, text))

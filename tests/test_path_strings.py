"""Record paths as strings, read as :mod:`pathlib` reads them (``tether.shared.paths``).

A run's way to its launch has no ``pathlib`` (it costs milliseconds to
import), so the record path is handled there as a string; it must come out
exactly as ``pathlib`` would have made it: the path in the record, in
messages and in ``tether ls`` must not change with the way it was computed.
"""

from __future__ import annotations

import sys
from pathlib import PurePosixPath

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.shared.paths import (
    EVENTS_SUFFIX,
    events_name_for,
    normal_path,
    parent_and_name,
    with_name,
)

#: Paths made of what makes pathlib's reading differ from the text: slashes
#: (one, two, three), ``.``, ``..``, dots in names, spaces.
_PATHS = st.lists(
    st.sampled_from(["/", "//", "///", ".", "..", "a", "b.json", ".json", "x.", "a b", "..."]),
    max_size=8,
).map("".join) | st.text(alphabet="/.ab", max_size=10)


@settings(max_examples=1000)
@given(_PATHS)
def test_a_path_reads_as_pathlib_reads_it(text: str) -> None:
    path = PurePosixPath(text)
    assert normal_path(text) == str(path)
    assert parent_and_name(text) == (str(path.parent), path.name)


def _stem_313(path: PurePosixPath) -> str:
    """``path.stem`` as pathlib took it up to Python 3.13 (its ``PurePath.suffix``, copied).

    Python 3.14 takes a final dot for a suffix (``x.``'s stem is ``x``) and leading dots
    for none (``..a``'s stem is ``..a``); an event log's name must not change with the
    Python that writes or looks for it (a record of 3.13 is read on 3.14).
    """
    name = path.name
    i = name.rfind(".")
    suffix = name[i:] if 0 < i < len(name) - 1 else ""
    stem = name[: len(name) - len(suffix)] if suffix else name
    if sys.version_info < (3, 14):
        assert stem == path.stem  # the copy is pathlib's, where pathlib still reads so
    return stem


@settings(max_examples=1000)
@given(_PATHS)
def test_the_event_log_is_named_as_pathlib_names_it(text: str) -> None:
    path = PurePosixPath(text)
    if path.name:
        events = path.with_name(_stem_313(path) + EVENTS_SUFFIX)
        assert events_name_for(path.name) == events.name
        assert with_name(text, events.name) == str(events)


def test_a_name_that_ends_in_a_dot_keeps_it_on_every_python() -> None:
    assert events_name_for("x.") == "x." + EVENTS_SUFFIX
    assert events_name_for("a.b.") == "a.b." + EVENTS_SUFFIX
    assert events_name_for("a.b.json") == "a.b" + EVENTS_SUFFIX
    assert events_name_for("..a") == "." + EVENTS_SUFFIX

"""The cgroup module's two readers of text, written by hand, against the regular expressions
they replace (``re`` is kept off the path to a command's launch)."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from tether.linux.cgroup import _creator_of, unescape

_NAME = re.compile(r"tether-([0-9]+)-[0-9a-f]{8}")


def _unescape_by_re(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


_MOUNTINFO_TEXT = st.text(alphabet=st.sampled_from("\\0123478 a/"), max_size=24)


@given(st.one_of(_MOUNTINFO_TEXT, st.text(max_size=24)))
@example("/sys/fs/cgroup/with\\040space")
@example("\\\\040")
@example("\\04")
@example("end\\")
def test_mountinfo_escapes_are_undone_as_the_regular_expression_did(field: str) -> None:
    assert unescape(field) == _unescape_by_re(field)


_NAMES = st.one_of(
    st.builds(
        lambda pid, suffix: f"tether-{pid}-{suffix}",
        st.text(alphabet="0123456789", min_size=0, max_size=7),
        st.text(alphabet="0123456789abcdefABCDEF-g", min_size=6, max_size=10),
    ),
    st.text(alphabet=st.sampled_from("tether-0123456789abcdef٣"), max_size=24),
)


@given(_NAMES)
@example("tether-12-0123abcd")
@example("tether-٣-0123abcd")
@example("tether--0123abcd")
@example("tether-1-0123abcd-x")
def test_only_names_tether_gives_have_a_creator(name: str) -> None:
    match = _NAME.fullmatch(name)
    assert _creator_of(name) == (match.group(1) if match else None)

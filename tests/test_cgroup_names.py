"""The cgroup module's two readers of text, written by hand, against the regular expressions
they replace (``re`` is kept off the path to a command's launch)."""

from __future__ import annotations

import os
import re

from hypothesis import example, given
from hypothesis import strategies as st

from tether.linux.cgroup import _creator_of, unescape

_NAME = re.compile(r"tether-([0-9]+)-[0-9a-f]{8}")


def _unescape_by_re(field: str) -> str:
    """The reference: each escape is one byte (up to ``\\377``), the whole decoded once."""

    def byte(match: re.Match[bytes]) -> bytes:
        value = int(match.group(1), 8)
        return bytes([value]) if value < 256 else match.group(0)

    return os.fsdecode(re.sub(rb"\\([0-7]{3})", byte, os.fsencode(field)))


_MOUNTINFO_TEXT = st.text(alphabet=st.sampled_from("\\0123478 a/"), max_size=24)


@given(st.one_of(_MOUNTINFO_TEXT, st.text(max_size=24)))
@example("/sys/fs/cgroup/with\\040space")
@example("\\\\040")
@example("\\04")
@example("end\\")
@example("/run/b\\303\\274")
@example("\\777")
def test_mountinfo_escapes_are_undone_as_the_regular_expression_did(field: str) -> None:
    assert unescape(field) == _unescape_by_re(field)


def _percent_escaped(name: bytes, which: list[bool]) -> str:
    """``name`` as a D-Bus address writes it: some bytes as ``%xx``, the rest as they are."""
    return "".join(
        f"%{byte:02x}" if escaped or byte > 127 or byte == ord("%") else chr(byte)
        for byte, escaped in zip(name, which + [False] * len(name), strict=False)
    )


@given(st.binary(max_size=24), st.lists(st.booleans(), max_size=24))
@example("/run/user/1000/bü".encode(), [])
@example(b"\xff\xfe", [])
def test_a_d_bus_path_is_unescaped_byte_by_byte(name: bytes, which: list[bool]) -> None:
    """A path's non-ASCII letters are several bytes, each escaped: decoded together."""
    assert unescape(_percent_escaped(name, which), "%", 2, 16) == os.fsdecode(name)


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

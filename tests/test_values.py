"""FrozenValue: what a frozen dataclass gave the request and the retention policy, by hand."""

from __future__ import annotations

import pickle

import pytest

from tether.core.values import FrozenValue


class Pair(FrozenValue):
    __slots__ = ("left", "right")

    left: int
    right: str

    def __init__(self, *, left: int, right: str = "r") -> None:
        object.__setattr__(self, "left", left)
        object.__setattr__(self, "right", right)


def test_equal_and_hashed_by_value_and_never_equal_to_another_class() -> None:
    assert Pair(left=1) == Pair(left=1, right="r")
    assert hash(Pair(left=1)) == hash(Pair(left=1))
    assert Pair(left=1) != Pair(left=2)
    assert Pair(left=1) != (1, "r")
    assert len({Pair(left=1), Pair(left=1), Pair(left=2)}) == 2


def test_fields_cannot_be_assigned_or_deleted() -> None:
    pair = Pair(left=1)
    with pytest.raises(AttributeError, match="left"):
        pair.left = 2
    with pytest.raises(AttributeError, match="right"):
        del pair.right
    assert pair == Pair(left=1)


def test_repr_replace_and_pickle() -> None:
    pair = Pair(left=1, right="x")
    assert repr(pair) == "Pair(left=1, right='x')"
    assert pair.replace(right="y") == Pair(left=1, right="y")
    assert pair == Pair(left=1, right="x")
    assert pickle.loads(pickle.dumps(pair)) == pair

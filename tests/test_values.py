"""DeclaredValue, the one base class of tether's values: what a frozen dataclass gives."""

from __future__ import annotations

import pickle

import pytest

from conftest import EVERY_SPEC_FIELD
from tether.core.events import CommandExited, LaunchFailed
from tether.core.spec import RunSpec
from tether.core.values import DeclaredValue


class Pair(DeclaredValue):
    left: int
    right: str = "r"


def test_equal_and_hashed_by_value_and_never_equal_to_another_class() -> None:
    assert Pair(left=1) == Pair(left=1, right="r")
    assert hash(Pair(left=1)) == hash(Pair(left=1))
    assert Pair(left=1) != Pair(left=2)
    assert Pair(left=1) != (1, "r")
    assert len({Pair(left=1), Pair(left=1), Pair(left=2)}) == 2


def test_fields_cannot_be_assigned_or_deleted() -> None:
    pair = Pair(left=1)
    with pytest.raises(AttributeError, match="left"):
        pair.left = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="right"):
        del pair.right
    assert pair == Pair(left=1)


def test_repr_replace_and_pickle() -> None:
    pair = Pair(left=1, right="x")
    assert repr(pair) == "Pair(left=1, right='x')"
    assert pair.replace(right="y") == Pair(left=1, right="y")
    assert pair == Pair(left=1, right="x")
    assert pickle.loads(pickle.dumps(pair)) == pair


def test_fields_are_given_by_position_or_by_name_as_in_a_dataclass() -> None:
    assert Pair(1) == Pair(left=1) == Pair(1, "r") == Pair(1, right="r")
    assert LaunchFailed(1.0, 2, "gone") == LaunchFailed(now=1.0, errno=2, message="gone")
    assert LaunchFailed(1.0, 2, "gone").stage == "exec"
    assert repr(CommandExited(1.0, 0, False)) == (
        "CommandExited(now=1.0, returncode=0, others_alive=False)"
    )
    with pytest.raises(TypeError, match="twice"):
        Pair(1, left=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="2 fields by position"):
        Pair(1, "r", 3)  # type: ignore[call-arg]


class Options(DeclaredValue, kw_only=True):
    name: str
    count: int = 1
    tags: dict[str, str] = {}  # noqa: RUF012 - a default, copied for each value


def test_a_declared_value_takes_its_fields_and_defaults_from_its_annotations() -> None:
    options = Options(name="a")
    assert options.as_dict() == {"name": "a", "count": 1, "tags": {}}
    assert repr(options) == "Options(name='a', count=1, tags={})"
    assert options.replace(count=2) == Options(name="a", count=2)
    assert pickle.loads(pickle.dumps(options)) == options
    with pytest.raises(AttributeError, match="count"):
        options.count = 2  # type: ignore[misc]


def test_a_declared_value_refuses_a_missing_or_unknown_field_as_a_dataclass_does() -> None:
    with pytest.raises(TypeError, match="'name'"):
        Options()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'colour'"):
        Options(name="a", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="0 fields by position"):
        Options("a")  # type: ignore[call-arg]


def test_a_mutable_default_is_never_shared() -> None:
    first, second = Options(name="a"), Options(name="b")
    first.tags["x"] = "y"
    assert second.tags == {}
    assert Options(name="c").tags == {}


def test_every_declared_field_of_a_spec_survives_its_pipe_and_replace() -> None:
    assert list(EVERY_SPEC_FIELD) == list(RunSpec._fields)
    spec = RunSpec(**EVERY_SPEC_FIELD)  # type: ignore[arg-type]
    bare = RunSpec(argv=("true",), deadline_seconds=None, grace_seconds=1.0, asked_at=0.0)
    for name, value in EVERY_SPEC_FIELD.items():
        assert getattr(bare, name) != value, name  # each sample differs from the default
        assert getattr(bare.replace(**{name: value}), name) == value
    assert RunSpec.from_json(spec.to_json()) == spec
    assert RunSpec.from_json(bare.to_json()) == bare
    assert pickle.loads(pickle.dumps(spec)) == spec

"""The launch plan: every launch option read from the spec, the same whichever way it arrives."""

from __future__ import annotations

import json

from conftest import EVERY_SPEC_FIELD
from tether.core.spec import RunSpec
from tether.supervisor.launch import LaunchPlan, plan_from_spec

#: The plan's fields that are no field of the spec: the door's descriptors, and the
#: deadline as a time. Every other field of the plan must be read from the spec's.
_DOORS_OWN = {"stdin", "stdout", "stderr", "pass_fds", "close_after_launch", "lifeline"}
_DERIVED = {"deadline_at"}

_SPEC = RunSpec(**EVERY_SPEC_FIELD)  # type: ignore[arg-type]
_FDS = {**_SPEC.fds, "cwd": 8, "pass:5": 9}


def test_every_launch_option_of_the_spec_reaches_the_plan() -> None:
    plan = plan_from_spec(_SPEC.as_dict(), _FDS)
    from_spec = set(LaunchPlan._fields) - _DOORS_OWN - _DERIVED
    assert from_spec <= set(RunSpec._fields)
    for name in from_spec - {"cwd"}:  # the caller's directory travels as a descriptor
        assert getattr(plan, name) == getattr(_SPEC, name), name
        assert getattr(plan, name) != LaunchPlan._defaults.get(name), name
    assert plan.cwd == 8
    assert plan.deadline_at == _SPEC.deadline_at
    assert (plan.stdin, plan.stdout, plan.stderr, plan.lifeline) == (5, 6, 7, 3)
    assert plan.pass_fds == ((5, 9),)
    assert plan.close_after_launch == (5, 6, 7, 8)
    assert plan_from_spec(_SPEC.as_dict(), _SPEC.fds, (10,)).pass_fds == ((10, 10),)
    assert plan_from_spec(_SPEC.as_dict(), _SPEC.fds).cwd == "/work"


def test_the_plan_is_the_same_from_the_spec_in_memory_and_from_its_json() -> None:
    """``tether run`` hands over the spec it checked; every other supervisor reads its JSON."""
    assert plan_from_spec(json.loads(_SPEC.to_json()), _FDS) == plan_from_spec(
        _SPEC.as_dict(), _FDS
    )


def test_a_field_of_the_wrong_kind_is_left_at_its_default_for_the_check_to_refuse() -> None:
    fields = {
        **_SPEC.as_dict(),
        "cwd": 5,
        "env": ["PATH"],
        "umask": "022",
        "ignored_signals": 1,
        "join_group": "1",
        "limits": [1],
        "deadline_seconds": "soon",
    }
    plan = plan_from_spec(fields, _SPEC.fds)
    for name in ("cwd", "env", "umask", "ignored_signals", "join_group", "limits"):
        assert getattr(plan, name) == LaunchPlan._defaults[name], name
    assert plan.deadline_at is None
    assert plan_from_spec({"argv": ["true"]}, _SPEC.fds) == LaunchPlan(
        argv=("true",), stdin=5, stdout=6, stderr=7, close_after_launch=(5, 6, 7), lifeline=3
    )

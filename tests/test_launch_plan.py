"""The launch plan: every launch option read from the one checked spec; a spec that is not one
is refused, field by field, before anything is launched."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import BOUND, EVERY_SPEC_FIELD
from tether.caller.request import build_request
from tether.caller.start import send_spec, spawn_supervisor
from tether.core.spec import _KINDS, RunSpec, SpecError
from tether.supervisor.launch import LaunchPlan, plan_from_spec

#: The plan's fields that are no field of the spec: the door's descriptors, and the
#: deadline as a time. Every other field of the plan must be read from the spec's.
_DOORS_OWN = {"stdin", "stdout", "stderr", "pass_fds", "close_after_launch", "lifeline"}
_DERIVED = {"deadline_at"}

_SPEC = RunSpec(**EVERY_SPEC_FIELD)  # type: ignore[arg-type]
_FDS = {**_SPEC.fds, "cwd": 8, "pass:5": 9}


def test_every_launch_option_of_the_spec_reaches_the_plan() -> None:
    plan = plan_from_spec(_SPEC.replace(fds=_FDS))
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
    assert plan_from_spec(_SPEC, (10,)).pass_fds == ((10, 10),)
    assert plan_from_spec(_SPEC).cwd == "/work"


def test_the_spec_read_from_its_json_is_the_spec_written() -> None:
    """``tether run`` hands over the spec it checked; every other supervisor reads its JSON."""
    assert RunSpec.from_fields(json.loads(_SPEC.to_json())) == _SPEC


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("argv", "sleep 1"),
        ("cwd", 5),
        ("env", ["PATH"]),
        ("env", {"PATH": 1}),
        ("umask", "022"),
        ("umask", 0o10000),
        ("ignored_signals", 1),
        ("join_group", "1"),
        ("join_group", True),
        ("limits", [1]),
        ("deadline_seconds", "soon"),
        ("idle_seconds", float("nan")),
        ("asked_at", None),
        ("stop_signal", 15),
        ("record_argv", "yes"),
        ("label", 7),
        ("fds", {"status": "4"}),
        ("fds", None),
    ],
)
def test_a_field_of_the_wrong_kind_is_refused_naming_it(name: str, value: object) -> None:
    fields = {**json.loads(_SPEC.to_json()), name: value}
    with pytest.raises(SpecError, match=name.split("_", maxsplit=1)[0]):
        RunSpec.from_fields(fields)


@pytest.mark.parametrize("zygote", [False, True], ids=["spawned", "zygote"])
def test_a_spec_that_is_not_one_starts_nothing_and_the_caller_hears_why(
    tmp_path: Path, zygote: bool
) -> None:
    """Read leniently, an environment of the wrong kind left the command to start with the
    supervisor's own; read once, strictly, before the launch, nothing starts."""
    marker = tmp_path / "ran"
    spec = build_request(["sh", "-c", f'touch "{marker}"'], asked_at=time.monotonic())
    spawn = spawn_supervisor(spec.replace(env=["PATH"]), zygote=zygote)
    send_spec(spawn)
    finished = spawn.status.wait_finished()
    spawn.lifeline.release()
    spawn.intermediate.wait(timeout=BOUND)
    assert (finished.reason, finished.exit_status) == ("launch_failed", 125)
    assert finished.message == "nothing was started: env must be a mapping, not ['PATH']"
    assert not marker.exists()


def test_every_field_of_the_spec_has_its_kind_checked() -> None:
    assert {name for _kind, _words, names in _KINDS for name in names} == set(RunSpec._fields)

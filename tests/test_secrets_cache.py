"""What every run's redactor reads and compiles is read once per zygote, not once per run.

A supervisor forked from a zygote would otherwise read the record's schema,
scan its caller's environment and compile the redaction pattern again, about
three milliseconds of every run its caller waits for, all with the answer its
siblings had (:mod:`tether.shared.secrets`). These tests check that the answer
is reused only where it is the same: the same environment, the same secrets.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tether.shared.secrets
from tether.core.redaction import REDACTED, Redactor, secret_values_from
from tether.core.spec import RunSpec
from tether.shared.secrets import prepare, redactor_for


def _spec(argv: tuple[str, ...] = ("true",), label: str | None = None) -> RunSpec:
    return RunSpec(argv=argv, deadline_seconds=None, grace_seconds=1.0, asked_at=0.0, label=label)


def test_redactors_of_the_same_secrets_share_one_compiled_pattern() -> None:
    first = Redactor({"alpha-secret-1", "beta-secret-22"})
    second = Redactor(["beta-secret-22", "alpha-secret-1", ""])
    assert first._pattern is second._pattern
    other = Redactor({"alpha-secret-1"})
    assert other._pattern is not first._pattern
    assert other.scrub("x beta-secret-22 alpha-secret-1") == f"x beta-secret-22 {REDACTED}"


def test_equal_literals_of_the_same_length_scrub_whatever_their_order() -> None:
    redactor = Redactor({"aaaa1", "bbbb2", "aaaa12"})
    assert redactor.scrub("aaaa12 bbbb2 aaaa1") == " ".join([REDACTED] * 3)


def test_an_environment_read_once_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    environ = {"MY_API_TOKEN": "tok-123456", "HOME": "/home/someone"}
    prepare(environ)
    calls: list[object] = []

    def counting(env: object, argv: object) -> frozenset[str]:
        calls.append(env)
        return secret_values_from(env, argv)  # type: ignore[arg-type]

    monkeypatch.setattr(tether.shared.secrets, "secret_values_from", counting)
    redactor = redactor_for(_spec(), dict(environ))
    assert environ not in calls
    assert redactor.scrub("said tok-123456") == f"said {REDACTED}"


def test_a_changed_environment_is_read_again() -> None:
    prepare({"MY_API_TOKEN": "tok-123456"})
    redactor = redactor_for(_spec(), {"MY_API_TOKEN": "tok-654321"})
    assert redactor.scrub("tok-123456 tok-654321") == f"tok-123456 {REDACTED}"


def test_the_runs_own_secrets_are_added_to_the_environments() -> None:
    prepare({"DB_PASSWORD": "pw-abcdef"})
    redactor = redactor_for(
        _spec(("deploy", "--token=argv-secret"), label="API_KEY=label-secret"),
        {"DB_PASSWORD": "pw-abcdef"},
    )
    said = redactor.scrub("pw-abcdef argv-secret label-secret")
    assert said == " ".join([REDACTED] * 3)


_WARM_UP = """
import json, os, sys
from tether.shared.record_document import record_keys
import tether.core.redaction as redaction
import tether.shared.secrets as secrets
from tether.supervisor.zygote import _warm_up

os.environ["MY_API_TOKEN"] = "tok-warm-1234"
_warm_up()
compiled = redaction._pattern_for.cache_info().currsize
json.dump({
    "keys_cached": record_keys.cache_info().currsize,
    "compiled": compiled,
    "read": [sorted(found) for _environ, found in secrets._last_read],
}, sys.stdout)
"""


def test_the_zygotes_warm_up_reads_what_every_runs_redactor_needs() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WARM_UP], capture_output=True, text=True, timeout=60, check=True
    )
    said = json.loads(done.stdout)
    assert said == {"keys_cached": 1, "compiled": 1, "read": [["tok-warm-1234"]]}

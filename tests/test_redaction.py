"""Redaction: secret keys, literal env/argv values and credential shapes never leak."""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import tether.core.redaction
from tether.core.redaction import (
    MIN_SECRET_LENGTH,
    REDACTED,
    SECRET_KEY_WORDS,
    Redactor,
    is_secret_key,
    secret_values_from,
)

# Credential-shaped test values, assembled so no scanner mistakes this file for a leak.
SK = "sk-" + "ant-api03-" + "Q" * 30
SK_PROJ = "sk-" + "proj-" + "a1B2" * 8
GHP = "ghp" + "_" + "A1b2C3d4" * 5
GHS = "ghs" + "_" + "Z9y8X7w6" * 5
GITHUB_PAT = "github" + "_pat_" + "11AAAA_" + "b" * 30
AKIA = "AKIA" + "IOSFODNN7EXAMPLE"
SLACK = "xoxb" + "-1234567890-abcdefABCDEF"
JWT = (
    "eyJhbGciOiJIUzI1NiJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
BEARER_TOKEN = "mF_9.B5f-4.1JqM"


def scrubbed(redactor: Redactor, value: object) -> str:
    out = redactor.redact(value)
    assert isinstance(out, str)
    return out


# --- key names ------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "token",
        "API_TOKEN",
        "client_secret",
        "Password",
        "db_passwd",
        "api-key",
        "apiKey",
        "AWS_SECRET_ACCESS_KEY",
        "credentials",
        "Authorization",
        "set-cookie",
        "keyboard",  # documented false positive: substring matching errs on redacting
        "author",
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert is_secret_key(name)


@pytest.mark.parametrize("name", ["HOME", "PATH", "user", "pid", "count", "LANG"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret_key(name)


def test_every_secret_word_counts() -> None:
    for word in SECRET_KEY_WORDS:
        assert is_secret_key(f"x_{word.upper()}_y")


def test_own_keys_keep_their_text_whatever_the_secrets() -> None:
    """A document's own field names are never scrubbed, even when a secret spells one."""
    redactor = Redactor(["signal", "hunter2hunter2"], own_keys=frozenset({"signal", "pid"}))
    document = {"signal": "SIGTERM", "pid": 1, "nested": [{"signal": "x hunter2hunter2"}]}
    assert redactor.redact(document) == {
        "signal": "SIGTERM",
        "pid": 1,
        "nested": [{"signal": f"x {REDACTED}"}],
    }
    # Without being declared its own, a key that is a literal secret is scrubbed.
    assert Redactor(["signal"]).redact({"signal": 1}) == {REDACTED: 1}


def test_the_event_log_keeps_the_keys_of_its_lines() -> None:
    """As a structlog processor, a line's own keys are kept; the key rule still applies."""
    redactor = Redactor(["state_before"])
    line = {"event": "step", "state_before": "watching", "token": "x", "more": {"state_before": 1}}
    assert redactor(None, "msg", line) == {
        "event": "step",
        "state_before": "watching",
        "token": REDACTED,
        "more": {REDACTED: 1},
    }


def test_values_under_secret_keys_are_redacted_at_any_depth() -> None:
    redactor = Redactor()
    value = {
        "pid": 42,
        "token": "abc",
        "headers": [{"Authorization": "Basic dXNlcjpwYXNz", "Accept": "*/*"}],
        "nested": {"deeper": ({"api_key": {"whole": "subtree"}, "keep": True},)},
        "auth_required": True,
    }
    assert redactor.redact(value) == {
        "pid": 42,
        "token": REDACTED,
        "headers": [{"Authorization": REDACTED, "Accept": "*/*"}],
        "nested": {"deeper": ({"api_key": REDACTED, "keep": True},)},
        "auth_required": REDACTED,
    }


def test_tether_fields_keep_their_values_except_for_literal_secrets() -> None:
    redactor = Redactor(["s3cr3t-value"])
    event = {
        "event": "signal_sent",
        "state_before": "watching",
        "state_after": "terminating",
        "pid": 4242,
        "pgid": 4242,
        "signal": "SIGTERM",
        "count": 3,
        "message": "exec failed: s3cr3t-value",
    }
    assert redactor.redact(event) == {**event, "message": f"exec failed: {REDACTED}"}


# --- literal values from the environment and argv -------------------------


def test_env_values_of_secret_looking_names_are_collected() -> None:
    environ = {
        "OPENAI_API_KEY": "plain-looking-value",
        "GITHUB_TOKEN": "another value with spaces",
        "HOME": "/home/someone",
        "DEBUG_AUTH": "1",  # too short to scrub
        "PATH": "/usr/bin:/bin",
    }
    assert secret_values_from(environ, []) == {"plain-looking-value", "another value with spaces"}


def test_short_env_values_are_not_scrubbed() -> None:
    environ = {"USE_AUTH": "yes", "TOKEN_TTL": "30"}
    redactor = Redactor(secret_values_from(environ, []))
    assert scrubbed(redactor, "yes, it ran for 30 seconds") == "yes, it ran for 30 seconds"
    assert all(len(v) >= MIN_SECRET_LENGTH for v in secret_values_from(environ, ["--key", "ab"]))


def test_credential_shapes_in_any_env_value_are_collected() -> None:
    environ = {"DATABASE_URL": "postgres://app:pg-pass-123@db/app", "MISC": f"x {GHP} y"}
    assert {"pg-pass-123", GHP} <= secret_values_from(environ, [])


@pytest.mark.parametrize(
    ("argv", "secret"),
    [
        (["tool", "--token=flag-value-1"], "flag-value-1"),
        (["tool", "--api-key=flag-value-2"], "flag-value-2"),
        (["tool", "--password", "next-word-3"], "next-word-3"),
        (["tool", "-client-secret", "next-word-4"], "next-word-4"),
        (["env", "API_TOKEN=assigned-5", "tool"], "assigned-5"),
        (["curl", "-H", "X-Api-Key: header-6"], "header-6"),
        (["curl", "-H", "Cookie: session=cookie-7"], "session=cookie-7"),
        (["sh", "-c", "export SECRET=shell-8; tool --auth shell-9 && done"], "shell-8"),
        (["sh", "-c", "export SECRET=shell-8; tool --auth shell-9 && done"], "shell-9"),
        (["git", "clone", "https://bob:url-pass-10@example.com/r.git"], "url-pass-10"),
        (["curl", "-H", f"Authorization: Bearer {BEARER_TOKEN}"], BEARER_TOKEN),
        (["tool", SK], SK),
        (["tool", f"--header={GHP}"], GHP),
    ],
)
def test_argv_credentials_are_collected_and_scrubbed(argv: list[str], secret: str) -> None:
    secrets = secret_values_from({}, argv)
    assert secret in secrets
    out = scrubbed(Redactor(secrets), f"error: {secret} was rejected (argv={argv!r})")
    assert secret not in out
    assert out.startswith("error: ")


def test_flag_followed_by_another_flag_is_not_a_value() -> None:
    assert secret_values_from({}, ["tool", "--no-auth", "--verbose"]) == frozenset()


def test_ordinary_argv_is_left_alone() -> None:
    argv = ["python", "-m", "pytest", "-x", "tests/test_machine.py", "--timeout=60"]
    assert secret_values_from({}, argv) == frozenset()


def test_literal_secrets_are_scrubbed_inside_longer_strings() -> None:
    environ = {"SERVICE_PASSWORD": "correct horse battery"}
    argv = ["deploy", "--token", "tkn-4f9a7c"]
    redactor = Redactor(secret_values_from(environ, argv))
    text = "login as admin/correct horse battery failed; retry with tkn-4f9a7ctkn-4f9a7c!"
    out = scrubbed(redactor, text)
    assert "correct horse battery" not in out
    assert "tkn-4f9a7c" not in out
    assert out == f"login as admin/{REDACTED} failed; retry with {REDACTED}{REDACTED}!"


def test_longest_literal_wins() -> None:
    redactor = Redactor(["abcd", "abcdefgh"])
    assert scrubbed(redactor, "xabcdefghx") == f"x{REDACTED}x"


def test_secret_reappearing_across_the_marker_seam_is_still_removed() -> None:
    secret = "acted]Xy"  # "[redacted]" + "Xy" would spell it again after one pass
    redactor = Redactor([secret])
    out = scrubbed(redactor, f"{secret}Xy and {secret}")
    assert secret not in out


# --- credential shapes anywhere -------------------------------------------


@pytest.mark.parametrize(
    "secret", [SK, SK_PROJ, GHP, GHS, GITHUB_PAT, AKIA, SLACK, JWT], ids=lambda s: s[:6]
)
def test_shapes_are_scrubbed_without_being_declared(secret: str) -> None:
    text = f"upstream said: invalid credential {secret}, giving up"
    out = scrubbed(Redactor(), text)
    assert secret not in out
    assert out == f"upstream said: invalid credential {REDACTED}, giving up"


def test_bearer_keeps_the_scheme_word() -> None:
    out = scrubbed(Redactor(), f"header Authorization: Bearer {BEARER_TOKEN} sent")
    assert out == f"header Authorization: Bearer {REDACTED} sent"


def test_url_password_is_scrubbed_and_user_kept() -> None:
    out = scrubbed(Redactor(), "cloning https://bob:pa55:w0rd@example.com/repo.git")
    assert out == f"cloning https://bob:{REDACTED}@example.com/repo.git"


@pytest.mark.parametrize(
    "text",
    [
        "ran task-runner-abcdefghijklmnopqrstu on disk-abcdefghijklmnopqrstuvw",
        "http://localhost:8080/path?q=a@b",
        "bearer of bad news",
        "AKIA is not a key by itself",
    ],
)
def test_lookalikes_are_left_alone(text: str) -> None:
    assert scrubbed(Redactor(), text) == text


# --- value types ------------------------------------------------------------


class Phase(enum.Enum):
    WATCHING = "watching"


@dataclass(frozen=True)
class Failure:
    message: str
    token: str


def test_value_types() -> None:
    redactor = Redactor(["hunter2hunter2"])
    assert redactor.redact(None) is None
    assert redactor.redact(True) is True
    assert redactor.redact(7) == 7
    assert redactor.redact(1.5) == 1.5
    assert redactor.redact(Phase.WATCHING) == "watching"
    assert redactor.redact(b"pw=hunter2hunter2") == f"pw={REDACTED}"
    assert redactor.redact({"hunter2hunter2"}) == [REDACTED]
    assert redactor.redact(("a", "hunter2hunter2")) == ("a", REDACTED)
    assert redactor.redact(Failure("bad hunter2hunter2", "t")) == {
        "message": f"bad {REDACTED}",
        "token": REDACTED,
    }
    assert redactor.redact(OSError(13, "denied hunter2hunter2")) == (
        f"PermissionError: [Errno 13] denied {REDACTED}"
    )
    assert redactor.redact(Path("/run/hunter2hunter2/x")) == f"/run/{REDACTED}/x"
    assert redactor.redact({"hunter2hunter2 count": 1, 3: "x"}) == {f"{REDACTED} count": 1, 3: "x"}


def test_deep_nesting_is_cut_off_not_crashed() -> None:
    value: object = "leaf"
    for _ in range(500):
        value = [value]
    assert REDACTED in repr(Redactor().redact(value))


def test_processor_interface_returns_a_new_redacted_dict() -> None:
    redactor = Redactor(["hunter2hunter2"])
    event_dict = {"event": "exec_failed", "message": "hunter2hunter2", "password": "x"}
    out = redactor(None, "msg", event_dict)
    assert out == {"event": "exec_failed", "message": REDACTED, "password": REDACTED}
    assert event_dict["message"] == "hunter2hunter2"


def test_module_is_pure() -> None:
    tree = ast.parse(Path(tether.core.redaction.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module.split(".")[0])
    forbidden = {"os", "signal", "subprocess", "selectors", "time", "structlog", "threading"}
    assert not imported & forbidden


# --- property ---------------------------------------------------------------

PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)


@given(
    secret=st.text(PRINTABLE, min_size=8, max_size=40),
    before=st.text(PRINTABLE, max_size=60),
    after=st.text(PRINTABLE, max_size=60),
    copies=st.integers(min_value=1, max_value=3),
)
def test_an_embedded_secret_never_survives(
    secret: str, before: str, after: str, copies: int
) -> None:
    # A "secret" that is part of the marker itself cannot be hidden by any marker.
    assume(secret not in REDACTED)
    redactor = Redactor([secret])
    text = before + (secret + after) * copies
    out = redactor.redact({"message": text, "argv": [before, text], "pid": 1})
    assert isinstance(out, dict)
    assert secret not in out["message"]
    assert all(secret not in word for word in out["argv"])


@given(
    secret=st.text(PRINTABLE, min_size=8, max_size=40),
    before=st.text(PRINTABLE, max_size=60),
    after=st.text(PRINTABLE, max_size=60),
)
def test_an_argv_secret_after_a_flag_never_survives(secret: str, before: str, after: str) -> None:
    assume(secret not in REDACTED and not secret.startswith("--"))
    secrets = secret_values_from({}, ["tool", "--token", secret])
    out = scrubbed(Redactor(secrets), before + secret + after)
    assert secret not in out

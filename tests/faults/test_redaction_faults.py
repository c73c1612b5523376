"""Secrets where the redactor did not look: in a label, and in variables named like a password.

The label is read for secrets as argv is, and ``*_PASSPHRASE``, ``*_PWD``, ``*_PASS``
variables are secret; ``PWD`` (the working directory) and words ending in ``pass`` are not.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    read_json,
    tether_argv,
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment of every door started here: its home and state inside ``tmp_path``."""
    return {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


#: Secrets a run is started with, each where people keep them: the values must
#: appear in no file tether writes, nor in what ``tether show`` and ``tether ls`` print.
_SECRET_VARIABLES = {
    "BORG_PASSPHRASE": "borg-passphrase-3141",
    "MYSQL_PWD": "mysql-pwd-2718",
    "SMTP_PASS": "smtp-pass-1618",
}


def test_secrets_in_a_label_are_redacted_like_secrets_in_argv(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A label is shown like argv (``--name "deploy API_TOKEN=..."``, a passphrase pasted into
    it), but only argv's words were read for secrets, and ``*_PASSPHRASE``, ``*_PWD`` and
    ``*_PASS`` variables were not secret-looking: the record, the event log, ``tether show``
    and ``tether ls`` all carried them."""
    environment = {**env, **_SECRET_VARIABLES}
    label = "deploy API_TOKEN=label-token-5772 --password label-password-1414 " + " ".join(
        _SECRET_VARIABLES.values()
    )
    secrets = ["label-token-5772", "label-password-1414", *_SECRET_VARIABLES.values()]
    record = tmp_path / "runs" / "r.json"
    for argv in (
        tether_argv("run", "--record", str(record), "--name", label, "--", "true"),
        tether_argv(
            "run",
            "--record",
            str(tmp_path / "runs" / "f.json"),
            "--name",
            label,
            "--",
            "/nonexistent",
        ),
    ):
        result = subprocess.run(
            argv, env=environment, capture_output=True, text=True, timeout=BOUND
        )
        assert "Traceback" not in result.stderr
    shown = [
        subprocess.run(
            tether_argv(*review), env=environment, capture_output=True, text=True, timeout=BOUND
        ).stdout
        for review in (
            ("show", str(record)),
            ("show", "--json", str(record)),
            ("ls", str(tmp_path / "runs")),
            ("ls", "--json", str(tmp_path / "runs")),
        )
    ]
    written = [path.read_text() for path in files_under(tmp_path / "runs")]
    assert len(written) == 4
    assert "deploy API_TOKEN=" in read_json(record)["variant"]  # type: ignore[operator]
    for text in (*written, *shown):
        for secret in secrets:
            assert secret not in text


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "COMPASS", "BYPASS", "PASSENGER_ENV"])
def test_the_working_directory_and_words_ending_in_pass_are_not_secrets(name: str) -> None:
    """``PWD`` holds the working directory: taken for a secret, every path under it would be
    scrubbed out of every message."""
    from tether.core.redaction import is_secret_key

    assert not is_secret_key(name)

"""No secret reaches the record, the event log or ``tether show``, whatever way a run ends.

Secrets are planted where callers really keep them: in the environment
(``MY_API_TOKEN``, ``DB_PASSWORD``, ...) and in the command's argv
(``--token=...``, ``--password VALUE``, ``sk-...``, ``ghp_...``, ``AKIA...``,
``Authorization: Bearer ...``, a URL with a password). They are random, made of
letters and digits only, so their only possible form in a JSON file is the
literal one, and a byte-for-byte search of every file is conclusive.

A secret the run never writes down cannot leak, so the test also routes every
secret into something tether *does* write down: the run's label (which goes
into the record and the launch line of the log) and, for a launch failure, the
command's own name (which goes into the error message). Each test asserts that
the redaction marker is where the secret would have been, so it fails if
redaction stops working and not merely if a secret stops being written.

Each ending — completion, deadline, caller lost, launch failure — is run
through both doors that take a record path: ``tether run`` and the seed door
``python -m tether.supervisor``.
"""

from __future__ import annotations

import os
import secrets
import signal
import string
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import (
    BOUND,
    Processes,
    ReadyPipe,
    parent_of,
    read_json,
    tether_argv,
    validate_record,
    wait_gone,
)

REDACTED = "[redacted]"

#: The command: announce itself on $READY_FIFO if set, then exit, or stay until stopped.
#: Its argv (the planted secrets) is ignored.
COMMAND_SCRIPT = """
import os, signal, sys
fifo = os.environ.get("READY_FIFO")
if fifo:
    with open(fifo, "w") as out:
        out.write(f"ready {os.getpid()}\\n")
if os.environ.get("STAY") != "1":
    sys.exit(0)
while True:
    signal.pause()
"""


def _random(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


ALNUM = string.ascii_letters + string.digits


@dataclass(frozen=True)
class Secrets:
    """One set of random secrets, and where they are planted."""

    api_token: str
    db_password: str
    credentials: str
    flag_token: str
    flag_password: str
    openai: str
    github: str
    aws: str
    bearer: str
    url_password: str

    @classmethod
    def fresh(cls) -> Secrets:
        """New random secrets, in the shapes real ones have."""
        return cls(
            api_token=_random(ALNUM, 24),
            db_password=_random(ALNUM, 20),
            credentials=_random(ALNUM, 28),
            flag_token=_random(ALNUM, 22),
            flag_password=_random(ALNUM, 18),
            openai="sk-proj-" + _random(ALNUM, 32),
            github="ghp_" + _random(ALNUM, 36),
            aws="AKIA" + _random(string.ascii_uppercase + string.digits, 16),
            bearer=_random(ALNUM, 30),
            url_password=_random(ALNUM, 16),
        )

    def all(self) -> list[str]:
        return [str(value) for value in vars(self).values()]

    def environ(self) -> dict[str, str]:
        """The caller's environment with the secrets planted in it."""
        environ = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        environ.update(
            MY_API_TOKEN=self.api_token,
            DB_PASSWORD=self.db_password,
            SERVICE_CREDENTIALS=self.credentials,
        )
        return environ

    def argv_words(self) -> list[str]:
        """Credential-looking words for the command's argv."""
        return [
            f"--token={self.flag_token}",
            "--password",
            self.flag_password,
            self.openai,
            self.github,
            self.aws,
            f"Authorization: Bearer {self.bearer}",
            f"https://admin:{self.url_password}@db.example.com/prod",
        ]

    def label(self) -> str:
        """A label that repeats every secret, as a careless caller might."""
        return " ".join(
            [
                "nightly",
                self.api_token,
                self.db_password,
                self.credentials,
                self.flag_token,
                self.flag_password,
                self.openai,
                self.github,
                self.aws,
                f"Bearer {self.bearer}",
                f"https://admin:{self.url_password}@db.example.com/prod",
            ]
        )


@pytest.fixture
def planted() -> Secrets:
    return Secrets.fresh()


def command(planted: Secrets) -> list[str]:
    return [sys.executable, "-c", COMMAND_SCRIPT, *planted.argv_words()]


def missing_command(planted: Secrets) -> list[str]:
    """A command that cannot be found, whose very name holds secrets."""
    return [f"/nonexistent/{planted.api_token}/{planted.openai}", *planted.argv_words()]


# -- checking ----------------------------------------------------------------------------


def assert_no_secret_anywhere(planted: Secrets, directory: Path, record: Path) -> None:
    """No secret in any file of ``directory``, nor in ``tether show`` or ``tether ls`` output."""
    files = [path for path in directory.rglob("*") if path.is_file()]
    assert record in files
    assert record.with_name(record.stem + ".events.jsonl") in files
    outputs = {str(path): path.read_bytes() for path in files}
    for args in (["show", str(record)], ["show", "--json", str(record)], ["ls", str(directory)]):
        result = subprocess.run(tether_argv(*args), capture_output=True, timeout=BOUND, check=False)
        assert result.returncode == 0, result.stderr
        outputs[" ".join(args)] = result.stdout + result.stderr
    for secret in planted.all():
        for where, data in outputs.items():
            assert secret.encode() not in data, f"{secret!r} leaked into {where}"


def assert_redacted_where_it_was(record: Path, *, in_log: int = 10) -> None:
    """The label reached the record (and the log's launch line), scrubbed: redaction ran.

    ``in_log`` is how many markers the log must hold at least: a launch that
    failed logs the command's name instead of the label.
    """
    data = read_json(record)
    validate_record(data)
    label = data["variant"]
    assert isinstance(label, str)
    assert label.startswith("nightly ")
    assert label.count(REDACTED) >= 10, label
    log = record.with_name(record.stem + ".events.jsonl").read_text()
    assert log.count(REDACTED) >= in_log, log


# -- the doors ------------------------------------------------------------------------------


@pytest.fixture
def records(tmp_path: Path) -> Path:
    return tmp_path / "records"


def tether_run(
    planted: Secrets, record: Path, *options: str, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        tether_argv(
            "run", "--name", planted.label(), "--record", str(record), *options, "--", *argv
        ),
        env=env,
        capture_output=True,
        timeout=BOUND,
        check=False,
    )


class SeedWorker:
    """A worker using the seed door: it holds the lifeline's write end."""

    def __init__(self, processes: Processes, planted: Secrets, record: Path) -> None:
        self.processes = processes
        self.planted = planted
        self.record = record
        self.write_end = -1

    def start(
        self, argv: list[str], env: dict[str, str], deadline: str = "60"
    ) -> subprocess.Popen[bytes]:
        read_end, self.write_end = os.pipe()
        popen = self.processes.start(
            [
                sys.executable, "-m", "tether.supervisor",
                "--variant", self.planted.label(),
                "--parent-fd", str(read_end),
                "--record", str(self.record),
                "--deadline-seconds", deadline,
                "--grace-seconds", "5",
                "--", *argv,
            ],
            pass_fds=(read_end,),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(read_end)
        return popen

    def close(self) -> None:
        if self.write_end >= 0:
            os.close(self.write_end)
            self.write_end = -1


@pytest.fixture
def seed(processes: Processes, planted: Secrets, records: Path) -> Iterator[SeedWorker]:
    worker = SeedWorker(processes, planted, records / "seed.json")
    yield worker
    worker.close()


# -- tether run ------------------------------------------------------------------------------


def test_tether_run_completion(planted: Secrets, records: Path) -> None:
    record = records / "done.json"
    result = tether_run(planted, record, argv=command(planted), env=planted.environ())
    assert result.returncode == 0, result.stderr
    assert_redacted_where_it_was(record)
    assert_no_secret_anywhere(planted, records, record)


def test_tether_run_deadline(planted: Secrets, records: Path) -> None:
    record = records / "late.json"
    env = {**planted.environ(), "STAY": "1"}
    result = tether_run(planted, record, "--deadline", "0.3", argv=command(planted), env=env)
    assert result.returncode == 124, result.stderr
    assert read_json(record)["reason"] == "deadline_exceeded"
    assert_redacted_where_it_was(record)
    assert_no_secret_anywhere(planted, records, record)


def start_staying_run(
    planted: Secrets, record: Path, processes: Processes, ready: ReadyPipe
) -> tuple[subprocess.Popen[bytes], int, int]:
    """``tether run`` of a command that stays; return the caller, the command and its supervisor."""
    env = {**planted.environ(), "STAY": "1", "READY_FIFO": str(ready.path)}
    caller = processes.start(
        tether_argv(
            "run", "--name", planted.label(), "--record", str(record), "--", *command(planted)
        ),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pid = ready.ready_pids()[0]
    supervisor = parent_of(pid)
    assert supervisor is not None
    processes.track(pid, supervisor)
    return caller, pid, supervisor


def test_tether_run_caller_lost(
    planted: Secrets, records: Path, processes: Processes, ready: ReadyPipe
) -> None:
    record = records / "orphan.json"
    caller, pid, supervisor = start_staying_run(planted, record, processes, ready)
    caller.send_signal(signal.SIGKILL)
    assert wait_gone(pid)
    assert wait_gone(supervisor)
    assert read_json(record)["reason"] == "parent_lost"
    assert_redacted_where_it_was(record)
    assert_no_secret_anywhere(planted, records, record)


def test_tether_run_launch_failure(planted: Secrets, records: Path) -> None:
    record = records / "missing.json"
    result = tether_run(planted, record, argv=missing_command(planted), env=planted.environ())
    assert result.returncode == 127
    data = read_json(record)
    assert data["reason"] == "launch_failed"
    assert_redacted_where_it_was(record, in_log=2)
    log = record.with_name("missing.events.jsonl").read_text()
    assert "/nonexistent/" + REDACTED in log  # the command's name was written, scrubbed
    assert_no_secret_anywhere(planted, records, record)


# -- the seed door ----------------------------------------------------------------------------


def test_seed_door_completion(planted: Secrets, seed: SeedWorker) -> None:
    supervisor = seed.start(command(planted), planted.environ())
    assert supervisor.wait(timeout=BOUND) == 0
    assert_redacted_where_it_was(seed.record)
    assert_no_secret_anywhere(planted, seed.record.parent, seed.record)


def test_seed_door_deadline(planted: Secrets, seed: SeedWorker) -> None:
    supervisor = seed.start(command(planted), {**planted.environ(), "STAY": "1"}, deadline="0.3")
    assert supervisor.wait(timeout=BOUND) == 124
    assert read_json(seed.record)["reason"] == "deadline_exceeded"
    assert_redacted_where_it_was(seed.record)
    assert_no_secret_anywhere(planted, seed.record.parent, seed.record)


def test_seed_door_caller_lost(planted: Secrets, seed: SeedWorker, ready: ReadyPipe) -> None:
    env = {**planted.environ(), "STAY": "1", "READY_FIFO": str(ready.path)}
    supervisor = seed.start(command(planted), env)
    seed.processes.track(*ready.ready_pids())
    seed.close()
    assert supervisor.wait(timeout=BOUND) == 130
    assert read_json(seed.record)["reason"] == "parent_lost"
    assert_redacted_where_it_was(seed.record)
    assert_no_secret_anywhere(planted, seed.record.parent, seed.record)


def test_seed_door_launch_failure(planted: Secrets, seed: SeedWorker) -> None:
    supervisor = seed.start(missing_command(planted), planted.environ())
    assert supervisor.wait(timeout=BOUND) == 127
    assert read_json(seed.record)["reason"] == "launch_failed"
    assert_redacted_where_it_was(seed.record, in_log=2)
    assert_no_secret_anywhere(planted, seed.record.parent, seed.record)


# -- records the caller writes itself, and secrets given with env= ----------------------------


def test_a_lost_supervisors_record_is_redacted_too(
    planted: Secrets, records: Path, processes: Processes, ready: ReadyPipe
) -> None:
    """The caller writes the ``supervisor_lost`` record itself: it redacts like the supervisor."""
    record = records / "lost.json"
    caller, _, supervisor = start_staying_run(planted, record, processes, ready)
    os.kill(supervisor, signal.SIGKILL)
    assert caller.wait(timeout=BOUND) == 125
    data = read_json(record)
    validate_record(data)
    assert data["reason"] == "supervisor_lost"
    label = data["variant"]
    assert isinstance(label, str)
    assert label.count(REDACTED) >= 10, label
    for secret in planted.all():
        assert secret not in record.read_text()


def test_secrets_given_with_env_and_the_callers_own_are_both_scrubbed(
    planted: Secrets, records: Path
) -> None:
    """``env=`` replaces the command's environment, not the caller's: both may hold secrets."""
    record = records / "api.json"
    script = (
        "import sys, tether\n"
        "key, label, record = (sys.stdin.readline().strip() for _ in range(3))\n"
        "outcome = tether.run(\n"
        "    sys.argv[1:], env={'OTHER_API_KEY': key}, label=label, record=record\n"
        ")\n"
        "print(outcome.reason.value)\n"
    )
    other_key = _random(ALNUM, 26)
    label = f"{planted.label()} {other_key}"
    result = subprocess.run(
        [sys.executable, "-c", script, sys.executable, "-c", "pass", *planted.argv_words()],
        input=f"{other_key}\n{label}\n{record}\n",
        env=planted.environ(),
        capture_output=True,
        text=True,
        timeout=BOUND,
        check=False,
    )
    assert result.stdout.strip() == "completed", result.stderr
    assert_redacted_where_it_was(record)
    text = record.read_text() + record.with_name("api.events.jsonl").read_text()
    for secret in [*planted.all(), other_key]:
        assert secret not in text

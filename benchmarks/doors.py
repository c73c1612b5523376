"""How the benchmark starts a command under each contender, and who plays the caller.

Three contenders, started the way a user would start them:

* ``tether run``: the console script next to this interpreter. It is the
  caller: it holds the lifeline, and the supervisor it starts is detached.
* the seed door, ``python -m tether.supervisor --parent-fd N``: the
  benchmark makes the pipe. Where the caller must be able to *die*, the write
  end is handed to a small holder process (``python -S``, pausing) and the
  benchmark keeps no copy, so SIGKILLing the holder is a real caller's death;
  elsewhere the benchmark holds the write end itself.
* GNU ``timeout``: ``/usr/bin/timeout``. Where a caller must die, the caller
  is a ``/bin/sh`` that runs ``timeout`` as its child and waits for it.

The record of every run goes to the benchmark's work directory, which is on
the same file system as ``$HOME`` unless ``--workdir`` says otherwise, so the
fsync a record costs is the one a user pays.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from benchmarks.procs import Channel, Registry

__all__ = ["HERE", "HOLDER", "Doors", "Started"]

HERE = Path(__file__).resolve().parent

#: A shell that runs its arguments as its child and waits (it does not ``exec`` them).
_IN_SHELL = '"$@"; exit $?'

#: A caller that does nothing but hold the descriptors it was given until it dies.
HOLDER = "import signal\nwhile True:\n    signal.pause()\n"


@dataclass
class Started:
    """One supervised command as started: the process the benchmark ran, and its lifeline."""

    door: str
    token: str
    popen: subprocess.Popen[bytes]
    record: Path | None
    lifeline: int | None = None
    holder: subprocess.Popen[bytes] | None = None

    def close_lifeline(self) -> None:
        """Let go of the benchmark's write end: the seed supervisor sees its caller gone."""
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None


class Doors:
    """Starts commands under ``tether run``, the seed door and ``timeout``."""

    def __init__(self, registry: Registry, channel: Channel, workdir: Path) -> None:
        self.registry = registry
        self.channel = channel
        self.workdir = workdir
        self.python = sys.executable
        script = Path(sys.executable).with_name("tether")
        self.tether = [str(script)] if script.exists() else [sys.executable, "-m", "tether"]
        self.timeout = shutil.which("timeout") or "/usr/bin/timeout"
        self.true = shutil.which("true") or "/bin/true"
        self._serial = 0

    def token(self) -> str:
        """A fresh token, so every trial's lines are told apart."""
        self._serial += 1
        return f"t{self._serial}"

    def command(self, mode: str, token: str) -> list[str]:
        """The stamping command (:mod:`benchmarks.command`) in ``mode``."""
        return [self.python, "-S", str(HERE / "command.py"), mode, str(self.channel.path), token]

    def sleeper(self, token: str) -> list[str]:
        """The scale test's cheap command: a shell that announces itself, then ``sleep``."""
        return ["/bin/sh", str(HERE / "announce.sh"), token, str(self.channel.path)]

    def record_path(self, token: str) -> Path:
        return self.workdir / "records" / f"{token}.json"

    def tether_for(self, env: dict[str, str] | None) -> list[str]:
        """The ``tether`` program of the copy ``env`` runs (``None``: the installed script).

        Another copy may name its console entry point differently, so it is read from that
        copy's ``pyproject.toml`` and called the way the installed script would call it,
        ``import re`` first included (pip's script does, before tether reads its clock): a
        copy started without it would gain a few milliseconds in every comparison.
        """
        if env is None:
            return self.tether
        source = Path(env["PYTHONPATH"].split(os.pathsep)[0])
        project = tomllib.loads((source.parent / "pyproject.toml").read_text())
        module, function = project["project"]["scripts"]["tether"].split(":")
        call = f"import re, sys; from {module} import {function}; sys.exit({function}())"
        return [self.python, "-c", call]

    # -- the contenders ---------------------------------------------------------

    def tether_run(
        self,
        command: list[str],
        token: str,
        *,
        deadline: float = 0.0,
        grace: float = 5.0,
        record: bool = True,
        process_group: int | None = None,
        env: dict[str, str] | None = None,
        shell: bool = False,
    ) -> Started:
        """``tether run --deadline D --grace G --record R -- COMMAND``; with ``shell``, run by
        a ``/bin/sh`` that waits for it (the process the benchmark started is that shell)."""
        path = self.record_path(token) if record else None
        where = ["--record", str(path)] if path else ["--no-record"]
        argv = [
            *self.tether_for(env),
            "run",
            "--deadline",
            f"{deadline:.6f}",
            "--grace",
            f"{grace:.6f}",
            *where,
            "--",
            *command,
        ]
        if shell:
            argv = ["/bin/sh", "-c", _IN_SHELL, "sh", *argv]
        extra: dict[str, object] = {"env": env}
        if process_group is not None:
            extra["process_group"] = process_group
        return Started("tether run", token, self.registry.start(argv, **extra), path)

    def seed(
        self,
        command: list[str],
        token: str,
        *,
        deadline: float = 0.0,
        grace: float = 5.0,
        read_end: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Started:
        """``python -m tether.supervisor --parent-fd N ...``; the benchmark keeps the write end.

        With ``read_end`` (of a pipe whose write end a holder process keeps),
        the benchmark keeps nothing and only passes that read end on.
        """
        kept: int | None = None
        if read_end is None:
            read_end, kept = os.pipe()
        path = self.record_path(token)
        argv = [
            self.python,
            "-m",
            "tether.supervisor",
            "--variant",
            "bench",
            "--parent-fd",
            str(read_end),
            "--record",
            str(path),
            "--deadline-seconds",
            f"{deadline:.6f}",
            "--grace-seconds",
            f"{grace:.6f}",
            "--",
            *command,
        ]
        try:
            popen = self.registry.start(argv, pass_fds=(read_end,), env=env)
        finally:
            os.close(read_end)
        return Started("seed door", token, popen, path, lifeline=kept)

    def gnu_timeout(
        self, command: list[str], token: str, *, deadline: float = 3600.0, grace: float | None = 5.0
    ) -> Started:
        """``timeout [-k G] D COMMAND``."""
        kill = [] if grace is None else ["-k", f"{grace:.6f}"]
        argv = [self.timeout, *kill, f"{deadline:.6f}", *command]
        return Started("timeout", token, self.registry.start(argv), None)

    def eof_reader(self, token: str, read_end: int) -> None:
        """Measure 1's floor: a bare reader of ``read_end`` that stamps its end of file."""
        argv = [*self.command("eof", token), str(read_end)]
        try:
            self.registry.start(argv, pass_fds=(read_end,))
        finally:
            os.close(read_end)

    # -- callers that can die -----------------------------------------------------

    def holder(
        self, write_ends: tuple[int, ...], process_group: int | None = None, shell: bool = False
    ) -> int:
        """Give ``write_ends`` to a new holder process (the caller); close our copies.

        With ``shell``, the holder is run by a ``/bin/sh`` that waits for it; its pid is returned.
        """
        extra = {} if process_group is None else {"process_group": process_group}
        argv = [self.python, "-S", "-c", HOLDER]
        if shell:
            argv = ["/bin/sh", "-c", _IN_SHELL, "sh", *argv]
        popen = self.registry.start(argv, pass_fds=write_ends, **extra)
        for fd in write_ends:
            os.close(fd)
        return popen.pid

    def timeout_under_shell(
        self, commands: list[list[str]], process_group: int | None = None
    ) -> int:
        """A ``/bin/sh`` caller that runs ``timeout 3600 COMMAND`` for each command, and waits."""
        script = 'for c in "$@"; do eval "$c" & done; wait'
        words = [" ".join(_quote(w) for w in [self.timeout, "3600", *c]) for c in commands]
        extra = {} if process_group is None else {"process_group": process_group}
        return self.registry.start(["/bin/sh", "-c", script, "sh", *words], **extra).pid


def _quote(word: str) -> str:
    import shlex

    return shlex.quote(word)

"""What the supervisor works out before the fork, so that the command's child does less.

Every page the child writes between its fork and its exec is a copy of its parent's, so the
arguments and environment are encoded for ``execve``, the signals to change listed, and the
``spawned`` message encoded but for the pid, in the parent (issue 36). Each must be exactly
what the child made before: the same bytes for ``execve``, the same dispositions in the
command, the same status line.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.shared.protocol import Spawned, StatusWriter, encode
from tether.supervisor.launch import _NO_PID, _announcer
from tether.supervisor.spawn import _encoded, _signal_changes

#: Any text ``execve`` could be given: no NUL (refused before), lone surrogates included.
_TEXT = st.text(st.characters(blacklist_characters="\0"), max_size=8)


@given(
    argv=st.lists(_TEXT, min_size=1, max_size=4),
    env=st.dictionaries(_TEXT.filter(lambda name: name and "=" not in name), _TEXT, max_size=4),
)
def test_the_encoded_arguments_are_what_execve_would_encode(
    argv: list[str], env: dict[str, str]
) -> None:
    arguments, paths, environment = _encoded(argv, (argv[0],), env)
    try:
        expected = [os.fsencode(word) for word in argv]
    except UnicodeError:  # the child's execve says so, as it did
        assert (arguments, paths) == (argv, (argv[0],))
    else:
        assert (arguments, paths) == (expected, (expected[0],))
    try:
        expected_env = {os.fsencode(name): os.fsencode(value) for name, value in env.items()}
    except UnicodeError:
        assert environment is env
    else:
        assert environment == expected_env


@pytest.fixture
def usr1_ignored() -> Iterator[None]:
    before = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, before)


@pytest.mark.usefixtures("usr1_ignored")
def test_the_child_changes_only_the_signals_not_already_as_asked() -> None:
    usr1, usr2, term = int(signal.SIGUSR1), int(signal.SIGUSR2), int(signal.SIGTERM)
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL  # pytest's, as this test assumes
    changes = dict(_signal_changes({usr1: 1, usr2: 0, term: 1, signal.SIGKILL: 1, 0: 1}))
    # SIGPIPE and SIGXFSZ, which Python ignores, back to default as Popen does; SIGUSR1
    # and SIGUSR2 already as asked; SIGTERM to be ignored; SIGKILL and 0 tried (and refused
    # in the child, as before).
    assert changes == {
        int(signal.SIGPIPE): 0,
        int(signal.SIGXFSZ): 0,
        term: 1,
        int(signal.SIGKILL): 1,
        0: 1,
    }


@pytest.mark.parametrize(
    "cgroups",
    [
        [],
        ["/sys/fs/cgroup/unified/tether-12-0badcafe", "/sys/fs/cgroup/memory/tether-12-0badcafe"],
        ["/sys/fs/cgroup/a%d b%%s/tether-12-0badcafe"],  # the template's own syntax
        [f"/sys/fs/cgroup/{_NO_PID}/tether-12-0badcafe"],  # the placeholder's digits
    ],
)
def test_the_spawned_line_is_the_encoded_message(cgroups: list[str]) -> None:
    read_end, write_end = os.pipe()
    status = StatusWriter(write_end)
    try:
        told = _announcer(status)(cgroups)
        told(4242)
        line = os.read(read_end, 65536)
    finally:
        status.close()
        os.close(read_end)
    message = Spawned(supervisor_pid=os.getpid(), pid=4242, pgid=4242, cgroups=cgroups)
    assert line == encode(message)


def test_no_caller_no_spawned_line() -> None:
    status = StatusWriter(None)
    _announcer(status)(["/sys/fs/cgroup/unified/tether-12-0badcafe"])(4242)
    assert status.closed

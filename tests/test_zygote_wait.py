"""How long a launch waits for its zygote: a late one that runs is waited for, a stopped one not.

The zygote here is a stand-in with the real one's socket protocol (a
``SOCK_SEQPACKET`` request, then ``"<child> <zygote>"``), so that its pace
is the test's to choose: one answers 1.5 s late while it runs (sleeping, as a
zygote waiting for a CPU on a busy machine is still not stopped), one is
stopped before the request and never answers. The caller's side is the
real one (:func:`tether.caller.zygote.fork_supervisor`), with the stand-in
as this process's zygote.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from tether.caller import zygote as caller_zygote
from tether.caller.fingerprint import fingerprint
from tether.caller.lifeline import identity as descriptor_identity

_STAND_IN = (
    "import socket, sys, time\n"
    "server = socket.socket(fileno=int(sys.argv[1]))\n"
    "server.recv(4096)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "server.send(b'4242 1')\n"
)


def _stand_in(delay: float) -> tuple[caller_zygote._Zygote, subprocess.Popen[bytes]]:
    identity = fingerprint()
    assert identity is not None
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proof, unused = os.pipe()  # the pipe only the zygote holds, which each request shows
    child = subprocess.Popen(
        [sys.executable, "-c", _STAND_IN, str(theirs.fileno()), str(delay)],
        pass_fds=(theirs.fileno(), proof),
    )
    theirs.close()
    os.close(unused)
    os.close(proof)
    zygote = caller_zygote._Zygote.__new__(caller_zygote._Zygote)
    zygote.socket = ours
    zygote.identity = identity
    zygote.pid = None
    zygote._child = child.pid
    zygote._proof = proof
    zygote._made = descriptor_identity(ours.fileno())
    zygote._pidfd = os.pidfd_open(child.pid)
    zygote._pidfd_made = descriptor_identity(zygote._pidfd)
    zygote._error = None
    return zygote, child


def _launch(zygote: caller_zygote._Zygote) -> int | None:
    """One request to ``zygote`` as this process's zygote; what the caller's side answers."""
    caller_zygote._zygote = zygote
    try:
        return caller_zygote.fork_supervisor(b"{}", [], [], "")
    finally:
        caller_zygote._zygote = None
        zygote.close()


def test_a_zygote_that_runs_late_is_waited_for() -> None:
    """Past ANSWER_LIMIT, but running: its answer is taken, it is not abandoned."""
    zygote, child = _stand_in(caller_zygote.ANSWER_LIMIT + 0.5)
    try:
        assert _launch(zygote) == 4242
        assert child.wait(timeout=10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_stopped_zygote_is_abandoned() -> None:
    """Stopped: after ANSWER_LIMIT, well before START_LIMIT, it is SIGKILLed and lost."""
    zygote, child = _stand_in(0)
    os.kill(child.pid, signal.SIGSTOP)
    try:
        assert _launch(zygote) == caller_zygote.UNKNOWN  # lost with the request
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

"""``tether timeout``: a drop-in for GNU ``timeout``, with tether's guarantees.

Scripts are full of ``timeout 5m make test``. Replacing ``timeout`` with
``tether timeout`` must change nothing a script can observe: the same
options (``-k``, ``-s``, ``-v``, ``--preserve-status``, ``--foreground``),
durations, messages (``timeout: ...``) and exit statuses (124 timed out, 125
failed, 126 cannot invoke, 127 not found, 137 after a KILL, else the
command's own). What it adds is what ``timeout`` cannot do: the command is
stopped when ``tether timeout`` itself is killed (SIGKILL included),
descendants that left the process group are stopped too, and a record is left
(``--record PATH``, ``--no-record``; by default where ``tether run`` keeps
them).

Where tether cannot be identical it says so in the docs: a signal sent to
``tether timeout`` stops the command with the stop signal (``-s``, SIGTERM by
default) rather than forwarding the very signal received, and
``--foreground`` is accepted but the command never gets the terminal's job
control, because it always runs in a process group of its own.

Caller side: standard library only, like ``tether run``.
"""

from __future__ import annotations

import contextlib
import getopt
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Final, NoReturn

from tether._version import __version__
from tether.cli.messages import say, write_out
from tether.core.reasons import DEADLINE_EXCEEDED, TETHER_FAILED, status_of

if TYPE_CHECKING:
    from tether.core.spec import RunSpec
    from tether.shared.protocol import Finished

__all__ = ["main"]

_KILLED: Final = 128 + signal.SIGKILL

_HELP: Final = """\
Usage: tether timeout [OPTION] DURATION COMMAND [ARG]...
Start COMMAND, and kill it if still running after DURATION.
Like GNU timeout, and COMMAND with its whole process tree is also stopped when
tether timeout itself is killed; a record of the run is kept.

  -p, --preserve-status
                 exit with the same status as COMMAND, even when the
                   command times out
      --foreground
                 accepted for compatibility; COMMAND always runs in a
                   process group of its own (see docs/timeout.md)
  -k, --kill-after=DURATION
                 also send a KILL signal if COMMAND is still running
                   this long after the initial signal was sent
  -s, --signal=SIGNAL
                 specify the signal to be sent on timeout;
                   SIGNAL may be a name like 'HUP' or a number
  -v, --verbose  diagnose to stderr any signal sent upon timeout
      --record=PATH  write tether's record here (default: a new file in
                   $XDG_STATE_HOME/tether/runs/)
      --no-record    write no record
      --help     display this help and exit
      --version  output version information and exit

DURATION is a floating point number with an optional suffix:
's' for seconds (the default), 'm' for minutes, 'h' for hours or 'd' for days.
A duration of 0 disables the associated timeout.

Upon timeout, send the TERM signal to COMMAND, if no other SIGNAL specified.

Exit status:
  124  if COMMAND times out, and --preserve-status is not specified
  125  if the timeout command itself fails
  126  if COMMAND is found but cannot be invoked
  127  if COMMAND cannot be found
  137  if COMMAND (or timeout itself) is sent the KILL (9) signal (128+9)
  -    the exit status of COMMAND otherwise
"""


def _usage_error(message: str | None) -> NoReturn:
    if message is not None:
        _say(message)
    say("Try 'tether timeout --help' for more information.")
    raise SystemExit(TETHER_FAILED)


def _print_and_exit(text: str) -> NoReturn:
    """Print ``--help`` or ``--version`` and exit 0, or say why it could not be printed (125)."""
    error = write_out(text)
    if error is None:
        raise SystemExit(0)
    if isinstance(error, BrokenPipeError):
        raise SystemExit(128 + signal.SIGPIPE)
    _say(f"write error: {error.strerror or error}")
    raise SystemExit(TETHER_FAILED)


def _duration(text: str) -> float:
    from tether.core.durations import DurationError, parse_duration

    try:
        return parse_duration(text, flag="DURATION")
    except DurationError:
        _usage_error(f"invalid time interval '{text}'")


def _signal_name(text: str) -> str:
    """``TERM``, ``SIGTERM``, ``term`` or ``15`` -> ``"SIGTERM"``; refuse anything else."""
    try:
        if text.isascii() and text.isdigit():  # not "٣": int() would read three
            number = signal.Signals(int(text))
        else:
            upper = text.upper()
            number = signal.Signals[upper if upper.startswith("SIG") else f"SIG{upper}"]
    except (KeyError, ValueError):
        _usage_error(f"'{text}': invalid signal")
    return number.name


class _Options:
    def __init__(self) -> None:
        self.kill_after = 0.0
        self.stop_signal = "SIGTERM"
        self.verbose = False
        self.preserve_status = False
        self.record: str | None = None
        self.no_record = False


def _parse(argv: list[str]) -> tuple[_Options, float, list[str]]:
    options = _Options()
    try:
        pairs, rest = getopt.getopt(
            argv,
            "+k:s:vp",
            [
                "kill-after=",
                "signal=",
                "verbose",
                "preserve-status",
                "foreground",
                "help",
                "version",
                "record=",
                "no-record",
            ],
        )
    except getopt.GetoptError as error:
        _usage_error(_getopt_message(error))
    for flag, value in pairs:
        if flag == "--help":
            _print_and_exit(_HELP)
        if flag == "--version":
            _print_and_exit(f"tether timeout {__version__}\n")
        if flag in ("-k", "--kill-after"):
            options.kill_after = _duration(value)
        elif flag in ("-s", "--signal"):
            options.stop_signal = _signal_name(value)
        elif flag in ("-v", "--verbose"):
            options.verbose = True
        elif flag in ("-p", "--preserve-status"):
            options.preserve_status = True
        elif flag == "--record":
            options.record = value
        elif flag == "--no-record":
            options.no_record = True
    if len(rest) < 2:
        _usage_error(None)  # GNU says only where to find help here
    duration = _duration(rest[0])
    return options, duration, rest[1:]


def _getopt_message(error: getopt.GetoptError) -> str:
    option = error.opt
    if "requires argument" in error.msg:
        return f"option requires an argument -- '{option}'"
    if len(option) == 1:
        return f"invalid option -- '{option}'"
    return f"unrecognized option '--{option}'"


def exit_status(finished: Finished, *, preserve_status: bool, stop_signal: str) -> int:
    """Map how the run ended to the status GNU ``timeout`` would have exited with.

    A status above 128 that GNU produces by dying of a signal itself (the
    command's own signal, or the KILL it sent to its group) is returned as
    128+N here; :func:`main` then dies of that signal the same way.
    """
    returncode = finished.returncode
    if finished.reason == "deadline_exceeded":
        if finished.escalated_to_sigkill or stop_signal == "SIGKILL":
            return _KILLED
        if preserve_status and returncode is not None:
            return status_of(returncode)
        return DEADLINE_EXCEEDED
    if finished.reason in ("completed", "cancelled", "parent_lost") and returncode is not None:
        return status_of(returncode)
    return finished.exit_status


def _die_like_gnu(finished: Finished, status: int) -> None:
    """End this process the way GNU ``timeout`` ends itself, where it does.

    GNU ``timeout`` re-raises the signal that killed the command (when it did
    not time out), and it is itself killed by the KILL it sends to its process
    group. A parent that looks at how its child died (``WIFSIGNALED``), not
    only at ``$?``, must see the same. Core dumps are switched off first, as
    GNU does, so that re-raising SIGSEGV does not dump tether's own core.
    """
    returncode = finished.returncode
    timed_out = finished.reason == "deadline_exceeded"
    # A number, not a signal.Signals: a real-time signal (SIGRTMIN+6) has no member.
    number: int
    if timed_out and status == _KILLED:
        number = signal.SIGKILL
    elif not timed_out and returncode is not None and returncode < 0:
        number = -returncode
    else:
        return
    import resource

    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for stream in (sys.stdout, sys.stderr):  # either may be closed (None), or full
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    if number not in (signal.SIGKILL, signal.SIGSTOP):
        # A signal this process may not handle (one the C library keeps) is left as it is:
        # the status returned says the same.
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    with contextlib.suppress(OSError, ValueError):
        os.kill(os.getpid(), number)


def _say(message: str) -> None:
    say(f"timeout: {message}")


def _request(argv: list[str], asked_at: float) -> tuple[_Options, RunSpec]:
    """Read the command line into its options and the request, or refuse it.

    A refusal is GNU's message (or tether's, for what GNU does not check:
    the record path) and status 125, and leaves nothing behind.
    """
    options, duration, command = _parse(argv)

    from tether.caller.request import RequestError, build_request
    from tether.shared.record_file import RecordError

    try:
        spec = build_request(
            command,
            asked_at=asked_at,
            deadline=duration,
            # -k 0 (or no -k) means never escalate, as in GNU timeout.
            grace=options.kill_after or None,
            record=False if options.no_record else options.record,
            stop_signal=options.stop_signal,
        )
    except (RequestError, RecordError) as error:
        _say(str(error))
        raise SystemExit(TETHER_FAILED) from None
    return options, spec


def main(argv: list[str], *, asked_at: float | None = None) -> int:
    """``tether timeout ARGS``; return the exit status (the deadline counts from ``asked_at``)."""
    if asked_at is None:
        asked_at = time.monotonic()
    options, spec = _request(argv, asked_at)

    from tether.caller.interrupts import start_interruptible
    from tether.caller.start import LaunchError
    from tether.shared.protocol import Signalled

    try:
        spawn = start_interruptible(spec, second_interrupt_kills=False)
    except LaunchError as error:
        _say(str(error))
        return TETHER_FAILED

    name = spec.argv[0].rsplit("/", 1)[-1]
    status = spawn.status
    while status.finished is None:
        for message in status.wait():
            if options.verbose and isinstance(message, Signalled) and message.signal != "SIGCONT":
                sent = message.signal.removeprefix("SIG")
                _say(f"sending signal {sent} to command '{name}'")
    finished = status.wait_finished()
    spawn.lifeline.release()
    if finished.reason == "launch_failed" or finished.message:
        # The command's own troubles, or tether's (a lost supervisor, a record not written).
        _say(finished.message or "cannot run the command")
    status_code = exit_status(
        finished, preserve_status=options.preserve_status, stop_signal=options.stop_signal
    )
    _die_like_gnu(finished, status_code)
    return status_code

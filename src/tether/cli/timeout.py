"""``tether timeout``: a drop-in for GNU ``timeout``, with tether's guarantees (docs/timeout.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

from tether._version import __version__
from tether.cli.messages import print_out, say, stderr_failed, usage_error
from tether.cli.timeout_options import OptionError, read_command_line
from tether.core.reasons import DEADLINE_EXCEEDED, TETHER_FAILED, Reason, status_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, NoReturn

    from tether.core.spec import RunSpec
    from tether.shared.protocol import Finished

__all__ = ["main"]

_KILLED: Final = 128 + signal.SIGKILL

_HELP: Final = """\
Usage: {program} [OPTION] DURATION COMMAND [ARG]...
  or:  {program} [OPTION]
Start COMMAND, and kill it if still running after DURATION.
Like GNU timeout; COMMAND and its whole process tree are also stopped when
this program itself is killed.

Mandatory arguments to long options are mandatory for short options too.
  -f, --foreground
                 when not running timeout directly from a shell prompt,
                   allow COMMAND to read from the TTY and get TTY signals
  -k, --kill-after=DURATION
                 also send a KILL signal if COMMAND is still running
                   this long after the initial signal was sent
  -p, --preserve-status
                 exit with the same status as COMMAND,
                   even when the command times out
  -s, --signal=SIGNAL
                 specify the signal to be sent on timeout;
                   SIGNAL may be a name like 'HUP' or a number;
                   see 'kill -l' for a list of signals
  -v, --verbose  diagnose to stderr any signal sent upon timeout
      --record=PATH  write tether's JSON record of the run to PATH
      --no-record    write no record (the default)
      --label=LABEL  a label for the record, shown by tether ls and show
      --help        display this help and exit
      --version     output version information and exit

DURATION is a floating point number with an optional suffix:
's' for seconds (the default), 'm' for minutes, 'h' for hours or 'd' for days.
A duration of 0 disables the associated timeout.

Upon timeout, send the TERM signal to COMMAND, if no other SIGNAL specified.
The TERM signal kills any process that does not block or catch that signal.
It may be necessary to use the KILL signal, since this signal can't be caught.

Exit status:
  124  if COMMAND times out, and --preserve-status is not specified
  125  if the timeout command itself fails
  126  if COMMAND is found but cannot be invoked
  127  if COMMAND cannot be found
  137  if COMMAND (or timeout itself) is sent the KILL (9) signal (128+9)
  -    the exit status of COMMAND otherwise

Where tether differs from GNU timeout: docs/timeout.md.
"""


class _Program:
    """The name this program was invoked by, which every message starts with, as GNU's do."""

    name = "tether timeout"


def _usage_error(message: str | None, *, as_given: bool = False) -> NoReturn:
    """Refuse the command line (125); ``as_given``: as getopt, with bytes as they were given."""
    usage_error(_Program.name, message, as_given=as_given)


def _print_and_exit(text: str) -> NoReturn:
    """Print ``--help`` or ``--version`` and exit 0, or say why not (125)."""
    raise SystemExit(print_out(text, program=_Program.name))


def _duration(text: str) -> float:
    """Seconds for a DURATION as GNU reads it: 0 none, ``inf`` practically forever."""
    from tether.core.gnu_durations import parse_gnu_duration

    seconds = parse_gnu_duration(text)
    if seconds is None:
        _usage_error(f"invalid time interval {_quoted(text)}")
    return seconds


def _signal_name(text: str) -> str:
    """``TERM``, ``SIGTERM``, ``term``, ``15``, ``0``, ``RTMIN+1`` -> its name; refuse the rest."""
    from tether.shared.signals import signal_name

    name = signal_name(text)
    if name is None:
        _say(f"{_quoted(text)}: invalid signal")
        _usage_error(None)
    return name


class _Options:  # GNU's defaults; each option read sets its own
    kill_after = 0.0
    stop_signal = "SIGTERM"
    verbose = False
    preserve_status = False
    foreground = False
    record: str | None = None
    label: str | None = None


def _parse(argv: list[str]) -> tuple[_Options, float, list[str]]:
    options = _Options()

    def take(name: str, value: str) -> None:
        # Each option acts as it is read, as in GNU's loop.
        if name == "help":
            _print_and_exit(_HELP.format(program=_Program.name))
        if name == "version":
            _print_and_exit(f"timeout (tether) {__version__}\n")
        _take(options, name, value)

    try:
        rest = read_command_line(argv, take)
    except OptionError as error:
        _usage_error(str(error), as_given=True)  # getopt's words: the bytes as given
    if len(rest) < 2:
        _usage_error(None)  # GNU says only where to find help here
    duration = _duration(rest[0])
    return options, duration, rest[1:]


def _take(options: _Options, name: str, value: str) -> None:
    """Set what one option (other than ``--help`` and ``--version``) asks for."""
    if name == "kill-after":
        options.kill_after = _duration(value)
    elif name == "signal":
        options.stop_signal = _signal_name(value)
    elif name == "no-record":
        options.record = None
    elif name in ("record", "label"):
        setattr(options, name, value)
    else:  # a switch: verbose, preserve-status, foreground
        setattr(options, name.replace("-", "_"), True)


def exit_status(finished: Finished, *, preserve_status: bool, stop_signal: str) -> int:
    """GNU ``timeout``'s exit status (128+N where it dies of signal N: so does :func:`main`)."""
    returncode = finished.returncode
    if finished.reason == Reason.DEADLINE_EXCEEDED:
        if finished.escalated_to_sigkill or stop_signal == "SIGKILL":
            return _KILLED
        if preserve_status and returncode is not None:
            return status_of(returncode)
        return DEADLINE_EXCEEDED
    stopped_or_done = (Reason.COMPLETED, Reason.CANCELLED, Reason.PARENT_LOST)
    if finished.reason in stopped_or_done and returncode is not None:
        return status_of(returncode)
    return finished.exit_status


def _die_like_gnu(finished: Finished, status: int) -> None:
    """Die of the command's signal, or of the KILL sent, where GNU ``timeout`` does (a parent
    may look at ``WIFSIGNALED``); without a core dump, as GNU."""
    returncode = finished.returncode
    timed_out = finished.reason == Reason.DEADLINE_EXCEEDED
    # A number: a real-time signal has no signal.Signals member.
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
        # One the C library keeps is left as it is: the status returned says the same.
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    with contextlib.suppress(OSError, ValueError):
        os.kill(os.getpid(), number)


def _say(message: str) -> None:
    say(f"{_Program.name}: {message}")


def _quoted(word: str) -> str:
    """``word`` quoted as GNU's ``quote`` does."""
    from tether.core.gnu_quoting import gnu_quote, utf8_locale

    return gnu_quote(word, utf8=utf8_locale(os.environ))


def _request(
    options: _Options,
    duration: float,
    command: list[str],
    *,
    asked_at: float,
    ignored_signals: list[int],
) -> RunSpec:
    """The request for what the command line asked, or a refusal (125); a record path that
    cannot be used is said, and the command runs without one, as GNU's would."""
    from tether.caller.request import RequestError, build_request
    from tether.caller.terminal import terminal_group
    from tether.core.gnu_durations import FOREVER
    from tether.shared.record_file import RecordError

    def request(record: str | None) -> RunSpec:
        return build_request(
            command,
            asked_at=asked_at,
            deadline=None if duration == FOREVER else duration,
            # -k 0 (or none) never escalates, as in GNU timeout; so does forever.
            grace=None if options.kill_after in (0, FOREVER) else options.kill_after,
            record=False if record is None else record,
            label=options.label,
            flags={"label": "--label"},
            stop_signal=options.stop_signal,
            ignored_signals=ignored_signals,
            join_group=terminal_group(asked=options.foreground),
        )

    try:
        try:
            return request(options.record)
        except RecordError as error:
            _say(f"{error}; running without a record")
            return request(None)
    except RequestError as error:
        _say(str(error))
        raise SystemExit(TETHER_FAILED) from None


def request_for(
    argv: list[str], asked_at: float, *, ignored_signals: list[int] | None = None
) -> tuple[_Options, RunSpec]:
    """The options and the request for ``timeout ARGV``, or a refusal (:class:`SystemExit`)."""
    options, duration, command = _parse(argv)
    spec = _request(
        options, duration, command, asked_at=asked_at, ignored_signals=ignored_signals or []
    )
    return options, spec


def main(argv: list[str], *, asked_at: float | None = None, program: str = "tether timeout") -> int:
    """``timeout ARGS`` invoked as ``program``; the exit status (deadline from ``asked_at``)."""
    if asked_at is None:
        asked_at = time.monotonic()
    from tether.caller.relay import TimeoutRelay, launcher_mask

    inherited = launcher_mask()
    _Program.name = "timeout" if inherited is not None else program
    options, duration, command = _parse(argv)

    from tether.shared.signals import short_name, signal_number

    stop = signal_number(options.stop_signal)
    # Before anything is started, so that no signal in between is lost.
    relay = TimeoutRelay(stop or None, inherited_mask=inherited)
    spec = _request(options, duration, command, asked_at=asked_at, ignored_signals=relay.ignored)

    # The forked supervisor needs json before the launch, this caller after: loaded once here.
    import json  # noqa: F401

    from tether.caller.fork import start
    from tether.caller.launch_errors import LaunchError

    try:
        spawn = start(spec)
    except LaunchError as error:
        _say(str(error))
        return TETHER_FAILED
    relay.requests.attach(spawn.lifeline)

    from tether.shared.protocol import Signalled

    name = spec.argv[0]
    status = spawn.status
    quiet = {"SIGCONT", "SIGSTOP"} - {options.stop_signal}
    while status.finished is None:
        for message in status.wait():
            if options.verbose and isinstance(message, Signalled) and message.signal not in quiet:
                _say(f"sending signal {short_name(message.signal)} to command {_quoted(name)}")
    finished = status.wait_finished()
    spawn.lifeline.release()
    if finished.reason == Reason.LAUNCH_FAILED or finished.message:
        _say(finished.message or "cannot run the command")
    status_code = exit_status(
        finished, preserve_status=options.preserve_status, stop_signal=options.stop_signal
    )
    _die_like_gnu(finished, status_code)
    if stderr_failed():
        # GNU's close_stdout: 125, or 124 past the deadline (coreutils 9.10, docs/timeout.md).
        return DEADLINE_EXCEEDED if finished.reason == Reason.DEADLINE_EXCEEDED else TETHER_FAILED
    return status_code

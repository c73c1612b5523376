"""Output and input like ``subprocess``: pipes read and written while the command runs.

Real commands through ``tether.run``/``tether.launch`` from this process:
more than a pipe holds in every direction at once, the head and tail kept
under ``max_output_bytes``, text mode, paths as streams, the streams of a
launched command in plain and in asyncio code. Unit tests of the bounded
buffer use hypothesis.
"""

from __future__ import annotations

import asyncio
import io
import os
import pickle
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tether
from conftest import ReadyPipe, alive, fixture
from tether.caller.capture import HeadTail, decode_output
from tether.caller.output_stream import _Pieces

PIPE_BUFFER = 65536


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


# -- run(): capture and input -------------------------------------------------------


def test_large_input_and_both_streams_past_a_pipe_buffer_do_not_deadlock() -> None:
    data = os.urandom(16 * PIPE_BUFFER)
    outcome = tether.run(fixture("echo_streams"), input=data, capture_output=True, record=False)
    assert outcome.ok
    assert outcome.stdout == data
    assert outcome.stderr == data
    assert (outcome.stdout_dropped, outcome.stderr_dropped) == (0, 0)


def test_a_command_that_never_reads_its_input_is_not_an_error() -> None:
    outcome = tether.run(
        python("print('done')"), input=b"x" * (8 * PIPE_BUFFER), capture_output=True
    )
    assert outcome.ok
    assert outcome.stdout == b"done\n"


def test_input_the_command_never_reads_does_not_kill_a_caller_with_sigpipe_at_default() -> None:
    program = (
        "import signal, sys, tether\n"
        "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
        f"outcome = tether.run({python('pass')!r}, input=b'x' * 1_000_000, record=False)\n"
        "print(outcome.exit_status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout) == (0, "0\n"), result.stderr


def test_text_mode_decodes_translates_newlines_and_encodes_input() -> None:
    outcome = tether.run(
        python(
            "import sys; d = sys.stdin.read(); sys.stdout.write(d + '\\r\\nend'); "
            "sys.stderr.buffer.write(b'bad \\xff')"
        ),
        input="héllo",
        capture_output=True,
        encoding="utf-8",
        errors="replace",
    )
    assert outcome.stdout == "héllo\nend"
    assert outcome.stderr == "bad \ufffd"


def test_text_true_uses_the_locale_encoding_like_subprocess() -> None:
    outcome = tether.run(["echo", "hi"], capture_output=True, text=True)
    assert outcome.stdout == "hi\n"
    assert outcome.stderr == ""


_INVALID_UTF8 = [
    sys.executable,
    "-c",
    "import sys; sys.stdout.buffer.write(b'ok \\xff\\n'); sys.stderr.write('fine\\n'); sys.exit(3)",
]


def test_output_that_does_not_decode_keeps_the_outcome_on_the_error(tmp_path: Path) -> None:
    record = tmp_path / "r.json"
    with pytest.raises(UnicodeDecodeError) as caught:
        tether.run(_INVALID_UTF8, capture_output=True, text=True, encoding="utf-8", record=record)
    error = caught.value
    assert isinstance(error, tether.OutputDecodeError)
    assert (error.encoding, error.start, error.stream) == ("utf-8", 3, "stdout")
    outcome = error.outcome
    assert (outcome.reason, outcome.returncode, outcome.exit_status) == ("completed", 3, 3)
    assert outcome.record_path == record
    assert outcome.read_record()["eval_exit_code"] == 3
    assert (outcome.stdout, outcome.stderr) == (b"ok \xff\n", b"fine\n")
    assert (error.stdout, error.stderr) == (b"ok \xff\n", b"fine\n")
    assert "(the command exited with status 3; record " in str(error)
    copy = pickle.loads(pickle.dumps(error))  # a worker's error reaches its driver whole
    assert (copy.outcome, copy.stdout, copy.stream) == (outcome, b"ok \xff\n", "stdout")


def test_errors_and_encoding_decode_as_subprocess_does() -> None:
    expected = subprocess.run(_INVALID_UTF8, capture_output=True, text=True, errors="replace")
    outcome = tether.run(_INVALID_UTF8, capture_output=True, text=True, errors="replace")
    assert (
        (outcome.stdout, outcome.stderr)
        == (expected.stdout, expected.stderr)
        == ("ok \ufffd\n", "fine\n")
    )
    latin = tether.run(_INVALID_UTF8, capture_output=True, encoding="latin-1", record=False)
    assert latin.stdout == "ok \xff\n"
    escaped = tether.run(_INVALID_UTF8, stdout=tether.PIPE, errors="surrogateescape", record=False)
    assert (
        escaped.stdout
        == subprocess.run(
            _INVALID_UTF8, stdout=subprocess.PIPE, errors="surrogateescape", check=False
        ).stdout
    )


def test_uncaptured_streams_are_none_and_stderr_can_join_stdout() -> None:
    outcome = tether.run(
        ["sh", "-c", "echo out; echo err >&2"], stdout=tether.PIPE, stderr=tether.STDOUT
    )
    assert outcome.stdout == b"out\nerr\n"
    assert outcome.stderr is None
    assert tether.run(["true"]).stdout is None


def test_max_output_bytes_keeps_the_head_and_the_tail_and_says_what_was_dropped() -> None:
    outcome = tether.run(
        python("import sys; sys.stdout.write(''.join(f'{i:06}\\n' for i in range(100000)))"),
        capture_output=True,
        text=True,
        max_output_bytes=28,
    )
    assert outcome.stdout == "000000\n000001\n099998\n099999\n"
    assert outcome.stdout_dropped == 7 * 100000 - 28
    assert outcome.stderr_dropped == 0


def test_max_output_bytes_none_keeps_everything() -> None:
    outcome = tether.run(
        python("import sys; sys.stdout.buffer.write(b'y' * 3_000_000)"),
        capture_output=True,
        max_output_bytes=None,
    )
    assert outcome.stdout == b"y" * 3_000_000


def test_a_background_child_holding_the_pipe_does_not_keep_run_waiting() -> None:
    # The command exits at once; its child keeps stdout open and would sleep for
    # a minute. tether stops the straggler, which closes the pipe.
    outcome = tether.run(["sh", "-c", "sleep 60 & echo hi"], capture_output=True, grace=1)
    assert outcome.stdout == b"hi\n"


def test_output_is_captured_at_the_deadline_too() -> None:
    outcome = tether.run(["sh", "-c", "echo before; sleep 60"], capture_output=True, deadline=2)
    assert outcome.reason is tether.Reason.DEADLINE_EXCEEDED
    assert outcome.stdout == b"before\n"


def test_check_raises_with_the_captured_output() -> None:
    with pytest.raises(tether.CommandFailed) as failed:
        tether.run(["sh", "-c", "echo why >&2; exit 2"], capture_output=True, check=True)
    assert failed.value.outcome.stderr == b"why\n"
    # What an except clause written for subprocess.CalledProcessError reads:
    assert (failed.value.returncode, failed.value.stderr, failed.value.stdout) == (2, b"why\n", b"")
    assert failed.value.cmd == ["sh", "-c", "echo why >&2; exit 2"]
    assert failed.value.outcome.args == failed.value.cmd
    with pytest.raises(tether.CommandFailed):
        failed.value.outcome.check_returncode()


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"capture_output": True, "stdout": tether.DEVNULL}, ValueError),
        ({"input": b"x", "stdin": tether.DEVNULL}, ValueError),
        ({"input": "text without text=True"}, TypeError),
        ({"input": b"bytes", "text": True}, TypeError),
        ({"max_output_bytes": -1}, ValueError),
        ({"text": True, "encoding": "no-such-codec"}, ValueError),
    ],
)
def test_conflicting_options_are_refused(options: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        tether.run(["true"], **options)  # type: ignore[arg-type]


def test_a_string_argv_is_refused_with_the_list_to_write() -> None:
    with pytest.raises(TypeError, match=r"\['echo', 'hi'\].*shlex\.split"):
        tether.run("echo hi")


def test_a_file_object_without_a_descriptor_says_to_use_pipe() -> None:
    with pytest.raises(TypeError, match=r"StringIO object has no file descriptor.*tether\.PIPE"):
        tether.run(["true"], stdout=io.StringIO())


# -- paths as streams ---------------------------------------------------------------


def test_a_path_is_created_private_truncated_and_shared_by_both_streams(tmp_path: Path) -> None:
    out = tmp_path / "out.log"
    out.write_text("old content that must go\n")
    tether.run(["sh", "-c", "echo one; echo two >&2; echo three"], stdout=out, stderr=str(out))
    assert out.read_text() == "one\ntwo\nthree\n"
    new = tmp_path / "new.log"
    tether.run(["echo", "x"], stdout=new)
    assert stat.S_IMODE(new.stat().st_mode) == 0o600


def test_a_refused_call_neither_creates_nor_empties_an_output_file(tmp_path: Path) -> None:
    kept, new = tmp_path / "kept.log", tmp_path / "new.log"
    kept.write_text("yesterday's log\n")
    with pytest.raises(TypeError):
        tether.run(["true"], stdout=kept, stderr=new, env={"A": 1})  # type: ignore[dict-item]
    assert kept.read_text() == "yesterday's log\n"
    assert not new.exists()


def test_a_path_as_stdin_is_read(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("from a file\n")
    assert tether.run(["cat"], stdin=source, capture_output=True).stdout == b"from a file\n"


def test_a_symlink_or_a_fifo_as_a_path_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(ValueError, match="symbolic link"):
        tether.run(["echo", "x"], stdout=link)
    assert target.read_text() == "keep"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        tether.run(["echo", "x"], stdout=fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        tether.run(["cat"], stdin=fifo)
    with pytest.raises(ValueError, match="cannot open"):
        tether.run(["echo", "x"], stdout=tmp_path / "missing" / "out")


# -- launch(): the handle's streams ------------------------------------------------------


def test_launched_streams_iterate_by_line_and_take_input() -> None:
    with tether.launch(
        ["sh", "-c", "while read -r line; do echo got $line; echo err $line >&2; done"],
        stdin=tether.PIPE,
        stdout=tether.PIPE,
        stderr=tether.PIPE,
        text=True,
    ) as handle:
        assert handle.stdin is not None
        assert handle.stdout is not None
        handle.stdin.write("a\nb\n")
        handle.stdin.close()
        assert list(handle.stdout) == ["got a\n", "got b\n"]
        assert handle.stderr is not None
        assert handle.stderr.read() == "err a\nerr b\n"
        assert handle.wait().ok
        assert handle.wait().stdout is None  # read by the caller, not kept


def test_streams_are_none_unless_piped() -> None:
    with tether.launch(["true"]) as handle:
        assert (handle.stdin, handle.stdout, handle.stderr) == (None, None, None)
        handle.wait()


def test_async_streams_read_through_the_loop_without_threads() -> None:
    threads_before = threading.active_count()

    async def main() -> tuple[list[bytes], list[str], int]:
        handle = await tether.launch_async(
            python(
                "import sys\nfor i in range(3): print(i, flush=True)\nprint('e', file=sys.stderr)"
            ),
            stdout=tether.PIPE,
            stderr=tether.PIPE,
        )
        assert handle.stdout is not None
        assert handle.stderr is not None
        lines = [line async for line in handle.stdout]
        errors = (await handle.stderr.read_async()).decode().splitlines()
        threads = threading.active_count()
        await handle.wait_async()
        return lines, errors, threads

    lines, errors, threads = asyncio.run(main())
    assert lines == [b"0\n", b"1\n", b"2\n"]
    assert errors == ["e"]
    assert threads == threads_before


def test_run_async_captures_many_commands_at_once() -> None:
    data = os.urandom(4 * PIPE_BUFFER)

    async def main() -> list[tether.Outcome]:
        return await asyncio.gather(
            *(
                tether.run_async(fixture("echo_streams"), input=data, capture_output=True)
                for _ in range(4)
            )
        )

    for outcome in asyncio.run(main()):
        assert outcome.stdout == data
        assert outcome.stderr == data


def test_cancelling_run_async_while_capturing_stops_the_command(tmp_path: Path) -> None:
    ready = ReadyPipe(tmp_path / "ready")

    async def main() -> int:
        task = asyncio.ensure_future(
            tether.run_async(fixture("sleeper", str(ready.path)), capture_output=True, grace=1)
        )
        loop = asyncio.get_running_loop()
        (pid,) = await loop.run_in_executor(None, ready.ready_pids)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    try:
        pid = asyncio.run(main())
    finally:
        ready.close()
    assert not alive(pid)


def test_wait_accepts_a_duration_string() -> None:
    with tether.launch(["true"]) as handle:
        assert handle.wait(timeout="5s").ok


# -- the bounded buffer -----------------------------------------------------------------


@given(
    chunks=st.lists(st.binary(max_size=50), max_size=20),
    limit=st.one_of(st.none(), st.integers(min_value=0, max_value=120)),
)
def test_head_tail_keeps_the_first_and_last_bytes_and_counts_the_rest(
    chunks: list[bytes], limit: int | None
) -> None:
    kept = HeadTail(limit)
    for chunk in chunks:
        kept.add(chunk)
    data = b"".join(chunks)
    if limit is None or len(data) <= limit:
        assert kept.head + kept.tail == data
        assert kept.dropped == 0
        return
    head, tail = limit // 2, limit - limit // 2
    assert kept.head == data[:head]
    assert kept.tail == (data[len(data) - tail :] if tail else b"")
    assert kept.dropped == len(data) - limit


@given(
    text=st.text(st.characters(codec="utf-8", exclude_characters="\r"), max_size=60),
    limit=st.integers(min_value=0, max_value=80),
)
def test_decoding_a_cut_never_invents_or_fails(text: str, limit: int) -> None:
    kept = HeadTail(limit)
    data = text.encode("utf-8")
    kept.add(data)
    decoded, dropped = decode_output(kept, encoding="utf-8", errors=None)
    assert isinstance(decoded, str)
    assert len(decoded.encode("utf-8")) + dropped == len(data)
    if not dropped:
        assert decoded == text
    else:  # a prefix of the text and a suffix of it, nothing invented at the cut
        assert any(
            text.startswith(decoded[:cut]) and text.endswith(decoded[cut:])
            for cut in range(len(decoded) + 1)
        )


# -- linear time -----------------------------------------------------------------
#
# Reading output must cost time in proportion to its size, at any line length.
# No timing is asserted: each command runs under a deadline that a linear read
# meets with two orders of magnitude to spare, even on a loaded machine (these
# sizes read in well under a second when linear), and that a quadratic one
# misses by as much (the quadratic reader this replaced took 15 s for 50 MB,
# and four times as long for twice as much): the run then ends
# ``deadline_exceeded`` with the output cut short. Sizes are chosen for that
# gap, not for realism: 64 MiB alone would be read quadratically in about 25 s,
# within a generous bound.

LINEAR_DEADLINE = 45.0
BIG = 256 << 20
LONG_LINE = 192 << 20


def test_a_quarter_gibibyte_is_read_whole_in_linear_time() -> None:
    with tether.launch(
        ["head", "-c", str(BIG), "/dev/zero"], stdout=tether.PIPE, deadline=LINEAR_DEADLINE
    ) as handle:
        assert handle.stdout is not None
        data = handle.stdout.read()
        outcome = handle.wait()
    assert outcome.reason == "completed"
    assert len(data) == BIG
    assert data.count(0) == BIG


def test_one_very_long_line_is_read_by_readline_in_linear_time() -> None:
    command = ["sh", "-c", f"head -c {LONG_LINE} /dev/zero; echo; echo tail"]
    with tether.launch(command, stdout=tether.PIPE, deadline=LINEAR_DEADLINE) as handle:
        assert handle.stdout is not None
        line = handle.stdout.readline()
        rest = list(handle.stdout)
        outcome = handle.wait()
    assert outcome.reason == "completed"
    assert len(line) == LONG_LINE + 1
    assert line.endswith(b"\0\n")
    assert rest == [b"tail\n"]


def test_millions_of_short_lines_iterate_in_linear_time() -> None:
    lines = 3_000_000
    with tether.launch(
        ["seq", str(lines)], stdout=tether.PIPE, text=True, deadline=LINEAR_DEADLINE
    ) as handle:
        assert handle.stdout is not None
        count, last = 0, ""
        for line in handle.stdout:
            count, last = count + 1, line
        outcome = handle.wait()
    assert outcome.reason == "completed"
    assert (count, last) == (lines, f"{lines}\n")


def test_async_reads_are_whole_and_linear_too() -> None:
    async def main() -> tuple[bytes, list[bytes], str]:
        handle = await tether.launch_async(
            ["sh", "-c", f"head -c {LONG_LINE} /dev/zero; echo; seq 3"],
            stdout=tether.PIPE,
            deadline=LINEAR_DEADLINE,
        )
        assert handle.stdout is not None
        line = await handle.stdout.readline_async()
        rest = [line async for line in handle.stdout]
        outcome = await handle.wait_async()
        return line, rest, outcome.reason

    line, rest, reason = asyncio.run(main())
    assert reason == "completed"
    assert len(line) == LONG_LINE + 1
    assert rest == [b"1\n", b"2\n", b"3\n"]


@given(
    st.lists(st.binary(max_size=20), max_size=30),
    st.lists(st.sampled_from(["line", "all"]), max_size=40),
)
def test_the_pieces_give_what_one_buffer_would(reads: list[bytes], takes: list[str]) -> None:
    pieces = _Pieces(b"")
    buffer = b""
    for read in reads:
        pieces.add(read)
        buffer += read
        for take in takes[:3]:
            if take == "all":
                assert pieces.everything() == buffer
                buffer = b""
            else:
                end = buffer.find(b"\n")
                expected = None if end < 0 else buffer[: end + 1]
                assert pieces.line() == expected
                if expected is not None:
                    buffer = buffer[end + 1 :]
        takes = takes[3:]
    assert pieces.everything() == buffer


def test_dev_tty_without_a_controlling_terminal_says_so() -> None:
    code = (
        "import tether\n"
        "try:\n"
        "    tether.run(['true'], stdout='/dev/tty', record=False)\n"
        "except ValueError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,  # no controlling terminal
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "/dev/tty" in done.stdout
    assert "no controlling terminal" in done.stdout
    assert "FIFO" not in done.stdout


def test_a_fifo_nobody_reads_is_still_called_one(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="a FIFO with nobody reading it"):
        tether.run(["true"], stdout=str(fifo), record=False)

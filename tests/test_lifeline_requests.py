"""Lifeline bytes: which are requests, in which order, which count once."""

from __future__ import annotations

import os
import signal

import pytest

from tether.shared.lifeline import (
    BASIC,
    RESUME,
    SUSPEND,
    TIME_OUT,
    TOLD_REQUESTS,
    LifelineDecoder,
    pass_on_request,
)
from tether.supervisor.lifeline import LifelineReader

INT = pass_on_request(signal.SIGINT)


def test_order_is_kept_and_only_some_requests_count_once() -> None:
    tally = LifelineDecoder()
    assert tally.decode(b"z" + INT + b"rtcz") == [INT, TIME_OUT, b"c", SUSPEND]
    assert tally.decode(b"tcz") == [SUSPEND]
    assert tally.decode(b"zr") == [RESUME]
    assert tally.unknown == 0


def test_a_turn_hears_each_request_once_and_of_job_control_the_last() -> None:
    tally = LifelineDecoder()
    assert tally.decode(INT * 1000 + b"z" * 1000) == [INT, SUSPEND]
    assert tally.decode(b"zr" * 1_000_000) == [RESUME]
    assert tally.decode(b"rz" * 1_000_000 + INT) == [SUSPEND, INT]


def test_requests_past_the_first_few_are_counted_not_told() -> None:
    tally = LifelineDecoder()
    told = [tally.tell(SUSPEND) for _ in range(TOLD_REQUESTS + 100)]
    assert told == [True] * TOLD_REQUESTS + [False] * 100
    assert tally.tell(b"c")  # a request heard once is always told
    assert tally.untold == 100
    assert tally.untold_report_due()
    assert not tally.untold_report_due()


def test_the_basic_vocabulary_is_end_of_file_c_and_k() -> None:
    tally = LifelineDecoder(BASIC)
    assert tally.decode(b"tzr" + INT + b"k") == [b"k"]
    assert tally.unknown == 4


def test_bytes_of_unnamed_signals_are_junk() -> None:
    tally = LifelineDecoder()
    assert tally.decode(bytes((0x80, 0x80 + 32, 0xFF))) == []
    assert tally.unknown == 3


@pytest.mark.parametrize("number", [0, 128, -1])
def test_no_request_for_a_number_that_is_no_signal(number: int) -> None:
    with pytest.raises(ValueError, match="no request"):
        pass_on_request(number)


def _ignore(event: str, mono: float | None = None, /, **fields: object) -> None:
    """The loop's ``tell``, for a test that looks only at the events."""


def _heard(reader: LifelineReader) -> tuple[list[str], bool]:
    events, closed = reader.read(1.0, _ignore)
    return [type(event).__name__ for event in events], closed


def test_a_hand_over_of_nothing_leaves_the_next_read_to_the_pipe() -> None:
    # What the sentry heard is heard first; when it heard nothing, the wake the
    # caller's request (or death) caused reads the pipe in that same turn.
    read_end, write_end = os.pipe()
    try:
        reader = LifelineReader(read_end, BASIC)
        reader.take_over(b"", False)
        os.write(write_end, b"c")
        assert _heard(reader) == (["CancelRequested"], False)
        reader.take_over(b"k", False)
        os.close(write_end)
        write_end = -1
        assert _heard(reader) == (["KillRequested"], False)  # the sentry's, first
        assert _heard(reader) == (["CallerLost"], True)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)

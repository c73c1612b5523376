"""Lifeline bytes: which are requests, in which order, which count once."""

from __future__ import annotations

import signal

import pytest

from tether.shared.protocol import RESUME, SUSPEND, TIME_OUT, pass_on_request
from tether.supervisor.loop import LifelineBytes

INT = pass_on_request(signal.SIGINT)


def test_order_is_kept_and_only_some_requests_count_once() -> None:
    tally = LifelineBytes()
    assert tally.fresh_requests(b"z" + INT + b"rtcz") == [
        SUSPEND,
        INT,
        RESUME,
        TIME_OUT,
        b"c",
        SUSPEND,
    ]
    assert tally.fresh_requests(b"tcz") == [SUSPEND]
    assert tally.unknown == 0


def test_a_run_of_one_request_is_one_request() -> None:
    tally = LifelineBytes()
    assert tally.fresh_requests(INT * 1000 + b"z" * 1000) == [INT, SUSPEND]


def test_bytes_of_unnamed_signals_are_junk() -> None:
    tally = LifelineBytes()
    assert tally.fresh_requests(bytes((0x80, 0x80 + 32, 0xFF))) == []
    assert tally.unknown == 3


@pytest.mark.parametrize("number", [0, 128, -1])
def test_no_request_for_a_number_that_is_no_signal(number: int) -> None:
    with pytest.raises(ValueError, match="no request"):
        pass_on_request(number)

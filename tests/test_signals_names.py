"""Signal names as ``timeout -s`` takes them, and the numbers sent for them."""

from __future__ import annotations

import signal

import pytest

from tether.shared.signals import short_name, signal_name, signal_number


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("TERM", "SIGTERM"),
        ("sigterm", "SIGTERM"),
        ("15", "SIGTERM"),
        ("0", "0"),
        ("KILL", "SIGKILL"),
        ("RTMIN", "SIGRTMIN"),
        ("RTMIN+1", "SIGRTMIN+1"),
        ("SIGRTMAX-1", "SIGRTMAX-1"),
        (str(signal.SIGRTMIN + 2), "SIGRTMIN+2"),
        (str(signal.SIGRTMAX), "SIGRTMAX"),
    ],
)
def test_names(text: str, name: str) -> None:
    assert signal_name(text) == name
    assert signal_name(name) == name


@pytest.mark.parametrize(
    "text", ["", "BOGUS", "65", "-1", "1000", "RTMIN+99", "RTMAX+1", "RTMIN-1", "\u0663", "SIG"]
)
def test_refused(text: str) -> None:
    assert signal_name(text) is None


def test_numbers_round_trip() -> None:
    for number in (0, *range(1, 32), *range(signal.SIGRTMIN, signal.SIGRTMAX + 1)):
        name = signal_name(str(number))
        if name is None:
            continue
        assert signal_number(name) == number
    assert short_name("SIGTERM") == "TERM"
    assert short_name("0") == "0"

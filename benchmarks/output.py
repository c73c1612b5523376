"""Measure 10: 64 MiB of a command's output through ``stdout.read()``, tether against subprocess.

A caller that reads what its command writes must pay for the bytes, not for
their square: ``tether.launch(..., stdout=PIPE).stdout.read()`` once took 15 s
for 50 MB that :mod:`subprocess` reads in 0.03 s. Each trial is a fresh
caller (``python -c READER CONTENDER SIZE``) that times one read of ``head -c
SIZE /dev/zero`` from its start to its end of file and prints the seconds; the
contenders take turns, so both see the same machine.
"""

from __future__ import annotations

import subprocess
import sys

from benchmarks.measures import BOUND, Series, _ms, _rotate

__all__ = ["CONTENDERS", "SIZE", "output_read"]

SIZE = 64 << 20
CONTENDERS = ("subprocess", "tether.launch")

READER = r"""
import subprocess, sys, time
import tether

contender, size = sys.argv[1], int(sys.argv[2])
argv = ["head", "-c", str(size), "/dev/zero"]
began = time.monotonic()
if contender == "subprocess":
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as popen:
        data = popen.stdout.read()
else:
    with tether.launch(argv, stdout=tether.PIPE, record=False) as handle:
        data = handle.stdout.read()
        handle.wait()
took = time.monotonic() - began
assert len(data) == size, len(data)
print(took)
"""


def output_read(trials: int, size: int = SIZE) -> dict[str, Series]:
    """``trials`` reads of ``size`` bytes per contender, interleaved; see the module."""
    series = {contender: Series() for contender in CONTENDERS}
    for turn in range(trials):
        for contender in _rotate(CONTENDERS, turn):
            _output_trial(contender, size, series[contender])
    return series


def _output_trial(contender: str, size: int, series: Series) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", READER, contender, str(size)],
            capture_output=True,
            text=True,
            timeout=4 * BOUND,
            check=False,
        )
    except subprocess.TimeoutExpired:
        series.failures.append(f"no end of file within {4 * BOUND:g} s")
        return
    if done.returncode != 0:
        series.failures.append(done.stderr.strip().splitlines()[-1:][0] if done.stderr else "?")
        return
    series.samples.append(_ms(float(done.stdout)))

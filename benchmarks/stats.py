"""The few statistics the benchmark reports: medians, 90th percentiles, ratios.

Latencies on a shared two-core machine have long right tails (a trial that
lands on a busy core waits for it), so the table leads with the median and the
90th percentile rather than the mean, which one slow trial would drag. The
percentile interpolates linearly between the two nearest ranks, as NumPy's
default does, so the numbers here can be checked against any other tool.

Pure: no clock, no processes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Summary", "format_ms", "format_ratio", "percentile", "ratio", "summarize"]


def percentile(samples: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) quantile of ``samples``, interpolated linearly between ranks."""
    if not samples:
        raise ValueError("no samples")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within 0..1, not {fraction!r}")
    ordered = sorted(samples)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    weight = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * weight


@dataclass(frozen=True, slots=True)
class Summary:
    """What the table shows of one set of samples."""

    n: int
    median: float
    p90: float
    minimum: float
    maximum: float


def summarize(samples: Sequence[float]) -> Summary:
    """Median, 90th percentile and range of ``samples`` (which must not be empty)."""
    return Summary(
        n=len(samples),
        median=percentile(samples, 0.5),
        p90=percentile(samples, 0.9),
        minimum=min(samples),
        maximum=max(samples),
    )


def ratio(value: float, reference: float) -> float | None:
    """``value / reference``, or ``None`` when the reference is zero or not finite."""
    if reference == 0 or not math.isfinite(reference) or not math.isfinite(value):
        return None
    return value / reference


def format_ms(value: float | None) -> str:
    """A latency in milliseconds, with as many digits as a person can use."""
    if value is None:
        return "—"
    if math.isinf(value):
        return "never (∞)"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def format_ratio(value: float | None) -> str:
    """A ratio such as ``0.41x``; ``—`` where there is none."""
    if value is None:
        return "—"
    if value >= 10:
        return f"{value:.0f}x"
    return f"{value:.2f}x"

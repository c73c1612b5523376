"""A small SVG plotter for the latency distributions, so plotting needs no dependency.

One panel per latency measure, one row per contender: every sample is a dot
on a logarithmic millisecond axis (latencies here span microseconds to
seconds), the median a thick bar, the 90th percentile a thin one, and the
target a dashed red line. A contender that cannot do what is measured gets
the word "never" in its row instead of dots. SVG is text, so the plot diffs
and renders on any forge without a plotting library; the numbers behind it
are in the JSON file written beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from benchmarks.stats import percentile

__all__ = ["Panel", "Row", "render_svg"]

_WIDTH = 960
_LEFT = 250
_RIGHT = 30
_ROW = 26
_TOP = 46
_BOTTOM = 34
_COLOURS = ("#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True, slots=True)
class Row:
    """One contender's samples (ms), or the text to show when it never does it."""

    label: str
    samples: Sequence[float]
    never: str | None = None


@dataclass(frozen=True, slots=True)
class Panel:
    """One measure: a title, its rows and its target (ms)."""

    title: str
    rows: Sequence[Row]
    target: float | None = None


def _bounds(panel: Panel) -> tuple[float, float]:
    values = [s for row in panel.rows for s in row.samples if s > 0]
    if panel.target:
        values.append(panel.target)
    if not values:
        return 0.01, 10.0
    low = 10 ** math.floor(math.log10(min(values)))
    high = 10 ** math.ceil(math.log10(max(values)))
    return low, max(high, low * 10)


class _Axis:
    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = math.log10(low), math.log10(high)

    def x(self, value: float) -> float:
        value = max(value, 10**self.low)
        span = _WIDTH - _LEFT - _RIGHT
        return _LEFT + span * (math.log10(value) - self.low) / (self.high - self.low)


def _tick_label(value: float) -> str:
    if value >= 1:
        return f"{value:g} ms"
    return f"{value * 1000:g} µs"


def _panel(panel: Panel, top: float) -> tuple[list[str], float]:
    low, high = _bounds(panel)
    axis = _Axis(low, high)
    height = _TOP + _ROW * len(panel.rows) + _BOTTOM
    bottom = top + _TOP + _ROW * len(panel.rows)
    out = [f'<text x="10" y="{top + 18}" font-weight="bold">{escape(panel.title)}</text>']
    decade = low
    while decade <= high * 1.0001:
        x = axis.x(decade)
        out.append(
            f'<line x1="{x:.1f}" y1="{top + _TOP - 6}" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#555">'
            f"{_tick_label(decade)}</text>"
        )
        decade *= 10
    if panel.target:
        x = axis.x(panel.target)
        out.append(
            f'<line x1="{x:.1f}" y1="{top + _TOP - 10}" x2="{x:.1f}" y2="{bottom}" '
            'stroke="#d00" stroke-dasharray="5,3"/>'
        )
        out.append(
            f'<text x="{x + 4:.1f}" y="{top + _TOP - 12}" fill="#d00">'
            f"target {panel.target:.3g} ms</text>"
        )
    for index, row in enumerate(panel.rows):
        out += _row(row, axis, top + _TOP + _ROW * index + _ROW / 2, _colour(row.label, index))
    return out, height


def _colour(label: str, index: int) -> str:
    """One colour per contender in every panel: blue tether run, green seed door, red timeout."""
    for prefix, colour in (
        ("tether run", "#1f77b4"),
        ("seed door", "#2ca02c"),
        ("timeout", "#d62728"),
    ):
        if label.startswith(prefix):
            return colour
    return _COLOURS[3 + index % 3]


def _row(row: Row, axis: _Axis, middle: float, colour: str) -> list[str]:
    out = [
        f'<text x="{_LEFT - 10}" y="{middle + 4:.1f}" text-anchor="end">{escape(row.label)}</text>'
    ]
    if row.never is not None and not row.samples:
        out.append(
            f'<text x="{_LEFT + 6}" y="{middle + 4:.1f}" fill="#b00">{escape(row.never)}</text>'
        )
        return out
    if not row.samples:
        out.append(f'<text x="{_LEFT + 6}" y="{middle + 4:.1f}" fill="#888">no samples</text>')
        return out
    for index, sample in enumerate(row.samples):
        jitter = ((index * 7919) % 11 - 5) * 1.4
        out.append(
            f'<circle cx="{axis.x(sample):.1f}" cy="{middle + jitter:.1f}" r="2.6" '
            f'fill="{colour}" fill-opacity="0.45"/>'
        )
    for fraction, width in ((0.5, 3), (0.9, 1.2)):
        x = axis.x(percentile(row.samples, fraction))
        out.append(
            f'<line x1="{x:.1f}" y1="{middle - 10:.1f}" x2="{x:.1f}" y2="{middle + 10:.1f}" '
            f'stroke="#000" stroke-width="{width}"/>'
        )
    return out


def render_svg(title: str, panels: Sequence[Panel], notes: Mapping[str, str] | None = None) -> str:
    """The whole figure as an SVG document."""
    body: list[str] = []
    top = 40.0
    for panel in panels:
        part, height = _panel(panel, top)
        body += part
        top += height
    legend = (
        "dots: samples (at the left edge if ≤ 0) · thick bar: median · thin bar: 90th percentile"
        " · dashed: target"
    )
    body.append(f'<text x="10" y="{top + 6}" fill="#555">{escape(legend)}</text>')
    for offset, (key, value) in enumerate((notes or {}).items()):
        body.append(
            f'<text x="10" y="{top + 24 + 18 * offset}" fill="#555">'
            f"{escape(key)}: {escape(value)}</text>"
        )
    total = top + 30 + 18 * len(notes or {})
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{total:.0f}" '
            f'viewBox="0 0 {_WIDTH} {total:.0f}" font-family="sans-serif" font-size="12">',
            f'<rect width="{_WIDTH}" height="{total:.0f}" fill="#fff"/>',
            f'<text x="10" y="24" font-size="16" font-weight="bold">{escape(title)}</text>',
            *body,
            "</svg>",
            "",
        ]
    )

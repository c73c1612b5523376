"""Reviewing what runs left behind: ``tether show`` and ``tether ls`` (docs/operators.md).

Everything here reads defensively and prints nothing; the CLI (:mod:`tether.cli.review`) decides
what goes where, with which status.
"""

from __future__ import annotations

from tether.review._text import ReviewError, describe_unexpected, printable_path, use_colour
from tether.review.files import RunFiles, load_run, read_events
from tether.review.find import find_last, find_newest, find_run
from tether.review.listing import (
    REASON_CHOICES,
    Filters,
    Listing,
    parse_count,
    parse_reasons,
    parse_since,
    render_progress_table,
    render_table,
    rows_as_json,
    scan,
    select,
)
from tether.review.show import render_run, run_as_json
from tether.shared.paths import EVENTS_SUFFIX, events_path_for

__all__ = [
    "EVENTS_SUFFIX",
    "REASON_CHOICES",
    "Filters",
    "Listing",
    "ReviewError",
    "RunFiles",
    "describe_unexpected",
    "events_path_for",
    "find_last",
    "find_newest",
    "find_run",
    "load_run",
    "parse_count",
    "parse_reasons",
    "parse_since",
    "printable_path",
    "read_events",
    "render_progress_table",
    "render_run",
    "render_table",
    "rows_as_json",
    "run_as_json",
    "scan",
    "select",
    "use_colour",
]

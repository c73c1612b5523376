"""Reviewing what runs left behind: ``tether show`` and ``tether ls``.

An operator reviews runs after the fact, often many of them and often when
something went wrong — which is exactly when the files are least likely to be
tidy. A supervisor that was SIGKILLed leaves an event log with no record (or
the caller's ``supervisor_lost`` fallback), and perhaps a last log line cut in
half; a records directory collects files that are not records at all. So
everything here *reads defensively*: whatever parses is shown, whatever does
not is named in one warning line, and nothing a file contains can make the
tools crash, hang (a FIFO named ``x.json``) or write control characters to the
operator's terminal.

Two shapes of output. For people: :func:`render_run` tells one run as a
verdict (what happened, in words) followed by a timeline of its event log in
seconds since the run was asked for, and :func:`render_table` lists many runs as an
aligned table, newest first. For scripts: :func:`run_as_json` and
:func:`rows_as_json` give the same facts as JSON for ``jq``, with the
record's own field names, unchanged.

Colour is decided by :func:`use_colour` alone: only on a terminal, never when
``NO_COLOR`` is set (https://no-color.org) or ``TERM`` is ``dumb``.

This module is on the caller's side of tether: it loads neither ``structlog``
nor ``transitions`` (the ``.events.jsonl`` naming rule comes from
:mod:`tether.shared.paths`, shared with the supervisor), and it does no printing; the
CLI decides what goes to stdout and stderr and with which exit status.
"""

from __future__ import annotations

from tether.review._text import (
    ReviewError,
    describe_unexpected,
    printable_path,
    use_colour,
)
from tether.review.files import (
    RunFiles,
    load_run,
    read_events,
)
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
from tether.review.show import (
    render_run,
    run_as_json,
)
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

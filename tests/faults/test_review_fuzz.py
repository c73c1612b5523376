"""Fuzzing the review tools in-process: whatever the files hold, only ``ReviewError`` comes out.

The hand-made cases in ``test_review_hostile.py`` are the breaks someone
thought of; these are the ones nobody did. Hypothesis writes records and event
logs made from a valid template with fields replaced by any JSON value (odd
types, times at the ends of the calendar, control characters, lone
surrogates), then damaged (cut short, a byte flipped, NaN or a huge integer or
deep nesting spliced in, or random bytes altogether), and drives the same
functions the CLI calls. It checks that nothing raises but
:class:`~tether.review.ReviewError` (and :class:`RecordError` from the record
reader), that every message is one printable line, and that what would reach
the terminal holds no control character but the newline, and ANSI colour only
when colour is on.

Local time matters (converting year 1 west of Greenwich overflows), so each
example runs under a western, an eastern or the UTC zone.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_review import TEMPLATE
from tether.core.reasons import Reason
from tether.review import (
    Filters,
    ReviewError,
    load_run,
    parse_since,
    read_events,
    render_run,
    render_table,
    rows_as_json,
    run_as_json,
    scan,
    select,
)
from tether.review import files as review_files
from tether.shared.record_file import RecordError, read_record

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: For the properties that write or build several records per example.
FUZZ_MANY = settings(FUZZ, max_examples=100)

COLOUR = re.compile(r"\x1b\[[0-9;]*m")

# -- what a hostile file may hold ------------------------------------------------------

#: Times that fall off the calendar when moved to another zone, and ordinary ones.
EDGE_TIMES = [
    "0001-01-01T00:00:00+00:00",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00",
    "9999-12-31T23:59:59-12:00",
    "9999-12-31T23:59:59+00:00",
    "9999-12-31",
    "2024-05-01T12:00:00.000000Z",
    "2024-02-30T00:00:00",
    "",
]

times = st.one_of(
    st.sampled_from(EDGE_TIMES),
    st.builds(
        lambda moment, minutes: moment.replace(
            tzinfo=timezone(timedelta(minutes=minutes))
        ).isoformat(),
        st.datetimes(),
        st.integers(-1439, 1439),
    ),
    st.datetimes().map(datetime.isoformat),
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([10**639, -(10**639), 2**63, -(2**63), 2**64, -1, 0]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 5e-324, -0.0]),
    st.text(max_size=20),
    st.sampled_from(["\x1b[2J", "\x07", "\r", "\u202e", "\ud800", "\x00", "a\nb", "\x9b31m"]),
    times,
)

json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)

FIELDS = [name for name in TEMPLATE if name != "schema_version"]
TIME_FIELDS = {"started_at", "finished_at", "ts"}


@st.composite
def mutated(draw: st.DrawFn, template: dict[str, object]) -> dict[str, object]:
    """``template`` with about a quarter of its fields replaced (times mostly by times)."""
    document = copy.deepcopy(template)
    for name in template:
        if draw(st.integers(0, 3)) == 0:
            odd_time = name in TIME_FIELDS and draw(st.booleans())
            document[name] = draw(times if odd_time else json_values)
    document.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    return document


records = mutated(TEMPLATE)

EVENT_NAMES = [
    "launched",
    "launch_failed",
    "step",
    "signal_sent",
    "signal_received",
    "lifeline_closed",
    "lifeline_request",
    "command_exited",
    "tree_emptied",
    "record_written",
    "record_failed",
    "cgroup_left",
    "something_new",
]

EVENT_FIELDS = [
    "ts",
    "mono",
    "pid",
    "pgid",
    "supervisor_pid",
    "label",
    "returncode",
    "others_alive",
    "processes",
    "signal",
    "effects",
    "state_before",
    "state_after",
    "input",
    "path",
    "error",
    "errno",
    "stage",
    "started_mono",
    "deadline_seconds",
    "grace_seconds",
    "containment",
    "request",
]

events = st.builds(
    lambda name, fields: {"event": name, **fields},
    st.sampled_from(EVENT_NAMES) | st.text(max_size=8),
    st.sets(st.sampled_from(EVENT_FIELDS), max_size=8).map(lambda names: dict.fromkeys(names, 1)),
).flatmap(mutated)

#: What is spliced into a document in place of one of its values.
SPLICES = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"9" * 700,
    b"[" * 40 + b"]" * 40,
    b"[" * 5_000 + b"]" * 5_000,
    b'"\\ud800"',
    b"{",
]

PLACE = "\x00splice\x00"


@st.composite
def damaged(draw: st.DrawFn, document: object) -> bytes:
    """``document`` as JSON, perhaps damaged the way a file can be."""
    damage = draw(st.sampled_from(["none", "splice", "cut", "flip", "random"]))
    if damage == "random":
        return draw(st.binary(max_size=300))
    places: list[bytes] = []
    if damage == "splice" and isinstance(document, dict) and document:
        keys = draw(st.lists(st.sampled_from(sorted(document)), min_size=1, max_size=4))
        for number, key in enumerate(dict.fromkeys(keys)):
            document = {**document, key: f"{PLACE}{number}"}
            places.append(draw(st.sampled_from(SPLICES)))
    data = json.dumps(document).encode()
    for number, splice in enumerate(places):
        data = data.replace(json.dumps(f"{PLACE}{number}").encode(), splice)
    if places:
        return data
    if damage == "cut" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if damage == "flip" and data:
        where = draw(st.integers(0, len(data) - 1))
        return data[:where] + bytes([draw(st.integers(0, 255))]) + data[where + 1 :]
    return data


record_files = records.flatmap(damaged)
log_lines = events.flatmap(damaged)


@st.composite
def log_files(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(log_lines | st.just(b"") | st.binary(max_size=40), max_size=8))
    data = b"\n".join(lines)
    return data + b"\n" if draw(st.booleans()) else data


# -- what reaches the terminal ------------------------------------------------------------


def assert_terminal_safe(text: str, *, colour: bool = False) -> None:
    """No control character but the newline; ANSI colour only when it is on."""
    shown = COLOUR.sub("", text) if colour else text
    raw = sorted({char for char in shown if not char.isprintable() and char != "\n"})
    assert not raw, (raw, text[:500])


def assert_one_line(message: str) -> None:
    assert message
    assert "\n" not in message
    assert_terminal_safe(message)
    assert "unexpected error" not in message


zones = st.sampled_from(["America/Los_Angeles", "Pacific/Kiritimati", "UTC"])


@contextlib.contextmanager
def local_zone(name: str) -> Iterator[None]:
    """Make ``name`` this process's local time zone (``TZ`` and ``tzset``) for a while."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


# -- the properties -----------------------------------------------------------------------


@FUZZ
@given(data=record_files)
def test_read_record_returns_a_record_or_says_why_not(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "r.json"
        path.write_bytes(data)
        try:
            record = read_record(path)
        except RecordError as error:
            assert_one_line(str(error))
            return
    assert record["schema_version"] == "tether.record.v1"
    json.dumps(record, allow_nan=False)  # jq can read it back


@FUZZ
@given(
    zone=zones,
    record=st.none() | record_files,
    log=st.none() | log_files(),
    give_log=st.booleans(),
    colour=st.booleans(),
    all_steps=st.booleans(),
)
def test_show_shows_or_refuses_in_one_line(
    *,
    zone: str,
    record: bytes | None,
    log: bytes | None,
    give_log: bool,
    colour: bool,
    all_steps: bool,
) -> None:
    with tempfile.TemporaryDirectory() as directory, local_zone(zone):
        record_path = Path(directory) / "run.json"
        log_path = Path(directory) / "run.events.jsonl"
        if record is not None:
            record_path.write_bytes(record)
        if log is not None:
            log_path.write_bytes(log)
        try:
            run = load_run(log_path if give_log else record_path)
        except ReviewError as error:
            assert_one_line(str(error))
            return
        rendered = render_run(run, colour=colour, all_steps=all_steps)
    for message in [run.record_note, run.log_note, *run.warnings]:
        if message is not None:
            assert_one_line(message)
    assert_terminal_safe(rendered, colour=colour)
    document = json.loads(run_as_json(run))
    assert set(document) == {
        "record",
        "events",
        "record_path",
        "events_path",
        "warnings",
        "progress",
    }


reasons = st.none() | st.frozensets(st.sampled_from([reason.value for reason in Reason]))
moments = st.none() | st.datetimes(
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=12))])
)
file_names = st.text(
    st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=12,
)


@FUZZ_MANY
@given(
    zone=zones,
    contents=st.dictionaries(file_names, record_files | log_files(), max_size=6),
    filters=st.builds(
        Filters, reasons=reasons, since=moments, label=st.none() | st.text(max_size=4)
    ),
    colour=st.booleans(),
)
def test_ls_lists_what_it_can_and_names_the_rest(
    zone: str, contents: dict[str, bytes], filters: Filters, colour: bool
) -> None:
    with tempfile.TemporaryDirectory() as temporary, local_zone(zone):
        directory = Path(temporary)
        for name, data in contents.items():
            path = directory / name
            if len(os.fsencode(path.name)) <= 255 and name not in (".", ".."):
                path.write_bytes(data)
        listing = scan(directory)
        rows = select(listing.records, filters)
        table = render_table(rows, directory=directory, colour=colour)
    for message in listing.skipped:
        assert_one_line(message)
    assert all(filters.admit(record) for _, record in rows)
    assert_terminal_safe(table, colour=colour)
    assert len(table.splitlines()) == len(rows) + 1
    assert len(json.loads(rows_as_json(rows))) == len(rows)


@FUZZ_MANY
@given(
    zone=zones,
    records_=st.lists(records, max_size=4),
    filters=st.builds(
        Filters, reasons=reasons, since=moments, label=st.none() | st.text(max_size=4)
    ),
)
def test_select_and_the_table_take_any_field_values(
    zone: str, records_: list[dict[str, object]], filters: Filters
) -> None:
    """The same, on records handed over directly: select and render never need a file."""
    rows = [(Path(f"r{number}.json"), record) for number, record in enumerate(records_)]
    with local_zone(zone):
        chosen = select(rows, filters)
        assert_terminal_safe(render_table(chosen, directory=Path()))
    json.loads(rows_as_json(chosen))


@FUZZ
@given(zone=zones, text=st.text(max_size=40) | st.sampled_from(EDGE_TIMES) | times, now=moments)
def test_since_is_a_time_or_one_line_saying_why_not(
    zone: str, text: str, now: datetime | None
) -> None:
    try:
        with local_zone(zone):
            since = parse_since(text, now=now)
    except ReviewError as error:
        assert_one_line(str(error))
        return
    assert since.utcoffset() is not None
    Filters(since=since).admit({"started_at": "2024-05-01T12:00:00+00:00"})


@FUZZ
@given(
    lines=st.lists(
        st.sampled_from([b'{"event": "a"}', b'{"event": "b", "n": [1, 2, 3]}', b"junk", b""])
        | st.binary(max_size=30).filter(lambda line: b"\n" not in line),
        max_size=30,
    ),
    chunk=st.integers(1, 20),
    ends_cleanly=st.booleans(),
)
def test_reading_a_log_in_chunks_finds_every_line(
    lines: list[bytes], chunk: int, ends_cleanly: bool
) -> None:
    """Small chunks and a small line limit put every line boundary inside a chunk somewhere."""
    limit = 16
    data = b"\n".join(lines) + (b"\n" if ends_cleanly else b"")
    expected = []
    for line in data.split(b"\n"):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if len(line) <= limit and isinstance(value, dict) and isinstance(value.get("event"), str):
            expected.append(value)
    with (
        tempfile.TemporaryDirectory() as directory,
        mock.patch.object(review_files, "_CHUNK_BYTES", chunk),
        mock.patch.object(review_files, "_MAX_LINE_BYTES", limit),
    ):
        path = Path(directory) / "x.events.jsonl"
        path.write_bytes(data)
        try:
            found, warnings = read_events(path)
        except ReviewError:
            assert not expected
            return
    assert found == expected
    for warning in warnings:
        assert_one_line(warning)

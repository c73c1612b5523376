"""``tether show``, ``tether ls``, ``tether prune``: what operators read (and clear) afterwards
(docs/operators.md).
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from tether.cli.messages import fail, print_out, warn
from tether.cli.parsers import UsageParser, add_options
from tether.core.reasons import Reason
from tether.shared.paths import default_records_dir

#: Each review subcommand's help, description and epilog (prose, see :func:`_prose`).
_TEXTS = {
    "show": (
        "tell the story of one run (tether show --help)",
        """Show one run for a person: the verdict (why it ended, exit status, how it was
        stopped, resources) and the timeline of its event log in seconds since tether was asked
        to run it. RUN is a record (.json) or its event log (.events.jsonl), either finds the
        other; or a record's name as tether ls prints it, or a label (the newest run with it),
        both looked up in the default records directory from any directory.""",
        """Colour only on a terminal, and never when NO_COLOR is set. --follow looks for new
        lines four times a second while the run goes on. Exit status: 0 shown (even if the
        record or the log is missing, or the log's last line is cut short: the gaps are named on
        stderr; with --follow, followed to the run's end, or to its supervisor's loss), 125
        nothing to show (not a tether record or event log, unreadable, missing), 130 --follow
        interrupted (Ctrl-C).""",
    ),
    "ls": (
        "list the runs in a records directory (tether ls --help)",
        """List the runs recorded in DIR, newest first: when each started (local time), its
        label, what ran (the script or module an interpreter ran: evaluate.py for python
        evaluate.py, pkg.mod for python -m pkg.mod, python -c; else the command's name), why it
        ended, its exit status, how long it took, whether SIGKILL was needed, and the record's
        name (tether show NAME shows it, from any directory). Runs with no record yet come
        first, from their event logs: running (since when, for how long, the deadline left, the
        supervisor's and the command's pids) or lost (the supervisor is gone; a pid counts only
        if that process started before the launch).""",
        """Files that are not tether records are skipped, each named on stderr. Exit status: 0
        listed (even nothing), 125 bad option or DIR unreadable.""",
    ),
    "prune": (
        "remove old runs from a records directory (tether prune --help)",
        """Remove the runs DIR does not keep: all but the newest --keep runs, and those older
        than --older-than. Only finished tether runs go (a record and its event log); a run in
        progress, a file that is not a tether record and a symbolic link are never touched.
        Empty cgroups a lost (SIGKILLed) supervisor left below this process's own, named by
        tether, go too. The default directory is also pruned as runs are written into it (at
        most TETHER_KEEP_RUNS runs, default 10000, none older than TETHER_KEEP_DAYS days,
        default 30; 0 means no bound).""",
        """The names of the runs removed (or, with --dry-run, that would be) go to stdout, one a
        line, oldest first; a summary to stderr. Exit status: 0 done, 125 bad option or DIR
        unusable.""",
    ),
}


#: ``ls --reason``'s help: the reasons a run ends, and the states of one without a record.
_REASON_HELP = (
    "only runs that ended for this reason (repeat it, or R1,R2): "
    + ", ".join(reason.value for reason in Reason)
    + "; or running, lost (runs with no record yet)"
)


def _prose(text: str) -> str:
    """``text`` with one space between its words, as argparse prints it."""
    return " ".join(text.split())


def add_review_parsers(sub: argparse._SubParsersAction[UsageParser]) -> None:
    """Add ``show``, ``ls`` and ``prune`` to ``sub``: their words in :data:`_TEXTS`."""
    made = {
        name: sub.add_parser(name, help=summary, description=_prose(about), epilog=_prose(epilog))
        for name, (summary, about, epilog) in _TEXTS.items()
    }
    add_options(
        made["show"],
        (("path",), "RUN",
         "a record or event log path, a record's name from tether ls, or a label"),
        (("--last",), None, "show the newest run in the default records directory"),
        (("--json",), None,
         'print {"record": ..., "events": [...]} as one JSON document, for scripts'),
        (("-a", "--all"), None, "also show the core's steps that changed nothing"),
        (("-f", "--follow"), None, "follow a run in progress: print each event as it is written "
         "(one JSON object a line with --json), and end when the run ends; a finished run is "
         "printed whole"),
    )  # fmt: skip
    add_options(
        made["ls"],
        (("directory",), "DIR", "where the records are (default: $XDG_STATE_HOME/tether/runs, "
         "where tether run writes them)"),
        (("--reason",), "R", _REASON_HELP, {"action": "append", "default": []}),
        (("--since",), "WHEN", "only runs started within the last WHEN (30m, 12h, 7d) or since an "
         "ISO date/time (2024-05-01, 2024-05-01T12:00; local time unless it has an offset)"),
        (("--until",), "WHEN", "only runs started at or before WHEN: a duration ago (1h: started "
         "more than an hour ago) or an ISO date/time, as --since"),
        (("-n", "--count"), "N", "only the newest N runs that pass the filters (those in progress "
         "first)"),
        (("--label",), "PATTERN", "only runs whose label matches (shell pattern: eval-*)"),
        (("--json",), None, "print a JSON array of the runs: those in progress, then the records"),
    )  # fmt: skip
    add_options(
        made["prune"],
        (("directory",), "DIR", "the records directory (default: $XDG_STATE_HOME/tether/runs)"),
        (("--older-than",), "DUR", "remove runs that started longer ago than DUR (7d, 12h; "
         "default: TETHER_KEEP_DAYS)"),
        (("--keep",), "N", "keep at most the newest N runs (default: TETHER_KEEP_RUNS)"),
        (("--dry-run",), None, "say what would be removed, and remove nothing"),
    )  # fmt: skip


def _never_a_traceback(command: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """Run a review subcommand with a lenient stdout; a bug in it is one line and status 125."""

    @functools.wraps(command)
    def guarded(args: argparse.Namespace) -> int:
        _lenient_stdout()
        try:
            return command(args)
        except Exception as error:
            from tether.review import describe_unexpected

            fail(f"{command.__name__}: {describe_unexpected(error)}")

    return guarded


def _lenient_stdout() -> None:
    """Let stdout write any character, as an escape if its encoding lacks it (``LANG=C``)."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


@_never_a_traceback
def show(args: argparse.Namespace) -> int:
    from tether import review
    from tether.shared.record_file import RecordError

    if (args.path is None) == (not args.last):
        fail("show: give one RUN (a path, a name from tether ls, a label) or --last")
    try:
        directory: Path | None = default_records_dir()
    except RecordError as error:
        if args.last:
            fail(str(error))
        directory = None
    if args.follow:
        return _follow(args, directory)
    try:
        if args.last:
            assert directory is not None
            path, notes = review.find_last(directory), list[str]()
        else:
            path, notes = review.find_run(args.path, directory)
        run = review.load_run(path)
    except review.ReviewError as error:
        fail(str(error))
    for note in notes:
        warn(note)
    for message in ([run.record_note] if run.record_note else []) + run.warnings:
        warn(message)
    if args.json:
        return print_out(review.run_as_json(run))
    colour = review.use_colour(sys.stdout)
    return print_out(review.render_run(run, colour=colour, all_steps=args.all))


def _follow(args: argparse.Namespace, directory: Path | None) -> int:
    import json

    from tether.review import ReviewError, find_newest, find_run, printable_path
    from tether.review.follow import follow, format_event

    try:
        if args.last:
            assert directory is not None
            path, notes = find_newest(directory), list[str]()
        else:
            path, notes = find_run(args.path, directory)
    except ReviewError as error:
        fail(str(error))
    for note in notes:
        warn(note)
    origin: list[float] = []

    def emit(event: Mapping[str, object]) -> None:
        text = json.dumps(event) + "\n" if args.json else format_event(event, origin) + "\n"
        status = print_out(text)
        if status:
            raise SystemExit(status)

    try:
        followed = follow(path, emit)
    except ReviewError as error:
        fail(str(error))
    except KeyboardInterrupt:
        return 130
    if followed.skipped:
        warn(f"{followed.skipped} line(s) of the event log were not events, and were skipped")
    if followed.lost:
        lost = "the run's supervisor is gone and left no record"
        warn(f"{printable_path(path)}: {lost} (a lost run: tether show it for what is known)")
    return 0


def _records_directory(given: str | None) -> Path | None:
    """The directory given, or the default one; ``None`` (said) if no run was recorded yet."""
    from tether.review import printable_path
    from tether.shared.record_file import RecordError

    if given:
        return Path(given)
    try:
        directory = default_records_dir()
    except RecordError as error:
        fail(str(error))
    if not os.path.lexists(directory):
        warn(f"no runs recorded yet ({printable_path(directory)} does not exist)")
        return None
    return directory


@_never_a_traceback
def ls(args: argparse.Namespace) -> int:
    from tether import review

    try:
        filters = review.Filters(
            reasons=review.parse_reasons(args.reason),
            since=None if args.since is None else review.parse_since(args.since),
            label=args.label,
            until=None if args.until is None else review.parse_since(args.until, flag="--until"),
        )
        count = None if args.count is None else review.parse_count(args.count)
    except review.ReviewError as error:
        fail(str(error))
    directory = _records_directory(args.directory)
    if directory is None:
        return print_out("[]\n") if args.json else 0
    shown = review.printable_path(directory)
    if os.path.lexists(directory) and not os.path.isdir(directory):
        fail(f"{shown}: not a directory (tether show FILE shows one run)")
    try:
        listing = review.scan(directory)
    except review.ReviewError as error:
        fail(str(error))
    for problem in listing.skipped:
        warn(f"skipped {problem}")
    for log in listing.orphan_logs:
        note = "an event log without its record (tether show it to see what happened)"
        warn(f"{review.printable_path(log)}: {note}")
    rows = review.select(listing.records, filters)
    current = review.select(listing.in_progress, filters)
    if count is not None:
        current = current[:count]
        rows = rows[: count - len(current)]
    if args.json:
        return print_out(review.rows_as_json(rows, current))
    if not rows and not current:
        anything = listing.records or listing.in_progress
        warn(f"no runs {'match' if anything else 'are recorded'} in {shown}")
        return 0
    colour = review.use_colour(sys.stdout)
    tables = []
    if current:
        tables.append(review.render_progress_table(current, directory=directory, colour=colour))
    if rows:
        tables.append(review.render_table(rows, directory=directory, colour=colour))
    return print_out("\n".join(tables))


def _remove_stale_cgroups() -> None:
    """Remove the empty cgroups lost supervisors left (tether's naming only); say how many."""
    from tether.linux.run_cgroups import remove_stale_everywhere

    removed = remove_stale_everywhere()
    if removed:
        places = ", ".join(sorted(set(removed)))
        warn(f"removed {len(removed)} stale cgroup(s) of lost supervisors in {places}")


@_never_a_traceback
def prune(args: argparse.Namespace) -> int:
    from tether.core.durations import DurationError, parse_duration
    from tether.core.numbers import shown as shown_number
    from tether.core.numbers import whole_number
    from tether.review import printable_path
    from tether.shared.retention import prune as prune_directory
    from tether.shared.retention import retention_from

    retention, problems = retention_from(os.environ)
    for problem in problems:
        warn(f"{problem}; using the default")
    if args.keep is not None:
        keep = whole_number(args.keep)
        if keep is None:
            fail(f"--keep: not a whole number >= 0: {shown_number(args.keep)}")
        retention = retention.replace(runs=keep)
    if args.older_than is not None:
        try:
            retention = retention.replace(
                seconds=parse_duration(args.older_than, flag="--older-than")
            )
        except DurationError as error:
            fail(str(error))
    if not args.dry_run:
        _remove_stale_cgroups()
    directory = _records_directory(args.directory)
    if directory is None:
        return 0
    shown = printable_path(directory)
    try:
        pruned = prune_directory(directory, retention, dry_run=args.dry_run)
    except OSError as error:
        if os.path.islink(directory):
            fail(f"{shown}: a symbolic link (give the directory it points to)")
        fail(f"{shown}: {error.strerror or error}")
    verb = "would remove" if args.dry_run else "removed"
    runs = "run" if len(pruned.records) == 1 else "runs"
    warn(f"{verb} {len(pruned.records)} {runs} ({pruned.files} files) from {shown}")
    return print_out("".join(f"{name}\n" for name in pruned.records)) if pruned.records else 0

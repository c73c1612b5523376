"""Records from many nodes, in one directory on the driver, for ``tether ls`` and ``tether show``
(docs/cluster.md, "One directory, many nodes").
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final, Protocol

from tether.core.redaction import Redactor, secret_values_from
from tether.shared.paths import EVENTS_SUFFIX, default_records_dir, events_path_for, new_record_name
from tether.shared.record_document import record_keys
from tether.shared.record_file import (
    RECORD_SCHEMA_VERSION,
    RecordError,
    read_record,
    write_evidence,
    write_record,
)

__all__ = ["NodeRecord", "collect_records", "write_records"]

#: A record name kept as it came: what tether itself names records, nothing that climbs.
_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.json")

#: How many records one node returns at most (newest first by name): a bound on the reply.
MAX_RECORDS_PER_NODE: Final = 1000


class Gathered(Protocol):
    """Anything :func:`write_records` takes: a record, perhaps its event log, and its name."""

    @property
    def record(self) -> dict[str, object] | None: ...

    @property
    def events(self) -> bytes | None: ...

    @property
    def record_name(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One record read on a node by :func:`collect_records`."""

    hostname: str
    node_id: str | None
    record_name: str
    record: dict[str, object] = field(repr=False)
    events: bytes | None = field(default=None, repr=False)


def write_records(runs: Iterable[Gathered], directory: str | os.PathLike[str]) -> list[Path]:
    """Write each run's record (and event log) into ``directory``; the paths written, in order
    (docs/cluster.md); :class:`~tether.shared.record_file.RecordError` if it cannot hold them."""
    target = Path(directory)
    redactor = Redactor(secret_values_from(os.environ, ()), own_keys=record_keys())
    written: list[Path] = []
    for run in runs:
        record = run.record
        if not isinstance(record, dict) or record.get("schema_version") != RECORD_SCHEMA_VERSION:
            continue
        path = _free_path(target, run.record_name, redactor.redact(record))
        if path is None:  # already gathered
            continue
        write_record(path, record, redactor=redactor)
        if isinstance(run.events, bytes):
            write_evidence(events_path_for(path), _redacted_events(run.events, redactor))
        written.append(path)
    return written


def _redacted_events(data: bytes, redactor: Redactor) -> bytes:
    """An event log from another node, redacted line by line with the driver's secrets (as the
    supervisor's writer does; a line that is not a JSON object, as text)."""
    lines = []
    for raw in data.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            event = None
        if isinstance(event, dict):
            lines.append(json.dumps(redactor(None, "", event)))
        else:
            lines.append(redactor.scrub(raw))
    return "".join(f"{line}\n" for line in lines).encode()


def _free_path(directory: Path, name: str | None, document: object) -> Path | None:
    """Where to write record ``name``: there if free and safe, else renamed; ``None``: done."""
    if name is None or not _SAFE_NAME.fullmatch(name) or name.endswith(EVENTS_SUFFIX):
        return directory / new_record_name()
    path = directory / name
    if not os.path.lexists(path):
        return path
    try:
        if read_record(path) == document:
            return None
    except RecordError:
        pass
    return directory / new_record_name()


def collect_records(
    directory: str | os.PathLike[str] | None = None,
    *,
    label: str | None = None,
    since: datetime | None = None,
    events: bool = False,
    timeout: float = 60.0,
) -> list[NodeRecord]:
    """Read the records in ``directory`` (as the nodes see it) on every live node of the Ray
    cluster, on the driver; the arguments: docs/cluster.md. ``timeout``: ``GetTimeoutError``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    reader = ray.remote(num_cpus=0, max_retries=0)(_records_here)
    folder = None if directory is None else os.fspath(directory)
    replies = [
        reader.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(folder, label, since, events)
        for node in ray.nodes()
        if node.get("Alive")
    ]
    return [record for reply in ray.get(replies, timeout=timeout) for record in reply]


def _records_here(
    directory: str | None, label: str | None, since: datetime | None, events: bool
) -> list[NodeRecord]:
    """On one node: its records in ``directory`` that pass the filters (a Ray task's body)."""
    from tether.ray.task import read_event_log, this_node_id

    try:
        folder = default_records_dir() if directory is None else Path(directory)
        names = sorted(
            (e.name for e in os.scandir(folder) if _is_record_name(e.name)), reverse=True
        )
    except OSError:  # RecordError among them: a node with no home has no default directory
        return []
    hostname, node = os.uname().nodename, this_node_id()
    found: list[NodeRecord] = []
    for name in names:
        if len(found) >= MAX_RECORDS_PER_NODE:
            break
        path = folder / name
        try:
            record = read_record(path)
        except RecordError:
            continue
        if not _admitted(record, label, since):
            continue
        log = read_event_log(events_path_for(path)) if events else None
        found.append(NodeRecord(hostname, node, name, record, log))
    return found


def _is_record_name(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".") and not name.endswith(EVENTS_SUFFIX)


def _admitted(record: dict[str, Any], label: str | None, since: datetime | None) -> bool:
    if label is not None:
        variant = record.get("variant")
        if not isinstance(variant, str) or not fnmatchcase(variant, label):
            return False
    if since is not None:
        try:
            started = datetime.fromisoformat(str(record.get("started_at")))
            return started.tzinfo is not None and started >= since
        except ValueError:
            return False
    return True

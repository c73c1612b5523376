"""tether for Ray: each task's command stops with its task, and its evidence comes home.

``pip install 'tether[ray]'``. Inside a Ray task or actor, :func:`run` (or
:func:`run_async` in an async actor) runs one command under tether with the
task's resources as limits on its tree, captures its output, and returns a
:class:`RayRun`: the :class:`~tether.Outcome` plus the record (and, if asked,
the event log) read on the node, as data. :func:`remote` is the same as a
ready-made Ray remote function. On the driver, :func:`collect_records`
fetches the records of tasks that never returned (cancelled, worker lost) from
every node, and :func:`write_records` writes gathered records into one
directory for ``tether ls`` and ``tether show``. See ``docs/cluster.md``.

Neither this package nor ``import tether`` imports Ray; the functions that
need it import it when called.
"""

from tether.ray.gather import NodeRecord, collect_records, write_records
from tether.ray.task import LimitPolicy, RayRun, mapped_limits, remote, run, run_async

__all__ = [
    "LimitPolicy",
    "NodeRecord",
    "RayRun",
    "collect_records",
    "mapped_limits",
    "remote",
    "run",
    "run_async",
    "write_records",
]

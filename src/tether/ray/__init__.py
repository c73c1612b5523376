"""tether for Ray (``pip install 'tether[ray]'``): each task's command stops with its task, and
its evidence comes home: :func:`run`, :func:`remote` in a task, :func:`collect_records` and
:func:`write_records` on the driver. Ray is imported only when a function needs it. See
docs/cluster.md.
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

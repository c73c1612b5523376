"""tether for Ray (``pip install 'tether[ray]'``): each task's command stops with its task, and
its evidence comes home (docs/cluster.md). Ray is imported only when a function needs it.
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

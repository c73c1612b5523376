"""The tree finished off and reaped once the core asks for the record; what is left to count.

In this order: the last group SIGKILL while the leader is unreaped, the leader reaped (its
reaped status wins) and then every orphan, the cgroup's account read, the cgroup removed
(docs/containment.md, "Stopping, step by step").
"""

from __future__ import annotations

import signal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from tether.shared.record_document import ResourceUsage
    from tether.supervisor.process_tree import ProcessTree, Report

__all__ = ["Remains", "finish_off"]


class Remains:
    """What the record counts of a tree that is gone: the return code, the usage, the limits."""

    __slots__ = ("limits_enforced_by", "returncode", "tree_usage", "usage")

    def __init__(self, returncode: int | None) -> None:
        self.returncode = returncode
        #: The leader's own resource usage, from its reaping.
        self.usage: ResourceUsage | None = None
        #: The whole tree's account, from its cgroup.
        self.tree_usage: dict[str, int | float | None] | None = None
        #: Each limit and what enforced it (``cgroup2``, ``cgroup1``, ``systemd-scope``).
        self.limits_enforced_by: dict[str, str] | None = None


def finish_off(
    tree: ProcessTree | None,
    returncode: int | None,
    *,
    exited: bool,
    emptied: bool,
    report: Report,
) -> Remains:
    """Kill what is left, reap the leader (its reaped status wins) and the rest, read the account,
    remove the cgroup."""
    remains = Remains(returncode)
    if tree is None:
        return remains
    if not emptied:
        # The last group-wide signal goes out while the leader is unreaped.
        tree.signal(signal.SIGKILL)
    reaped, remains.usage = tree.reap_leader(block=exited)
    if reaped is not None:
        remains.returncode = reaped
    tree.reap_adopted()
    if tree.cgroup is not None:
        # The whole tree's account, read once it is all gone and before its cgroup is.
        remains.tree_usage = tree.cgroup.usage()
        remains.limits_enforced_by = dict(tree.cgroup.enforced_by) or None
    if not tree.release():
        assert tree.cgroup is not None
        cgroups = tree.cgroup
        report("cgroup_left", path=cgroups.directory, paths=cgroups.directories)
    return remains

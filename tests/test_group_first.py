"""The group's signal first, the walk after it: what the signal reached is counted all the same.

When a stop is certain, the supervisor signals the command's group before
its core is fed and before it walks ``/proc``
(:meth:`ProcessTree.signal_group`); the walk that follows
(:meth:`ProcessTree.signal` with ``group=False``) signals the rest of the tree
and counts what the group's signal reached, the members already dead of it
included: they are zombies until the supervisor reaps them, which it does not
do in between. A small script plays the supervisor (a child subreaper) and
waits, without racing, until the group has died of SIGKILL before it walks:
the worst case for the count.
"""

from __future__ import annotations

from conftest import BOUND, SMALL_TREE_SCRIPT, Processes

#: The script: a leader in a group of its own, one member of that group and one
#: child that left it with ``setsid()``. The group is SIGKILLed first; once the
#: leader and the member are zombies (the member re-parented to the script),
#: the tree is walked and signalled, twice. Answers in one JSON line; everything
#: is reaped before the script ends.
SCRIPT = (
    SMALL_TREE_SCRIPT
    + """

tree = ProcessTree(leader=leader, pgid=leader, pidfd=os.pidfd_open(leader))
answers = {"sent": tree.signal_group(signal.SIGKILL)}
# Dead, not reaped: the leader is this script's child; the member is once the
# leader is gone (its children move here before it becomes a zombie).
os.waitid(os.P_PID, leader, os.WEXITED | os.WNOWAIT)
os.waitid(os.P_PID, member, os.WEXITED | os.WNOWAIT)
answers["reached"] = tree.signal(signal.SIGKILL, group=False)
os.waitid(os.P_PID, escapee, os.WEXITED | os.WNOWAIT)
answers["reached_again"] = tree.signal(signal.SIGCONT, group=False)
answers["stopped"] = sorted(tree.stopped)
answers["outside_group"] = sorted(tree.outside_group)
for pid in (leader, member, escapee):
    os.waitpid(pid, 0)
print(json.dumps(answers), flush=True)
"""
)


def test_the_members_the_groups_signal_killed_before_the_walk_are_counted(
    processes: Processes,
) -> None:
    script, (leader, member, escapee), answers = processes.small_tree(SCRIPT)
    assert answers["sent"] is True
    # The leader and its member, zombies already, and the escapee, signalled now.
    assert answers["reached"] == 3
    # A zombie outside the group was not reached by the group's signal: not counted.
    assert answers["reached_again"] == 2
    assert answers["stopped"] == sorted([member, escapee])
    assert answers["outside_group"] == [escapee]
    assert leader not in answers["stopped"]
    _out, err = script.communicate(timeout=BOUND)
    assert script.returncode == 0, err.decode()

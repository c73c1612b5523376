"""The walk of the command's tree (``ProcessTree``), driven by a small script that plays the
supervisor (a child subreaper), so that each case is exercised without racing for its window.

**What the group's signal reached is counted.** When a stop is certain, the supervisor signals
the command's group before its core is fed and before it walks ``/proc``
(:meth:`ProcessTree.signal_group`); the walk that follows (:meth:`ProcessTree.signal` with
``group=False``) signals the rest of the tree and counts what the group's signal reached, the
members already dead of it included: they are zombies until the supervisor reaps them, which it
does not do in between. The script waits until the group has died of SIGKILL before it walks:
the worst case for the count.

**A process a walk missed gets the same signals, found late.** A walk is not atomic: when the
group's signal goes out first (the sentry acts before the loop runs), a process whose parent
dies mid-walk moves to the supervisor after the walk read it, and is missed. Before
:meth:`ProcessTree.catch_up` such a process lived on until the grace ran out and SIGKILL found
it, and the run was recorded as escalated (the flake CI showed once in
``test_escapees_are_stopped_when_the_caller_is_sigkilled``).
"""

from __future__ import annotations

from conftest import BOUND, SMALL_TREE_SCRIPT, Processes, alive, wait_gone

#: The script: a leader in a group of its own with one member of that group
#: and one child that left it with ``setsid()``; then two trees over them, one
#: that signalled everything (SIGCONT, harmless) and one fresh. Answers in one
#: JSON line; the tree is SIGKILLed and reaped before the script ends.
CATCH_UP_SCRIPT = (
    SMALL_TREE_SCRIPT
    + """

reports = []
def report(event, /, **fields):
    reports.append([event, fields])

def tree():
    return ProcessTree(leader=leader, pgid=leader, pidfd=os.pidfd_open(leader), report=report)

reached = tree()
reached.signal(signal.SIGCONT)
answers = {"after_a_walk": reached.catch_up([signal.SIGTERM, signal.SIGCONT])}
missed = tree()
answers["missed"] = missed.catch_up([signal.SIGTERM, signal.SIGCONT])
answers["again"] = missed.catch_up([signal.SIGTERM, signal.SIGCONT])
answers["stopped"] = sorted(missed.stopped)
answers["outside_group"] = sorted(missed.outside_group)
answers["reports"] = reports
print(json.dumps(answers), flush=True)
sys.stdin.readline()  # the test has looked at the tree
os.killpg(leader, signal.SIGKILL)
os.kill(escapee, signal.SIGKILL)
os.waitpid(leader, 0)
"""
)


def test_a_process_outside_the_group_that_no_walk_reached_gets_the_signals(
    processes: Processes,
) -> None:
    script, (leader, member, escapee), answers = processes.small_tree(CATCH_UP_SCRIPT)
    # What a walk reached, itself or through the group, is left alone.
    assert answers["after_a_walk"] == 0
    # The setsid child no walk reached gets SIGTERM (it dies of it); the group's
    # member and the leader were reached by the group's signal and get nothing.
    assert answers["missed"] == 1
    assert answers["again"] == 0
    assert answers["stopped"] == [escapee]
    assert answers["outside_group"] == [escapee]
    assert answers["reports"] == [
        ["signals_caught_up", {"processes": 1, "signals": ["SIGTERM", "SIGCONT"]}]
    ]
    assert wait_gone(escapee)
    assert alive(leader)
    assert alive(member)
    assert script.stdin is not None
    script.stdin.write(b"done\n")
    _out, err = script.communicate(timeout=BOUND)
    assert script.returncode == 0, err.decode()


#: The script: a leader in a group of its own, one member of that group and one
#: child that left it with ``setsid()``. The group is SIGKILLed first; once the
#: leader and the member are zombies (the member re-parented to the script),
#: the tree is walked and signalled, twice. Answers in one JSON line; everything
#: is reaped before the script ends.
COUNT_SCRIPT = (
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
    script, (leader, member, escapee), answers = processes.small_tree(COUNT_SCRIPT)
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

"""A process a walk missed while the tree stopped gets the same signals, found late.

The supervisor walks ``/proc`` to signal what left the command's group. A walk
is not atomic: when the group's signal goes out first (the sentry acts before
the loop runs), a process whose parent dies mid-walk moves to the supervisor
after the walk read it, and is missed. Before :meth:`ProcessTree.catch_up`
such a process lived on until the grace ran out and SIGKILL found it, and the
run was recorded as escalated (the flake CI showed once in
``test_escapees_are_stopped_when_the_caller_is_sigkilled``). These tests drive
a real tree below a small script that plays the supervisor (a child
subreaper), so the catch-up is exercised without racing for the window.
"""

from __future__ import annotations

from conftest import BOUND, SMALL_TREE_SCRIPT, Processes, alive, wait_gone

#: The script: a leader in a group of its own with one member of that group
#: and one child that left it with ``setsid()``; then two trees over them, one
#: that signalled everything (SIGCONT, harmless) and one fresh. Answers in one
#: JSON line; the tree is SIGKILLed and reaped before the script ends.
SCRIPT = (
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
    script, (leader, member, escapee), answers = processes.small_tree(SCRIPT)
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

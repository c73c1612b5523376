"""The core: tether's policy, pure.

Everything here is values and decisions: the run's machine (a ``transitions``
table behind tether's own facade), the events it is fed and the effects it
answers with, the reasons a run ends and the statuses each door reports, the
durations people write, the run's spec and the redaction of secrets. Nothing
here touches the operating system or reads a clock: time comes in with the
events. That is what lets the tests replay a five-hour run with a fake clock
and feed the machine random event sequences (``tests/test_core_purity.py``
keeps the rule, on the whole package).
"""

"""The supervisor's side of a run: the process that watches one command and stops it.

In the order a run needs them: :mod:`.detach` (becoming a detached process),
:mod:`.launch` (what must happen before the command starts, and nothing more),
:mod:`.command` (starting it), :mod:`.loop` (the adapter around the core),
:mod:`.containment` (finding, signalling and reaping the tree) and
:mod:`.event_log` (the story, through a private structlog logger). It never
imports the caller's side.

``python -m tether.supervisor`` is the seed door (:mod:`tether.cli.seed`).
"""

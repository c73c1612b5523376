"""The supervisor's side of a run: the process that watches one command and stops it.

Its modules in a run's order are in docs/architecture.md ("Layers"); it never imports the
caller's side. ``python -m tether.supervisor`` is the seed door (:mod:`tether.cli.seed`).
"""

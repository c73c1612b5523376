"""The caller's side of a run: everything that runs inside the process that asks for it.

Standard library only, never ``transitions``, ``structlog`` or the supervisor's side
(docs/architecture.md, "Layers").
"""

"""What both sides of a run use, the caller's and the supervisor's: the standard library and
the core only (docs/architecture.md, "Layers").
"""

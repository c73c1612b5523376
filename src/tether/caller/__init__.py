"""The caller's side of a run: everything that runs inside the process that asks for it.

Building and checking the request (:mod:`.request`), starting the detached
supervisor and holding the lifeline (:mod:`.start`), the one client of the
status pipe (:mod:`.status`), and what a caller must do itself when the
supervisor is lost (:mod:`.fallback`). This code runs inside *your* program, so
it imports the standard library only, and never ``transitions`` or
``structlog``; it never imports the supervisor's side either (the tests check
both).
"""

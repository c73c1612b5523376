"""What both sides of a run use: the caller's side and the supervisor's.

The channels (:mod:`.lifeline`, :mod:`.protocol`), record paths and files (:mod:`.paths`,
:mod:`.record_document`, :mod:`.record_file`), the clocks (:mod:`.clock`); the standard
library and the core only (docs/architecture.md, "Layers").
"""

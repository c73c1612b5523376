"""What both sides of a run use: the caller's side and the supervisor's.

The lifeline's bytes (:mod:`.lifeline`) and the status channel's messages
(:mod:`.protocol`), where records
live by default (:mod:`.paths`), the record's document (:mod:`.record_document`)
and the private, atomic file it is written to (:mod:`.record_file`), and the
clock conversions both sides need (:mod:`.clock`). Only the standard library
and the core are imported here, cheaply: the caller's side must never pay for
``transitions`` or ``structlog``.
"""

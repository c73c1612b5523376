"""The redactor of one run, built the same way by every writer: supervisor and caller alike.

Whatever tether writes about a run (the record, the event log, a record the
caller writes itself after losing its supervisor) is scrubbed of the same
secrets: the values of the secret-looking variables of the caller's
environment *and* of the environment given to the command (``env=`` replaces
the command's, not the caller's: both may hold credentials), and the
credential-shaped words of the command line and of the label. The record's
field names are the redactor's own keys
(:func:`~tether.shared.record_document.record_keys`), so a secret can never
break the record's shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.core.redaction import Redactor, secret_values_from
from tether.core.spec import RunSpec
from tether.shared.record_document import record_keys

__all__ = ["redactor_for"]


def redactor_for(spec: RunSpec, environ: Mapping[str, str]) -> Redactor:
    """The redactor for ``spec``'s files; ``environ`` is the caller's own environment.

    The label is read for secrets as a command line is (``deploy API_TOKEN=...``),
    on its own: it is written into the record, and people type it like argv.
    """
    secrets = secret_values_from(environ, spec.argv)
    if spec.env is not None:
        secrets |= secret_values_from(spec.env, ())
    if spec.label:
        secrets |= secret_values_from({}, (spec.label,))
    return Redactor(secrets, own_keys=record_keys())

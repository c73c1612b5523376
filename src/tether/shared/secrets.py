"""The redactor of one run, built the same way by every writer, supervisor and caller alike;
read once per zygote (docs/architecture.md, "Why some mechanisms are built as they are").
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.core.redaction import Redactor, secret_values_from
from tether.core.spec import RunSpec
from tether.shared.record_document import record_keys

#: The last environment read for secrets, and the secret values it holds (one at most).
_last_read: list[tuple[dict[str, str], frozenset[str]]] = []


def redactor_for(spec: RunSpec, environ: Mapping[str, str]) -> Redactor:
    """The redactor for ``spec``'s files (its label read as a command line), ``environ``'s."""
    secrets = _environment_secrets(environ) | secret_values_from({}, spec.argv)
    if spec.env is not None:
        secrets |= secret_values_from(spec.env, ())
    if spec.label:
        secrets |= secret_values_from({}, (spec.label,))
    return Redactor(secrets, own_keys=record_keys())


def prepare(environ: Mapping[str, str]) -> Redactor:
    """Read now what every run's redactor needs for callers with ``environ`` (for the zygote)."""
    return Redactor(_environment_secrets(environ), own_keys=record_keys())


def _environment_secrets(environ: Mapping[str, str]) -> frozenset[str]:
    """The secret values of ``environ``, read again only when it differs from the last one."""
    snapshot = dict(environ)
    for environment, secrets in _last_read:
        if environment == snapshot:
            return secrets
    secrets = secret_values_from(snapshot, ())
    _last_read[:] = [(snapshot, secrets)]
    return secrets

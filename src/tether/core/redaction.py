"""Keep the caller's secrets out of everything tether writes down (the record, the event log):
docs/operators.md, "What redaction does". Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from enum import Enum

from tether.core.values import DeclaredValue

# A dataclass instance is redacted with the ``dataclasses`` that made its class.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, MutableMapping, Sequence
    from typing import Any, Final

#: Words that make a key (a mapping key, an environment variable name, a flag) secret-looking.
SECRET_KEY_WORDS: Final = tuple(
    ["token", "secret", "password", "passwd", "passphrase", "key", "credential", "auth", "cookie"]
)

#: Name endings secret-looking as a word of their own (``MYSQL_PWD``, ``SMTP_PASS``, ``pass``),
#: never as substrings: ``PWD`` is the working directory, ``COMPASS`` holds no secret.
SECRET_KEY_ENDINGS: Final[tuple[str, ...]] = ("pwd", "pass")

_ENDING_RE: Final = re.compile(
    r"(?:^pass|[_.-](?:" + "|".join(SECRET_KEY_ENDINGS) + r"))$", re.IGNORECASE
)

#: What a secret is replaced with.
REDACTED: Final = "[redacted]"

#: Literal values shorter than this are never scrubbed (``1`` or ``yes`` everywhere would
#: destroy the log without protecting anything).
MIN_SECRET_LENGTH: Final = 4

_MAX_DEPTH: Final = 64
_MAX_PASSES: Final = 8

# Credential shapes. Each alternative matches the secret itself; where the
# secret follows a prefix that must survive (``Bearer ``, ``scheme://user:``),
# the prefix is captured in a group named ``keep_*`` and written back.
_SHAPES: Final = "|".join(
    (
        # OpenAI / Anthropic style: sk-..., sk-proj-..., sk-ant-api03-...
        r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}",
        # GitHub personal, OAuth, user-to-server, server and refresh tokens
        r"(?<![A-Za-z0-9_])(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}",
        r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{20,}",
        # AWS access key ids (long-term and temporary)
        r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
        # Slack bot, app, user, refresh and legacy tokens
        r"(?<![A-Za-z0-9])xox[baprs]-[A-Za-z0-9-]{10,}",
        # JSON Web Tokens: base64url("{...") . base64url("{...") . signature
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*",
        # HTTP bearer credentials: keep the scheme word, drop the token
        r"(?P<keep_bearer>(?<![A-Za-z])(?i:bearer)\s+)[A-Za-z0-9._~+/-]{8,}=*",
        # URL userinfo: keep scheme://user:, drop the password (not an earlier marker)
        r"(?P<keep_url>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)"
        r"(?!" + re.escape(REDACTED) + r"@)[^/\s?#]+(?=@)",
    )
)
_SHAPE_RE: Final = re.compile(_SHAPES)
_KEEP_GROUPS: Final = ("keep_bearer", "keep_url")

_ASSIGNMENT_RE: Final = re.compile(r"-{0,2}([A-Za-z_][A-Za-z0-9_.-]*)=(.*)", re.DOTALL)
_HEADER_RE: Final = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)[ \t]*:[ \t]*(.+)", re.DOTALL)
_FLAG_RE: Final = re.compile(r"-{1,2}[A-Za-z][A-Za-z0-9_.-]*")
_QUOTES: Final = "\"'"
_SHELL_PUNCTUATION: Final = "\"'`;&|()"


def is_secret_key(name: str) -> bool:
    """Whether a key, variable or flag name looks like it holds a secret (any case): it holds
    one of :data:`SECRET_KEY_WORDS`, or ends in one of :data:`SECRET_KEY_ENDINGS`."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_KEY_WORDS) or bool(_ENDING_RE.search(name))


def secret_values_from(environ: Mapping[str, str], argv: Sequence[str]) -> frozenset[str]:
    """The literal values to scrub for a run with this environment and argv (docs/operators.md);
    a word with whitespace in it (an ``sh -c`` script) is also read as words."""
    found = set(_environ_secrets(environ))
    for words in _word_sequences(argv):
        found.update(_argv_secrets(words))
    return frozenset(value for value in found if len(value) >= MIN_SECRET_LENGTH)


def _environ_secrets(environ: Mapping[str, str]) -> Iterator[str]:
    for name, value in environ.items():
        if is_secret_key(name):
            yield value
        yield from _shape_secrets(value)


def _word_sequences(argv: Sequence[str]) -> Iterator[Sequence[str]]:
    """argv itself, then each whitespace-containing word split into words."""
    yield argv
    for word in argv:
        if any(char.isspace() for char in word):
            yield [piece.strip(_SHELL_PUNCTUATION) for piece in word.split()]


def _argv_secrets(words: Sequence[str]) -> Iterator[str]:
    after_secret_flag = False
    for word in words:
        if after_secret_flag and not word.startswith("--"):
            yield word
        after_secret_flag = _is_secret_flag(word)
        yield from _named_value(word)
        yield from _shape_secrets(word)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` for a record that keeps it (``--record-argv``): the values it names as secret
    (``--password VALUE``, ``NAME=VALUE``, ``Name: VALUE``) replaced, however short."""
    words: list[str] = []
    after_secret_flag = False
    for word in argv:
        if after_secret_flag and not word.startswith("--"):
            words.append(REDACTED)
        else:
            words.append(_without_named_value(word))
        after_secret_flag = _is_secret_flag(word)
    return words


def _without_named_value(word: str) -> str:
    for pattern in (_ASSIGNMENT_RE, _HEADER_RE):
        match = pattern.fullmatch(word)
        if match is not None and is_secret_key(match.group(1)):
            return word[: match.start(2)] + REDACTED
    return word


def _is_secret_flag(word: str) -> bool:
    return _FLAG_RE.fullmatch(word) is not None and is_secret_key(word.lstrip("-"))


def _named_value(word: str) -> Iterator[str]:
    """The value of ``NAME=VALUE`` or ``Name: VALUE`` when NAME looks secret."""
    for pattern in (_ASSIGNMENT_RE, _HEADER_RE):
        match = pattern.fullmatch(word)
        if match is not None and is_secret_key(match.group(1)):
            value = match.group(2)
            yield value
            yield value.strip().strip(_QUOTES)


def _shape_secrets(text: str) -> Iterator[str]:
    for match in _SHAPE_RE.finditer(text):
        yield match.group(0)[len(_kept_prefix(match)) :]


def _kept_prefix(match: re.Match[str]) -> str:
    for group in _KEEP_GROUPS:
        prefix = match.group(group)
        if prefix is not None:
            return prefix
    return ""


def _replace(match: re.Match[str]) -> str:
    return _kept_prefix(match) + REDACTED


def _describe(value: object) -> str:
    """A string for a value JSON cannot carry, so it is scrubbed, not repr()'d later."""
    return f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else str(value)


@functools.lru_cache(maxsize=16)
def _pattern_for(literals: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for ``literals`` and the credential shapes: a zygote's forks find it compiled."""
    return re.compile("|".join([*(re.escape(value) for value in literals), _SHAPES]))


class Redactor:
    """Scrubs secrets out of values on their way to a file; also a structlog processor.
    ``own_keys``: the field names of the documents it redacts (the record's), never scrubbed,
    so the document keeps its shape; a log line's own keys are its top-level ones."""

    __slots__ = ("_own_keys", "_pattern")

    def __init__(
        self, secret_values: Iterable[str] = (), *, own_keys: frozenset[str] = frozenset()
    ) -> None:
        literals = sorted({value for value in secret_values if value}, key=lambda v: (-len(v), v))
        self._pattern = _pattern_for(tuple(literals))
        self._own_keys = own_keys

    def __call__(
        self, logger: object, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> dict[str, Any]:
        """structlog processor: the event dict, redacted (its own keys kept as they are)."""
        return self._redact_mapping(event_dict, 0, own=frozenset(event_dict))

    def redact(self, value: object) -> object:
        """``value`` with every secret replaced, recursively, as JSON types (a value: a dict)."""
        return self._redact(value, 0)

    def scrub(self, text: str) -> str:
        """``text`` with every literal secret and credential shape replaced."""
        if self._pattern.search(text) is None:
            return text
        for _ in range(_MAX_PASSES):
            text = self._pattern.sub(_replace, text)
            if self._pattern.search(text) is None:
                return text
        return REDACTED

    def _redact(self, value: object, depth: int) -> object:
        if depth > _MAX_DEPTH:
            return REDACTED
        if isinstance(value, str):
            return self.scrub(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, Mapping):
            return self._redact_mapping(value, depth)
        if isinstance(value, list | tuple | set | frozenset):
            return self._redact_collection(value, depth)
        return self._redact_other(value, depth)

    def _redact_mapping(
        self, mapping: Mapping[Any, object], depth: int, own: frozenset[str] = frozenset()
    ) -> dict[Any, Any]:
        redacted: dict[Any, Any] = {}
        for key, item in mapping.items():
            if not isinstance(key, str):
                redacted[key] = self._redact(item, depth + 1)
                continue
            shown = key if key in own or key in self._own_keys else self.scrub(key)
            redacted[shown] = REDACTED if is_secret_key(key) else self._redact(item, depth + 1)
        return redacted

    def _redact_collection(
        self, items: list[object] | tuple[object, ...] | set[object] | frozenset[object], depth: int
    ) -> object:
        redacted = [self._redact(item, depth + 1) for item in items]
        return tuple(redacted) if isinstance(items, tuple) else redacted

    def _redact_other(self, value: object, depth: int) -> object:
        if isinstance(value, bytes | bytearray):
            return self.scrub(bytes(value).decode("utf-8", "backslashreplace"))
        if isinstance(value, Enum):
            return self._redact(value.value, depth + 1)
        if isinstance(value, DeclaredValue):
            return self._redact_mapping(value.as_dict(), depth)
        if hasattr(type(value), "__dataclass_fields__") and not isinstance(value, type):
            from dataclasses import fields

            shown = fields(value)  # type: ignore[arg-type]  # a dataclass instance, as checked
            as_mapping = {field.name: getattr(value, field.name) for field in shown}
            return self._redact_mapping(as_mapping, depth)
        return self.scrub(_describe(value))

"""The lifeline's bytes: what a caller writes on it, and how its supervisor reads them.

One byte is a request or a signal to pass on; end of file is the caller's death. Encoder and
decoder live together so they cannot drift apart. Two vocabularies: :data:`BASIC` (the seed
door's pipe) and :data:`ALL` (tether's own callers). Why, and the bounds:
``docs/architecture.md``, "Channels".
"""

from __future__ import annotations

from tether.shared.signals import signal_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

__all__ = [
    "ALL",
    "BASIC",
    "CANCEL",
    "KILL_NOW",
    "PASS_ON_BASE",
    "RESUME",
    "SUSPEND",
    "TIME_OUT",
    "LifelineDecoder",
    "Vocabulary",
    "pass_on_request",
]

CANCEL: Final = b"c"
KILL_NOW: Final = b"k"
#: Time is up now (``timeout`` got SIGALRM, its own timer): the deadline, at once.
TIME_OUT: Final = b"t"
#: The caller was stopped (Ctrl-Z) or continued (``fg``): stop or continue the tree.
SUSPEND: Final = b"z"
RESUME: Final = b"r"
#: A signal to pass on to the tree is one byte too: this plus its number (1 to 64).
PASS_ON_BASE: Final = 0x80


def pass_on_request(number: int) -> bytes:
    """The one byte (never split between two reads) that asks to pass signal ``number`` on."""
    if not 0 < number < 0x80:
        raise ValueError(f"no request for signal {number}")
    return bytes((PASS_ON_BASE + number,))


#: How many repeatable requests (job control, signals to pass on) are told one
#: by one, in the log, the record and the status channel; the rest are counted.
TOLD_REQUESTS: Final = 64


_EVERY_BYTE: Final = bytes(range(256))


class Vocabulary:
    """A set of request bytes, and the table that strips every other byte in C."""

    __slots__ = ("name", "requests", "strip")

    def __init__(self, name: str, requests: frozenset[int]) -> None:
        self.name = name
        self.requests = requests
        self.strip = _EVERY_BYTE.translate(None, bytes(requests))

    def __repr__(self) -> str:
        return f"Vocabulary({self.name!r})"


#: Requests that mean the same however often they come.
_ONCE: Final = frozenset((CANCEL[0], KILL_NOW[0], TIME_OUT[0]))
_JOB_CONTROL: Final = frozenset((SUSPEND[0], RESUME[0]))
_PASS_ON: Final = frozenset(PASS_ON_BASE + n for n in range(1, 65) if signal_name(str(n)))

BASIC: Final = Vocabulary("basic", frozenset((CANCEL[0], KILL_NOW[0])))
ALL: Final = Vocabulary("all", _ONCE | _JOB_CONTROL | _PASS_ON)


class LifelineDecoder:
    """What came over one lifeline: requests to act on, and counts of the rest."""

    __slots__ = (
        "_told_report_at",
        "_unknown_report_at",
        "heard",
        "told",
        "unknown",
        "untold",
        "vocabulary",
    )

    def __init__(self, vocabulary: Vocabulary = ALL) -> None:
        self.vocabulary = vocabulary
        self.heard: set[int] = set()
        self.unknown = 0  # bytes that were no request in this vocabulary
        #: Repeatable requests told one by one so far, and those acted on but only counted.
        self.told = 0
        self.untold = 0
        self._unknown_report_at = 1
        self._told_report_at = 1

    def decode(self, data: bytes) -> list[bytes]:
        """The requests in ``data`` to act on, in order, each once; of ``z``/``r`` the later."""
        requests = data.translate(None, self.vocabulary.strip)
        self.unknown += len(data) - len(requests)
        if not requests:
            return []
        present = set(requests)
        job_control = present & _JOB_CONTROL
        if len(job_control) == 2:
            present.discard(min(job_control, key=requests.rfind))  # the earlier of the two
        fresh = present - self.heard
        self.heard |= fresh & _ONCE

        def position(byte: int) -> int:
            return requests.rfind(byte) if byte in _JOB_CONTROL else requests.find(byte)

        return [bytes((byte,)) for byte in sorted(fresh, key=position)]

    def tell(self, request: bytes) -> bool:
        """Whether to tell ``request`` one by one (log, record, status); else it is counted."""
        if request[0] in _ONCE:
            return True
        if self.told < TOLD_REQUESTS:
            self.told += 1
            return True
        self.untold += 1
        return False

    def unknown_report_due(self) -> bool:
        """Whether the count of unknown bytes reached its next report (1, 2, 4, 8...)."""
        due = self.unknown >= self._unknown_report_at
        if due:
            self._unknown_report_at = 2 * self.unknown
        return due

    def untold_report_due(self) -> bool:
        """Whether the count of untold requests reached its next report (1, 2, 4, 8...)."""
        due = self.untold >= self._told_report_at
        if due:
            self._told_report_at = 2 * self.untold
        return due

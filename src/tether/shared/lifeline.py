"""The lifeline's bytes: what a caller writes on it, and how its supervisor reads them.

**The lifeline** (caller to supervisor) is a Unix socket pair
(:mod:`tether.shared.protocol` says why not a pipe). The caller holds its end
and never shares it. Its end of file is the one message a dead caller can
still send, whatever killed it, SIGKILL included: the kernel closes the
caller's end when the last holder exits. One byte on it is a request:
:data:`CANCEL` (stop gracefully), :data:`KILL_NOW`, :data:`TIME_OUT`,
:data:`SUSPEND` and :data:`RESUME` (job control), or a signal to pass on
(:func:`pass_on_request`). A request on the lifeline tells *cancelled* apart
from *caller lost* without signalling a pid that may have been reused.

The encoder (those bytes) and the decoder live together here, so that what
one side writes and the other reads cannot drift apart. Whatever arrives on a
lifeline — a caller's requests, a buggy worker's junk written to the wrong
descriptor, a million job-control requests — the supervisor must stay able to
act on end of file at once and keep its event log short. So:

* a chunk is decoded in bulk, in C (``bytes.translate``, ``set``,
  ``rfind``), never byte by byte in Python: the work per byte is bounded;
* a chunk yields each request at most once, and of the job-control pair
  (:data:`SUSPEND`, :data:`RESUME`) only the last, which is where the caller
  left the tree: a turn of the loop costs a few dozen events however much came;
* :data:`CANCEL`, :data:`KILL_NOW` and :data:`TIME_OUT` are heard once each
  (a second one would change nothing);
* what is not told one by one is counted, and the counts reported on a
  doubling scale (when they first reach 1, 2, 4, 8...): a gigabyte costs the
  log a few dozen lines, and the first line still says at once that
  something odd is coming.

Two vocabularies: :data:`BASIC` (end of file, ``c`` and ``k``: the seed
interface's own, for a pipe nobody is meant to write to) and :data:`ALL`
(also ``t``, ``z``, ``r`` and signals to pass on: for tether's own callers,
whose lifeline is a socket pair tether made, and for a seed-door worker that
asks with ``--all-lifeline-requests``). In the basic vocabulary every other
byte is junk, counted and otherwise ignored.

Pure and stdlib only: every caller writes with it, and both the sentry and the
loop read with it. A caller loads it before its launch, so its tables are built
in C, not byte by byte.
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
    """The lifeline byte that asks to pass signal ``number`` on to the tree.

    One byte, so that a request can never be split between two reads.
    """
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


BASIC: Final = Vocabulary("basic", frozenset((CANCEL[0], KILL_NOW[0])))
ALL: Final = Vocabulary(
    "all",
    frozenset(
        (
            *(byte[0] for byte in (CANCEL, KILL_NOW, TIME_OUT, SUSPEND, RESUME)),
            *(PASS_ON_BASE + number for number in range(1, 65) if signal_name(str(number))),
        )
    ),
)

#: Requests that mean the same however often they come.
_ONCE: Final = frozenset((CANCEL[0], KILL_NOW[0], TIME_OUT[0]))
_JOB_CONTROL: Final = frozenset((SUSPEND[0], RESUME[0]))


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
        #: How many bytes were no request (in this vocabulary).
        self.unknown = 0
        #: Repeatable requests told one by one so far, and those acted on but only counted.
        self.told = 0
        self.untold = 0
        self._unknown_report_at = 1
        self._told_report_at = 1

    def decode(self, data: bytes) -> list[bytes]:
        """The requests in ``data`` to act on, in the order they came; count the rest.

        Each at most once per call; of ``z`` and ``r`` only the later one.
        """
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
        """Whether the count of unknown bytes reached the next report since the last one."""
        if self.unknown < self._unknown_report_at:
            return False
        self._unknown_report_at = 2 * self.unknown
        return True

    def untold_report_due(self) -> bool:
        """Whether the count of untold requests reached the next report since the last one."""
        if self.untold < self._told_report_at:
            return False
        self._told_report_at = 2 * self.untold
        return True

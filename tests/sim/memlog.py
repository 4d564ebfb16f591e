"""In-memory DLedger-like log for the simulation: a durable prefix and an unsynced tail.

Rules
-----
- Implements :class:`dledger.core.log.LogView` (DLedger indexes: first 0, empty => -1).
- ``write`` truncates durably (the core's contract: a truncation is durable no later than any
  entry written after it) and appends unsynced entries; ``flush`` makes everything durable.
- ``crash`` keeps only the durable prefix (a machine crash losing the page cache).
- The hard state has a single durable copy: the driver persists it synchronously (fsync)
  before sending messages, so a crash can only lose a hard state the node never acted on.
- ``hashes[i]`` is a chained hash of entries ``0..i`` (term and data), used by the checker for
  log matching and committed-prefix comparisons in O(1).
- ``begin`` models DLedger's ``ledger_begin_index``: ``compact(i)`` (retention) moves it past
  committed entries, ``reset(first, prefix)`` (a follower behind the leader's begin) drops the
  whole log and begins it at ``first``.  Indexes stay absolute: below ``begin`` the lists hold
  placeholders whose hashes are the committed chain's, so the checker's prefix comparisons
  still work; the core can no longer read them (``term_at``/``get_raw`` assert).
"""
from __future__ import annotations

from dledger.core.ready import HardState


class MemLog:
    def __init__(self) -> None:
        self.terms: list[int] = []
        self.datas: list[bytes] = []
        self.hashes: list[int] = []
        self.durable = 0                 # number of durable entries
        self.hard = HardState()
        self.begin = 0

    # ---- LogView
    @property
    def ledger_begin_index(self) -> int:
        return self.begin if len(self.terms) > self.begin else -1

    @property
    def ledger_end_index(self) -> int:
        return len(self.terms) - 1

    @property
    def ledger_end_term(self) -> int:
        return self.terms[-1] if self.terms else -1

    def term_at(self, index: int) -> int:
        assert index >= self.begin, (index, self.begin)
        return self.terms[index]

    def get_raw(self, lo: int, hi: int, max_bytes: int) -> list[bytes]:
        assert lo >= self.begin, (lo, self.begin)
        out: list[bytes] = []
        size = 0
        for i in range(lo, hi + 1):
            d = self.datas[i]
            if out and size + len(d) > max_bytes:
                break
            out.append(d)
            size += len(d)
        return out

    # ---- driver side
    def truncate(self, from_index: int) -> None:
        assert from_index >= self.begin, (from_index, self.begin)
        del self.terms[from_index:]
        del self.datas[from_index:]
        del self.hashes[from_index:]
        self.durable = min(self.durable, from_index)

    def append(self, index: int, term: int, data: bytes) -> None:
        assert index == len(self.terms), (index, len(self.terms))
        prev = self.hashes[-1] if self.hashes else 0
        self.terms.append(term)
        self.datas.append(data)
        self.hashes.append(hash((prev, term, data)))

    def compact(self, upto: int) -> None:
        """Retention: entries ``<= upto`` (committed, durable, not the last) leave the log."""
        assert upto < min(self.durable, len(self.terms)) - 1
        self.begin = max(self.begin, upto + 1)

    def reset(self, first: int, prefix_hashes: list[int]) -> None:
        """Begin reset: drop everything, the next append is ``first`` (durable below it)."""
        self.terms = [-1] * first
        self.datas = [b""] * first
        self.hashes = list(prefix_hashes[:first])
        assert len(self.hashes) == first, "reset below the committed chain"
        self.begin = self.durable = first

    def flush(self) -> None:
        self.durable = len(self.terms)

    def crash(self) -> None:
        self.truncate(self.durable)

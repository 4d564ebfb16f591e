"""The core's view of its log: the driver's read-only store plus what it has not yet written.

Rules
-----
- The store is reached only through :class:`LogView` (read-only, implemented by the driver: the
  DLedger file store in the server, an in-memory list in the simulation).  Indexes are DLedger's:
  first index 0, empty log => begin = end = -1 and end term = -1; ``get_raw(lo, hi, max_bytes)``
  returns the encoded entries ``lo..hi`` *inclusive*, stopping before the one that would exceed
  ``max_bytes`` but always returning at least one entry.
- The core keeps in memory only (a) ``unstable``: entries accepted from a leader but not yet
  handed to the driver in a ``Ready`` (etcd-raft's unstable, minus what the driver has already
  written), with a pending ``truncate_from``; and (b) :class:`TermRuns`, one ``(first_index,
  term)`` pair per term present in the log, so every term lookup is O(log #terms) and never
  touches storage after start-up.
- Terms never decrease along a log (Raft), which is what makes both the run-length table and its
  start-up construction by binary search (O(#terms x log n) ``term_at`` calls) correct.
- ``persisted`` (the flushed index reported by the driver) is clamped on truncation;
  ``committed`` never decreases and never exceeds ``persisted``.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Optional, Protocol, runtime_checkable

from dledger.core.messages import Entry


@runtime_checkable
class LogView(Protocol):
    """Read-only access to the driver's log store (see module rules for semantics)."""

    @property
    def ledger_begin_index(self) -> int: ...

    @property
    def ledger_end_index(self) -> int: ...

    @property
    def ledger_end_term(self) -> int: ...

    def term_at(self, index: int) -> int: ...

    def get_raw(self, lo: int, hi: int, max_bytes: int) -> list[bytes]: ...


class TermRuns:
    """Run-length table of the terms in ``[begin, last]``: ``starts[k]`` begins ``terms[k]``."""

    __slots__ = ("begin", "last", "starts", "terms")

    def __init__(self, begin: int) -> None:
        self.begin = begin          # first index held (the store's ledger_begin_index, or 0)
        self.last = begin - 1
        self.starts: list[int] = []
        self.terms: list[int] = []

    @classmethod
    def from_view(cls, view: LogView) -> "TermRuns":
        begin, end = view.ledger_begin_index, view.ledger_end_index
        runs = cls(max(begin, 0))
        i = runs.begin
        while i <= end:
            t = view.term_at(i)
            lo, hi = i, end           # last index in [i, end] whose term is t
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if view.term_at(mid) == t:
                    lo = mid
                else:
                    hi = mid - 1
            runs.starts.append(i)
            runs.terms.append(t)
            i = lo + 1
        runs.last = max(end, runs.begin - 1)
        return runs

    def term(self, index: int) -> Optional[int]:
        """Term at ``index``; -1 for index -1; None when outside ``[begin, last]``."""
        if index == -1:
            return -1
        if index < self.begin or index > self.last:
            return None
        return self.terms[bisect_right(self.starts, index) - 1]

    @property
    def last_term(self) -> int:
        return self.terms[-1] if self.terms else -1

    def append(self, index: int, term: int) -> None:
        assert index == self.last + 1, (index, self.last)
        if not self.terms or self.terms[-1] != term:
            assert not self.terms or term > self.terms[-1], "terms must not decrease"
            self.starts.append(index)
            self.terms.append(term)
        self.last = index

    def append_run(self, first: int, count: int, term: int) -> None:
        if count > 0:
            self.append(first, term)
            self.last = first + count - 1

    def truncate(self, from_index: int) -> None:
        """Drop every index >= from_index."""
        if from_index > self.last:
            return
        k = bisect_right(self.starts, from_index - 1)
        del self.starts[k:]
        del self.terms[k:]
        self.last = max(from_index - 1, self.begin - 1)

    def last_le(self, index: int, term: int) -> int:
        """Largest i <= index held here with term(i) <= term (begin-1 if none)."""
        index = min(index, self.last)
        k = bisect_right(self.terms, term) - 1
        if k < 0 or index < self.begin:
            return self.begin - 1
        end_k = self.starts[k + 1] - 1 if k + 1 < len(self.starts) else self.last
        return min(index, end_k)


class RaftLog:
    """LogView + unstable tail + term table + persisted/committed watermarks."""

    def __init__(self, view: LogView, committed_hint: int = -1) -> None:
        self.view = view
        self.runs = TermRuns.from_view(view)
        self.unstable: list[Entry] = []
        self.truncate_from: Optional[int] = None
        self.persisted = self.runs.last        # whatever recovered from disk is durable
        self.committed = min(committed_hint, self.persisted)
        self.reset_from: Optional[int] = None  # pending begin reset for the driver

    # ---- queries
    @property
    def last_index(self) -> int:
        return self.runs.last

    @property
    def last_term(self) -> int:
        return self.runs.last_term

    @property
    def begin_index(self) -> int:
        """First index held: the run table's, or later if the driver's store has since
        dropped leading files (retention)."""
        vb = self.view.ledger_begin_index
        return vb if vb > self.runs.begin and self.reset_from is None else self.runs.begin

    def term(self, index: int) -> Optional[int]:
        if 0 <= index < self.view.ledger_begin_index and self.reset_from is None:
            return None  # retention removed it under us
        return self.runs.term(index)

    def matches(self, index: int, term: int) -> bool:
        return self.runs.term(index) == term

    def up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: is (last_index, last_term) at least as up to date as this log?"""
        lt = self.last_term
        return last_term > lt or (last_term == lt and last_index >= self.last_index)

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """Entries lo..hi (inclusive) for sending, from the store or the unstable tail."""
        hi = min(hi, self.last_index)
        if lo > hi:
            return []
        out: list[Entry] = []
        stored_last = self.unstable[0].index - 1 if self.unstable else self.last_index
        if lo <= stored_last:
            raws = self.view.get_raw(lo, min(hi, stored_last), max_bytes)
            term = self.runs.term
            out = [Entry(lo + i, term(lo + i), raw) for i, raw in enumerate(raws)]  # type: ignore[arg-type]
            if len(out) < min(hi, stored_last) - lo + 1:
                return out
            max_bytes -= sum(len(e.data) for e in out)
        for e in self.unstable:
            if e.index < lo or e.index > hi:
                continue
            if out and len(e.data) > max_bytes:
                break
            out.append(e)
            max_bytes -= len(e.data)
        return out

    # ---- mutations
    def append_leader(self, first: int, count: int, term: int) -> None:
        """The driver appended ``count`` entries itself (leader path)."""
        self.runs.append_run(first, count, term)

    def append_follower(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Append entries received from the leader; the first may overwrite a conflicting tail."""
        if not entries:
            return
        first = entries[0].index
        if first <= self.last_index:
            self._truncate(first)
        for e in entries:
            self.runs.append(e.index, e.term)
        self.unstable.extend(entries)

    def reset_begin(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Discard the whole log; it now begins with ``entries`` (the leader's first ones).

        Everything below ``entries[0].index`` counts as committed and durable (the leader's
        log starts there, so it was committed); the driver is told through ``reset_from``.
        """
        first = entries[0].index
        if first <= self.committed:
            raise AssertionError(f"begin reset at {first} below the commit index {self.committed}")
        self.runs = TermRuns(first)
        for e in entries:
            self.runs.append(e.index, e.term)
        self.unstable = list(entries)
        self.truncate_from = None
        self.reset_from = first
        self.persisted = first - 1
        self.committed = first - 1

    def _truncate(self, from_index: int) -> None:
        if from_index <= self.committed:
            raise AssertionError(f"truncating committed index {from_index} "
                                 f"(committed {self.committed})")
        stored_last = self.unstable[0].index - 1 if self.unstable else self.last_index
        if from_index <= stored_last:
            self.truncate_from = from_index if self.truncate_from is None else min(
                self.truncate_from, from_index)
            self.unstable = []
        else:
            self.unstable = [e for e in self.unstable if e.index < from_index]
        self.runs.truncate(from_index)
        self.persisted = min(self.persisted, from_index - 1)

    def take_unstable(self) -> tuple[Optional[int], list[Entry]]:
        tr, ents = self.truncate_from, self.unstable
        self.truncate_from, self.unstable = None, []
        return tr, ents

    def take_reset(self) -> Optional[int]:
        rf, self.reset_from = self.reset_from, None
        return rf

    def persisted_to(self, index: int, term: int) -> bool:
        """Driver flushed through (index, term); ignored if stale (term mismatch). True if moved."""
        index = min(index, self.last_index)
        if index <= self.persisted or self.runs.term(index) != term:
            return False
        self.persisted = index
        return True

    def commit_to(self, index: int) -> bool:
        index = min(index, self.persisted)
        if index <= self.committed:
            return False
        self.committed = index
        return True

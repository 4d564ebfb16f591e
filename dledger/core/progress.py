"""Leader-side view of each follower: etcd-raft's Progress, in two states, with in-flight limits.

Rules
-----
- ``match``: highest index the follower has acknowledged as persisted *and* matching; it never
  decreases within a term.  ``next``: the next index to send.
- PROBE: the leader does not know where the follower's log diverges.  It sends one AppendRequest
  and pauses (``probe_sent``) until an answer or the next heartbeat tick.  A rejection moves
  ``next`` back using the follower's hint (fast back-off, one round trip per term, not per entry)
  -- DLedger's COMPARE/TRUNCATE states collapse into this.
- REPLICATE: the follower is known to match up to ``match``; the leader streams batches
  optimistically (``next`` advances on send), at most ``max_inflight`` unacknowledged batches
  and never more than ``max_batch_bytes`` per batch -- DLedger's APPEND state with its
  1000-in-flight window.  A rejection, or no acknowledgement for ``push_timeout_ticks`` while
  batches are outstanding (lost messages), drops back to PROBE at ``match + 1``.
- ``recent_active`` feeds check-quorum; it is reset by the leader every election timeout.
- Reject hint (Raft's ``RejectHint``, applied to a lost log): every rejection carries the
  follower's ``last_index``.  A ``last_index`` below ``match`` means the follower no longer
  holds entries it acknowledged (its store was moved away, the recovery that
  ``EntryCorruptionError`` prescribes); ``match`` is then unknown again: it drops to -1 and the
  peer is probed from ``min(hint, last_index) + 1`` in either state (``hint_resets`` counts
  it).  Lowering ``match`` never lowers the commit index (commits only move forward) and a
  stale, reordered rejection costs one extra probe at most.  Without this the leader kept
  ``match`` and re-probed at ``match`` forever: the follower stayed empty.
- Begin reset: a follower whose next index lies below the leader's first index (begin index
  after retention, or an upgraded store whose log starts at ``dividedCommitlogOffset``) is sent
  a ``begin`` request (``begin_resets`` counts them), DLedger's TRUNCATE to the leader's first
  entry.

Transitions as data: ``_ON_REJECT[state]`` handles a rejection; acknowledgements always land in
REPLICATE.
"""
from __future__ import annotations

import enum
from collections import deque
from typing import Callable


class PState(enum.Enum):
    PROBE = "PROBE"
    REPLICATE = "REPLICATE"


class Progress:
    __slots__ = ("match", "next", "state", "probe_sent", "inflight", "recent_active",
                 "idle_ticks", "hint_resets", "begin_resets")

    def __init__(self, next_index: int) -> None:
        self.match = -1
        self.next = next_index
        self.state = PState.PROBE
        self.probe_sent = False
        self.inflight: deque[int] = deque()   # last index of each unacknowledged batch
        self.recent_active = False
        self.idle_ticks = 0                   # ticks since the last ack while inflight
        self.hint_resets = 0                  # rejections that showed a log shorter than match
        self.begin_resets = 0                 # begin requests sent (peer behind our begin)

    def become_probe(self) -> None:
        self.state = PState.PROBE
        self.next = self.match + 1
        self.probe_sent = False
        self.inflight.clear()
        self.idle_ticks = 0

    def become_replicate(self) -> None:
        self.state = PState.REPLICATE
        self.next = max(self.next, self.match + 1)
        self.probe_sent = False
        self.inflight.clear()
        self.idle_ticks = 0

    def paused(self, max_inflight: int) -> bool:
        if self.state is PState.PROBE:
            return self.probe_sent
        return len(self.inflight) >= max_inflight

    def sent(self, last_index: int, n_entries: int) -> None:
        """Record an AppendRequest whose last entry is ``last_index`` (n_entries may be 0)."""
        if self.state is PState.REPLICATE:
            if n_entries:
                self.next = last_index + 1
                self.inflight.append(last_index)
        else:
            self.probe_sent = True

    def acked(self, match: int) -> bool:
        """Success response with ``match``.  Returns True if anything moved."""
        moved = match > self.match
        if moved:
            self.match = match
            self.idle_ticks = 0
        self.next = max(self.next, match + 1)
        if self.state is PState.PROBE:
            self.become_replicate()
            return True
        while self.inflight and self.inflight[0] <= match:
            self.inflight.popleft()
        return moved

    def rejected(self, reject_index: int, next_hint: int, last_index: int | None = None) -> bool:
        """Rejection of the request whose prev_index was ``reject_index``.

        ``next_hint`` is where the leader's own log says to resume; ``last_index`` is the
        follower's ledger end.  Returns False if the rejection is stale (answers an older
        request).  A ``last_index`` below ``match`` resets the progress (module rules).
        """
        if last_index is not None and last_index < self.match:
            self.match = -1
            self.become_probe()
            self.next = max(min(next_hint, last_index + 1), 0)
            self.hint_resets += 1
            return True
        return _ON_REJECT[self.state](self, reject_index, next_hint)

    def __repr__(self) -> str:
        return (f"Progress({self.state.value} match={self.match} next={self.next} "
                f"inflight={len(self.inflight)})")


def _reject_replicate(pr: Progress, reject_index: int, next_hint: int) -> bool:
    if reject_index <= pr.match:
        return False
    pr.become_probe()
    return True


def _reject_probe(pr: Progress, reject_index: int, next_hint: int) -> bool:
    if pr.next - 1 != reject_index:
        return False
    pr.next = max(min(reject_index, next_hint), pr.match + 1)
    pr.probe_sent = False
    return True


_ON_REJECT: dict[PState, Callable[[Progress, int, int], bool]] = {
    PState.PROBE: _reject_probe,
    PState.REPLICATE: _reject_replicate,
}


def quorum_index(own: int, matches: list[int], quorum: int) -> int:
    """Highest index persisted by at least ``quorum`` members (own flushed index included)."""
    allm = sorted([own, *matches], reverse=True)
    return allm[quorum - 1]

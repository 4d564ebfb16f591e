"""What the core hands to its driver: ``Ready`` batches, decisions, completions and status.

Rules (the driver contract)
---------------------------
The driver loop is::

    feed inputs (step / tick / propose / on_persisted / transfer_leadership)
    rd = core.ready()                      # only if core.has_ready()
    0. if rd.reset_begin is not None: discard the WHOLE log; rd.entries start at that index
       (the leader's begin index) and at the leader's position: the log now begins there
    1. if rd.truncate_from is not None: delete entries >= rd.truncate_from from the store
    2. append rd.entries to the store (bytes as received; flushing may happen later)
    3. if rd.append_barrier: append ONE entry at (rd.append_barrier.first_index,
       rd.append_barrier.term) with a body of the driver's choice
    4. if rd.hard_state: persist it DURABLY (fsync) -- before step 5
    5. send rd.messages
    6. apply rd.committed_index, deliver rd.completions, react to rd.role_change
    core.advance(rd)

and, whenever the store has flushed (at any later time, any number of times):
``core.on_persisted(flushed_index, term_at(flushed_index))``.

- No input may be fed between ``ready()`` and ``advance()`` (the core raises RuntimeError).
- A truncation must be durable no later than any entry written after it.
- A follower acknowledges only flushed entries; a leader counts only its flushed index in the
  quorum, so losing unflushed data in a crash never loses a commit.  The commit index of every
  node is <= its flushed index.

Leader append path (driver first, then core; all synchronous, nothing in between)::

    d = core.propose(count)            # AppendDecision
    if d.code is Code.SUCCESS:
        store.append_as_leader(...)    # exactly `count` entries, indexes d.first_index..
                                       # d.last_index, all with term d.term (hooks run here)
    else: answer the client with d.code (and d.leader_id as redirect hint)
    if the store write fails: core.abandon_proposal(d) at once (before any ready()), which
                               takes the indexes back, and answer the client with the error

The proposal then completes through ``Ready.completions``: one :class:`Completion` per
proposal (a batch completes once, when its last entry commits), with SUCCESS, or
WAIT_QUORUM_ACK_TIMEOUT after ``max_wait_ack_ticks``, or NOT_LEADER when this node stops being
leader (the entries may still commit under a later leader: outcome unknown to the client).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from dledger.core.codes import Code, Role
from dledger.core.messages import Entry, Message


@dataclass(frozen=True, slots=True)
class HardState:
    """Persisted before any message that depends on it is sent (DLedger's ``currterm`` file)."""

    term: int = 0
    vote: Optional[str] = None


@dataclass(frozen=True, slots=True)
class AppendDecision:
    """Answer to :meth:`RaftCore.propose` (and the barrier request in ``Ready``).

    On SUCCESS the driver must append ``count`` entries at ``first_index..last_index`` with
    ``term``.  Otherwise ``code`` is NOT_LEADER (``leader_id`` = redirect hint or None),
    LEADER_TRANSFERRING, LEADER_PENDING_FULL, LEADER_NOT_READY or UNEXPECTED_ARGUMENT.
    """

    code: Code
    first_index: int = -1
    count: int = 0
    term: int = -1
    leader_id: Optional[str] = None

    @property
    def last_index(self) -> int:
        return self.first_index + self.count - 1


@dataclass(frozen=True, slots=True)
class Completion:
    """Outcome of one proposal: entries ``first_index..last_index`` proposed in ``term``."""

    first_index: int
    last_index: int
    term: int
    code: Code


@dataclass(frozen=True, slots=True)
class RoleChange:
    role: Role
    term: int
    leader_id: Optional[str]


@dataclass(slots=True)
class Ready:
    hard_state: Optional[HardState] = None
    reset_begin: Optional[int] = None    # follower behind the leader's begin: log restarts here
    truncate_from: Optional[int] = None
    entries: list[Entry] = field(default_factory=list)
    append_barrier: Optional[AppendDecision] = None
    messages: list[Message] = field(default_factory=list)
    committed_index: Optional[int] = None
    completions: list[Completion] = field(default_factory=list)
    role_change: Optional[RoleChange] = None
    # (transferee, SUCCESS | TAKE_LEADERSHIP_FAILED) when a transfer started here ends
    transfer_result: Optional[tuple[str, Code]] = None


@dataclass(frozen=True, slots=True)
class PeerStatus:
    peer: str
    match_index: int
    next_index: int
    lag: int
    state: str           # "PROBE" | "REPLICATE"
    inflight: int
    recent_active: bool
    hint_resets: int = 0      # rejections showing a log shorter than match (store moved away)
    begin_resets: int = 0     # begin requests sent: the peer was behind our begin index
    behind_begin: bool = False  # its next index is below our begin index right now


@dataclass(frozen=True, slots=True)
class Status:
    self_id: str
    role: Role
    term: int
    leader_id: Optional[str]
    vote: Optional[str]
    begin_index: int
    end_index: int
    end_term: int
    committed_index: int
    persisted_index: int
    pending: int
    transferee: Optional[str]
    peers: tuple[PeerStatus, ...]     # leader only; empty otherwise
    dropped_unknown: int              # messages dropped because src/dst is not a member
    begin_resets: int = 0             # follower: log reset to a leader's begin index

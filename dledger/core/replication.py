"""Log replication: the leader's push pipeline and commit rule, the follower's append handling.
Functions over the member's :class:`~dledger.core.state.ReplicationState` (the ``RaftCore``
passes itself; this module does not import it, see ``state.py``).

Rules
-----
Leader
- Entries are pushed per follower according to its :class:`Progress` (PROBE: one request,
  then wait; REPLICATE: up to ``max_inflight`` batches of at most ``max_batch_entries`` entries
  and ``max_batch_bytes`` bytes).  Entries are read from the store through the LogView (the
  driver wrote them in ``propose`` / for the barrier), so nothing is copied into the core.
- A rejection carries the follower's hint ``(hint_index, hint_term)``; the leader resumes after
  the last index of *its own* log with index <= hint_index and term <= hint_term (etcd-raft's
  findConflictByTerm), so a divergent suffix costs one round trip per term.
- Commit (Raft §5.4.2): ``q`` = the quorum-th highest of {own flushed index} U {followers'
  match}; the commit index moves to ``q`` only if ``term_at(q) == current term`` (unless the
  test-only ``unsafe_commit_previous_terms``).  Earlier-term entries commit implicitly with it.
  The commit index never exceeds the leader's own flushed index.
- On commit, completions are emitted for every pending proposal whose last index is committed.

Follower
- ``AppendRequest`` is checked at ``(prev_index, prev_term)``.  Mismatch => reject with a hint.
  Match => the first entry whose term differs from ours (or that we lack) and everything after
  it replace our suffix (DLedger's COMPARE/TRUNCATE); entries we already have are skipped, so
  duplicated and reordered requests are harmless.  Truncating at or below the commit index is a
  safety violation and raises.
- The follower acknowledges ``min(highest index known to match this leader, flushed index)``:
  never an unflushed entry.  If the request's entries are not flushed yet the answer is deferred
  until :meth:`RaftCore.on_persisted` covers them (acks are coalesced).
- Its commit index is ``min(leader commit, last index known to match, flushed index)``.
- A ``begin`` request (the leader's first entries; we are behind its begin index) replaces our
  whole log: it then begins at the leader's begin index and position (DLedger's follower
  ``truncate(entry)``).  Everything we held below it is committed (the leader only starts past
  committed entries), so nothing acknowledged is lost; if we already hold the leader's first
  entry (a repeated request) it is an ordinary append after that entry.

Leader, behind-begin and lost logs
- A follower whose next index is below our begin index gets a ``begin`` request (see
  ``progress.py``); a rejection whose ``last_index`` is below ``match`` resets the follower's
  progress (the follower lost its log).  Both are counted per peer and exported in status.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.core.codes import Code
from dledger.core.messages import AppendRequest, AppendResponse, Entry, TimeoutNow
from dledger.core.progress import PState, quorum_index

if TYPE_CHECKING:  # annotations only: the role code holds no reference to the core's class
    from dledger.core.state import ReplicationState


# --------------------------------------------------------------------------- leader

def send_append(r: ReplicationState, peer: str, allow_empty: bool = False) -> bool:
    """Send the next batch to ``peer`` if its progress allows.  True if a message was sent."""
    pr = r.prs[peer]
    if pr.paused(r.cfg.max_inflight):
        return False
    lo = pr.next
    prev = lo - 1
    prev_term = r.log.term(prev)
    if prev_term is None or lo < r.log.begin_index:
        return _send_begin(r, peer)
    ents: list[Entry] = []
    if lo <= r.sendable_last:
        ents = r.log.entries(lo, min(r.sendable_last, lo + r.cfg.max_batch_entries - 1),
                             r.cfg.max_batch_bytes)
    if not ents and not allow_empty and pr.state is PState.REPLICATE:
        return False
    r.send(AppendRequest(r.id, peer, r.term, prev, prev_term, r.log.committed, tuple(ents)))
    pr.sent(prev + len(ents), len(ents))
    return True


def _send_begin(r: ReplicationState, peer: str) -> bool:
    """The follower needs entries below our begin index (retention, or a log that starts at
    ``dividedCommitlogOffset``): DLedger truncates it to our first entry.  Sent from PROBE
    only (one at a time, like any probe); the answer's ``match`` moves it to REPLICATE."""
    pr = r.prs[peer]
    begin = r.log.begin_index
    if pr.state is not PState.PROBE:
        pr.become_probe()
    pr.next = begin
    if begin > r.sendable_last:
        return False
    ents = r.log.entries(begin, min(r.sendable_last, begin + r.cfg.max_batch_entries - 1),
                         r.cfg.max_batch_bytes)
    r.send(AppendRequest(r.id, peer, r.term, begin - 1, -1, r.log.committed, tuple(ents),
                         begin=True))
    pr.sent(begin - 1 + len(ents), len(ents))
    pr.begin_resets += 1
    return True


def fill_pipeline(r: ReplicationState, peer: str, allow_empty: bool = False) -> None:
    if send_append(r, peer, allow_empty):
        while r.prs[peer].state is PState.REPLICATE and send_append(r, peer):
            pass


def bcast_append(r: ReplicationState, allow_empty: bool = False) -> None:
    for p in r.others:
        fill_pipeline(r, p, allow_empty)


def send_heartbeats(r: ReplicationState) -> None:
    """Heartbeat tick: re-probe paused PROBE peers, time out stuck pipelines, carry commit."""
    for p in r.others:
        pr = r.prs[p]
        if pr.state is PState.REPLICATE and pr.inflight and pr.idle_ticks >= r.cfg.push_timeout_ticks:
            pr.become_probe()
        if pr.state is PState.PROBE:
            pr.probe_sent = False
            fill_pipeline(r, p, allow_empty=True)
            continue
        mt = r.log.term(pr.match)
        if mt is not None:
            r.send(AppendRequest(r.id, p, r.term, pr.match, mt, r.log.committed, ()))
        fill_pipeline(r, p)


def handle_append_response(r: ReplicationState, m: AppendResponse) -> None:
    pr = r.prs[m.src]
    pr.recent_active = True
    if m.success:
        if pr.acked(m.match_index):
            maybe_commit(r)
        maybe_send_timeout_now(r, m.src)
        fill_pipeline(r, m.src)
        return
    # fast back-off: where does our log agree with the follower's hint?
    if m.hint_index >= 0 and m.hint_term >= 0:
        probe = r.log.runs.last_le(m.hint_index, m.hint_term)
    else:
        probe = m.hint_index
    if pr.rejected(m.reject_index, probe + 1, m.last_index):
        fill_pipeline(r, m.src, allow_empty=True)


def maybe_commit(r: ReplicationState) -> bool:
    q = quorum_index(r.log.persisted, [r.prs[p].match for p in r.others], r.cfg.quorum)
    if q <= r.log.committed:
        return False
    if r.log.term(q) != r.term and not r.cfg.unsafe_commit_previous_terms:
        return False
    if not r.log.commit_to(q):
        return False
    r.complete_pending()
    r.need_commit_push = True
    return True


def maybe_send_timeout_now(r: ReplicationState, peer: str) -> None:
    if (r.transferee == peer and not r.timeout_now_sent
            and r.prs[peer].match == r.log.last_index):
        r.send(TimeoutNow(r.id, peer, r.term))
        r.timeout_now_sent = True


# --------------------------------------------------------------------------- follower

def handle_append(r: ReplicationState, m: AppendRequest) -> None:
    log = r.log
    prev_index, prev_term, entries = m.prev_index, m.prev_term, m.entries
    if m.begin:
        first = entries[0]
        if log.term(first.index) == first.term or first.index <= log.committed:
            # we hold the leader's first entry (a stale or repeated begin request): an
            # ordinary append after it; a committed index at or past it cannot be reset
            prev_index, prev_term, entries = first.index, first.term, entries[1:]
        else:
            log.reset_begin(entries)
            r.begin_resets += 1
            _after_match(r, m, prev_index, entries)
            return
    if prev_index <= log.committed:
        # everything up to our commit index is in every later leader's log at the same place
        # (also the index just below a begin-reset log, whose term we no longer hold)
        skip = min(len(entries), log.committed - prev_index)
        entries = entries[skip:]
        prev_index = log.committed
        prev_term = log.term(prev_index)  # type: ignore[assignment]
    elif not log.matches(prev_index, prev_term):
        hint = log.runs.last_le(prev_index, prev_term)
        ht = log.term(hint)
        r.send(AppendResponse(r.id, m.src, r.term, False, reject_index=m.prev_index,
                              hint_index=hint, hint_term=-1 if ht is None else ht,
                              last_index=log.last_index, code=Code.INCONSISTENT_STATE))
        return
    for k, e in enumerate(entries):
        if log.term(e.index) != e.term:
            log.append_follower(entries[k:])
            break
    _after_match(r, m, prev_index, entries)


def _after_match(r: ReplicationState, m: AppendRequest, prev_index: int,
                 entries: "tuple[Entry, ...]") -> None:
    """The log matches the leader's through ``prev_index + len(entries)``: ack and commit."""
    log = r.log
    matched_last = prev_index + len(entries)
    if matched_last > r.ack_target:
        r.ack_target = matched_last
    target = min(m.commit, matched_last)
    if target > r.commit_target:
        r.commit_target = target
    log.commit_to(r.commit_target)
    if not entries or matched_last <= log.persisted:
        send_ack(r, force=True)


def send_ack(r: ReplicationState, force: bool = False) -> None:
    """Acknowledge ``min(ack_target, persisted)`` to the leader if it moved (or if forced)."""
    if r.leader_id is None or r.leader_id == r.id:
        return
    match = min(r.ack_target, r.log.persisted)
    if match > r.ack_sent or force:
        r.ack_sent = max(r.ack_sent, match)
        r.send(AppendResponse(r.id, r.leader_id, r.term, True, match_index=match,
                              last_index=r.log.last_index))

"""Log replication: the leader's push pipeline and commit rule, the follower's append handling.

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
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from dledger.core.codes import Code
from dledger.core.messages import AppendRequest, AppendResponse, Entry, TimeoutNow
from dledger.core.progress import PState, quorum_index

if TYPE_CHECKING:
    from dledger.core.raft import RaftCore


# --------------------------------------------------------------------------- leader

def send_append(r: "RaftCore", peer: str, allow_empty: bool = False) -> bool:
    """Send the next batch to ``peer`` if its progress allows.  True if a message was sent."""
    pr = r.prs[peer]
    if pr.paused(r.cfg.max_inflight):
        return False
    lo = pr.next
    prev = lo - 1
    prev_term = r.log.term(prev)
    if prev_term is None:
        # The follower needs entries below our ledger_begin_index (cleaned files): not
        # supported (no snapshots in DLedger 0.3.1.2).  Fall back to probing from match.
        if pr.match + 1 != lo:
            pr.next = pr.match + 1
        r.stats_unservable += 1
        return False
    ents: list[Entry] = []
    if lo <= r.sendable_last:
        ents = r.log.entries(lo, min(r.sendable_last, lo + r.cfg.max_batch_entries - 1),
                             r.cfg.max_batch_bytes)
    if not ents and not allow_empty and pr.state is PState.REPLICATE:
        return False
    r.send(AppendRequest(r.id, peer, r.term, prev, prev_term, r.log.committed, tuple(ents)))
    pr.sent(prev + len(ents), len(ents))
    return True


def fill_pipeline(r: "RaftCore", peer: str, allow_empty: bool = False) -> None:
    if send_append(r, peer, allow_empty):
        while r.prs[peer].state is PState.REPLICATE and send_append(r, peer):
            pass


def bcast_append(r: "RaftCore", allow_empty: bool = False) -> None:
    for p in r.others:
        fill_pipeline(r, p, allow_empty)


def send_heartbeats(r: "RaftCore") -> None:
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


def handle_append_response(r: "RaftCore", m: AppendResponse) -> None:
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
    if pr.rejected(m.reject_index, probe + 1):
        fill_pipeline(r, m.src, allow_empty=True)


def maybe_commit(r: "RaftCore") -> bool:
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


def maybe_send_timeout_now(r: "RaftCore", peer: str) -> None:
    if (r.transferee == peer and not r.timeout_now_sent
            and r.prs[peer].match == r.log.last_index):
        r.send(TimeoutNow(r.id, peer, r.term))
        r.timeout_now_sent = True


# --------------------------------------------------------------------------- follower

def handle_append(r: "RaftCore", m: AppendRequest) -> None:
    log = r.log
    prev_index, prev_term, entries = m.prev_index, m.prev_term, m.entries
    if prev_index < log.committed:
        # everything up to our commit index is in every later leader's log at the same place
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
    matched_last = prev_index + len(entries)
    if matched_last > r.ack_target:
        r.ack_target = matched_last
    target = min(m.commit, matched_last)
    if target > r.commit_target:
        r.commit_target = target
    log.commit_to(r.commit_target)
    if not entries or matched_last <= log.persisted:
        send_ack(r, force=True)


def send_ack(r: "RaftCore", force: bool = False) -> None:
    """Acknowledge ``min(ack_target, persisted)`` to the leader if it moved (or if forced)."""
    if r.leader_id is None or r.leader_id == r.id:
        return
    match = min(r.ack_target, r.log.persisted)
    if match > r.ack_sent or force:
        r.ack_sent = max(r.ack_sent, match)
        r.send(AppendResponse(r.id, r.leader_id, r.term, True, match_index=match,
                              last_index=r.log.last_index))

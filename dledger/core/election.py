"""Elections: pre-vote, vote, tallying, leader lease.  Functions over the member's
:class:`~dledger.core.state.ElectionState` (the ``RaftCore`` passes itself; this module does not
import it, see ``state.py``).

Rules
-----
- A follower / pre-candidate / candidate whose election timer fires *campaigns*: with
  ``pre_vote`` it first becomes PRE_CANDIDATE and asks ``VoteRequest(pre_vote=True,
  term=term+1)`` without touching its own term or vote; only a quorum of pre-votes lets it
  become CANDIDATE (term+1, vote for itself, persisted before the requests go out).  A
  partitioned node therefore keeps its term, and rejoins without disrupting the group.
- A voter grants a vote if the candidate's log is at least as up to date (Raft §5.4.1:
  (last_term, last_index) compared lexicographically) and, for real votes, it has not voted for
  someone else this term and follows no leader.  Pre-votes are granted to any up-to-date
  candidate with a higher term.  A granted real vote is recorded in the hard state, which the
  driver persists before sending the response (Ready ordering).
- Leader lease (with check_quorum): a node that heard from a leader within
  ``election_ticks_min`` ticks ignores higher-term (pre-)votes, unless ``transfer=True``.
- Boot lease (``Config.boot_lease``, on in the server; issue 24.6): a node that just started has heard from no leader yet, but one may
  well be alive (its heartbeats need a redial and a round trip to reach us), so for its first
  ``election_ticks_min`` ticks it ignores higher-term (pre-)votes too. Otherwise a restarting
  (or wiped, hence maximally behind) follower is the one vote another follower needs to depose a
  leader that merely stalled for an election timeout -- what made 2 of 4 wiped-follower restarts
  elect a new leader. Refusing a vote is always safe; members started together lose nothing (no
  timer fires before ``election_ticks_min``), one started alone at most that long.
- Transfer target: :class:`TimeoutNow` from the current leader makes a follower campaign at
  once, skipping pre-vote, with ``transfer=True`` (DLedger's take-leadership).

Tallying is a table: ``_WIN[role]`` is what a quorum of grants does; a quorum of rejections
makes the node a follower of its current term.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from dledger.core.codes import Role, VoteResult
from dledger.core import terms
from dledger.core.messages import VoteRequest, VoteResponse

if TYPE_CHECKING:  # annotations only: the role code holds no reference to the core's class
    from dledger.core.state import ElectionState


def campaign(r: ElectionState, transfer: bool = False) -> None:
    """Election timer fired (or TimeoutNow arrived): pre-vote first unless transferring."""
    if terms.exhausted(r.term):  # term+1 would reach terms.TERM_LIMIT: stay put, report (issue 23.2)
        return
    if r.cfg.pre_vote and not transfer:
        r.become_pre_candidate()
        _request_votes(r, r.term + 1, pre=True, transfer=False)
    else:
        _start_real_vote(r, transfer)


def _request_votes(r: ElectionState, term: int, pre: bool, transfer: bool) -> None:
    if _tally(r):
        return
    last_index, last_term = r.log.last_index, r.log.last_term
    for p in r.others:
        r.send(VoteRequest(r.id, p, term, last_index, last_term, pre_vote=pre, transfer=transfer))


def _start_real_vote(r: ElectionState, transfer: bool = False) -> None:
    r.become_candidate()
    _request_votes(r, r.term, pre=False, transfer=transfer)


def in_lease(r: ElectionState) -> bool:
    """Leader lease, or the boot lease of a node in its first ``election_ticks_min`` ticks."""
    if not r.cfg.check_quorum:
        return False
    if r.leader_id is not None and r.election_elapsed < r.cfg.election_ticks_min:
        return True
    return r.cfg.boot_lease and r.now < r.cfg.election_ticks_min


def handle_vote_request(r: ElectionState, m: VoteRequest) -> None:
    """Called after term handling (so ``m.term >= r.term``, or a stale pre-vote)."""
    result = _judge(r, m)
    granted = result is VoteResult.ACCEPT
    if granted and not m.pre_vote:
        r.vote = m.src
        r.election_elapsed = 0
    term = m.term if (granted and m.pre_vote) else r.term
    r.send(VoteResponse(r.id, m.src, term, granted, pre_vote=m.pre_vote, result=result))


def _judge(r: ElectionState, m: VoteRequest) -> VoteResult:
    if m.term < r.term:
        return VoteResult.REJECT_EXPIRED_VOTE_TERM
    if m.last_term < r.log.last_term:
        return VoteResult.REJECT_EXPIRED_LEDGER_TERM
    if m.last_term == r.log.last_term and m.last_index < r.log.last_index:
        return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    if m.pre_vote:
        return VoteResult.ACCEPT if m.term > r.term else VoteResult.REJECT_ALREADY_HAS_LEADER
    if r.vote == m.src:
        return VoteResult.ACCEPT
    if r.vote is not None:
        return VoteResult.REJECT_ALREADY_VOTED
    if r.leader_id is not None:
        return VoteResult.REJECT_ALREADY_HAS_LEADER
    return VoteResult.ACCEPT


def handle_vote_response(r: ElectionState, m: VoteResponse) -> None:
    if m.pre_vote != (r.role is Role.PRE_CANDIDATE):
        return                                   # answers a phase we have left
    if m.pre_vote and m.granted and m.term != r.term + 1:
        return                                   # answers an older pre-vote round
    r.votes[m.src] = m.granted
    _tally(r)


def _tally(r: ElectionState) -> bool:
    granted = sum(1 for v in r.votes.values() if v)
    rejected = len(r.votes) - granted
    if granted >= r.cfg.quorum:
        _WIN[r.role](r)
        return True
    if rejected >= r.cfg.quorum:
        r.become_follower(r.term, None)
        return True
    return False


_WIN: dict[Role, Callable[[ElectionState], None]] = {
    Role.PRE_CANDIDATE: _start_real_vote,
    Role.CANDIDATE: lambda r: r.become_leader(),
}

"""RaftCore: the deterministic consensus state machine of one DLedger member.

Rules
-----
- Pure: no I/O, no clock, no threads.  Time is ``tick()``; randomness is the seeded
  ``random.Random`` passed in (election timeouts only).  The same inputs in the same order give
  the same outputs, which is what makes the simulation reproducible.
- Inputs: :meth:`step` (a peer message), :meth:`tick`, :meth:`propose` (leader append, see
  ``ready.py`` for the driver-first protocol), :meth:`on_persisted` (the store flushed),
  :meth:`transfer_leadership`, :meth:`campaign`.  Outputs: :meth:`ready` -> :class:`Ready`,
  acknowledged by :meth:`advance`.  The exact driver contract is in ``dledger/core/ready.py``.
- Roles are FOLLOWER, PRE_CANDIDATE, CANDIDATE, LEADER.  Per-role behaviour is looked up in two
  tables, ``_TICK[role]`` and ``_STEP[role]`` (etcd-raft's tickElection/tickHeartbeat and
  stepLeader/stepCandidate/stepFollower); the term rules common to all roles run first in
  :meth:`step`.
- The role code (``election.py``, ``replication.py``) is functions this class passes itself to;
  they see it only through the narrow Protocols of ``state.py``, so this module is the only one
  that imports them and none imports it back (no import circle).

Theory of operation
-------------------
Term rules (every message): a term no honest group reaches (``terms.py``: more than 2^32 ahead,
or at/above 2^62) is dropped and counted first. A higher term makes us a follower of that term -- except
pre-vote requests and granted pre-vote responses (which never change terms), and (pre-)vote
requests arriving while we are in a leader lease (ignored).  A lower-term AppendRequest is
answered with our term (EXPIRED_TERM) so a deposed leader steps down; other lower-term messages
are dropped.

Leader duties per tick: heartbeat every ``heartbeat_ticks`` (which also re-probes and times out
stuck pipelines), check-quorum every ``election_ticks_min`` (step down to follower, same term,
when fewer than a quorum answered), proposal ack timeouts (WAIT_QUORUM_ACK_TIMEOUT), transfer
timeout (TAKE_LEADERSHIP_FAILED), preferred-leader check every ``preferred_check_ticks``.

Proposals: ``propose(count)`` reserves ``count`` indexes in the current term and queues one
pending request (at most ``max_pending``); it completes SUCCESS when its last index commits,
WAIT_QUORUM_ACK_TIMEOUT after ``max_wait_ack_ticks`` (the entries stay in the log and may still
commit), or NOT_LEADER if leadership is lost first.  Pushing the new entries happens in
``ready()``, after the driver has written them, so many proposals share one batch.
"""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, Optional

from dledger.core import election, replication, terms
from dledger.core.codes import Code, Role
from dledger.core.config import Config
from dledger.core.log import LogView, RaftLog
from dledger.core.messages import (AppendRequest, AppendResponse, Message, TimeoutNow,
                                   VoteRequest, VoteResponse)
from dledger.core.progress import Progress
from dledger.core.ready import (AppendDecision, Completion, HardState, PeerStatus, Ready,
                                RoleChange, Status)


class RaftCore:
    def __init__(self, config: Config, log: LogView, rng: random.Random,
                 hard_state: HardState = HardState(), committed_index: int = -1) -> None:
        self.cfg = config
        self.id = config.self_id
        self.others: tuple[str, ...] = tuple(p for p in config.peers if p != config.self_id)
        self._members = frozenset(config.peers)
        self.rng = rng
        self.log = RaftLog(log, committed_index)
        self.term = hard_state.term
        self.vote: Optional[str] = hard_state.vote
        self.role = Role.FOLLOWER
        self.leader_id: Optional[str] = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = 0
        self.votes: dict[str, bool] = {}
        self.prs: dict[str, Progress] = {}
        self.pending: deque[tuple[int, int, int, int]] = deque()  # (first, last, term, deadline)
        self.now = 0
        self.sendable_last = self.log.last_index
        self.need_bcast = False
        self.need_commit_push = False
        self.barrier: Optional[AppendDecision] = None
        self.transferee: Optional[str] = None
        self.transfer_elapsed = 0
        self.timeout_now_sent = False
        self.preferred_elapsed = 0
        # follower acknowledgement state (per term and leader)
        self.ack_target = -1
        self.ack_sent = -1
        self.commit_target = -1
        # output queues
        self._msgs: list[Message] = []
        self._completions: list[Completion] = []
        self._transfer_result: Optional[tuple[str, Code]] = None
        self._hs_reported = HardState(self.term, self.vote)
        self._commit_reported = self.log.committed
        self._role_reported = RoleChange(self.role, self.term, self.leader_id)
        self._outstanding: Optional[Ready] = None
        # counters
        self.dropped_unknown = 0
        self.begin_resets = 0        # follower: times our log was reset to a leader's begin
        self.term_refusals = 0       # messages dropped for an implausible term (terms.py)
        self.last_term_refusal: Optional[tuple[str, str, int, str]] = None  # (src, type, term, reason)
        self._reset_timers()

    # ================================================================== inputs
    def step(self, m: Message) -> None:
        """Feed one peer message (already validated by ``messages.from_dict``)."""
        self._guard()
        if m.src not in self._members or m.dst != self.id or m.src == self.id:
            self.dropped_unknown += 1
            return
        if m.term > self.term:
            why = terms.refused(self.term, m.term)
            if why is not None:
                self.term_refusals += 1
                self.last_term_refusal = (m.src, type(m).__name__, m.term, why)
                return
            if isinstance(m, VoteRequest) and not m.transfer and election.in_lease(self):
                return
            if isinstance(m, VoteRequest) and m.pre_vote:
                pass
            elif isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                pass
            else:
                if self.role is Role.LEADER and self.transferee is not None:
                    ok = m.src == self.transferee
                    self._end_transfer(Code.SUCCESS if ok else Code.TAKE_LEADERSHIP_FAILED)
                leader = m.src if isinstance(m, (AppendRequest, TimeoutNow)) else None
                self.become_follower(m.term, leader)
        elif m.term < self.term:
            if isinstance(m, AppendRequest):
                self.send(AppendResponse(self.id, m.src, self.term, False,
                                         reject_index=m.prev_index, last_index=self.log.last_index,
                                         code=Code.EXPIRED_TERM))
            elif isinstance(m, VoteRequest) and m.pre_vote:
                self.send(VoteResponse(self.id, m.src, self.term, False, pre_vote=True,
                                       result=election.VoteResult.REJECT_EXPIRED_VOTE_TERM))
            return
        if isinstance(m, VoteRequest):
            election.handle_vote_request(self, m)
            return
        _STEP[self.role](self, m)

    def tick(self) -> None:
        self._guard()
        self.now += 1
        _TICK[self.role](self)

    def propose(self, count: int = 1) -> AppendDecision:
        """Leader append, driver first: see ``ready.py``.  Never raises for client errors."""
        self._guard()
        if self.role is not Role.LEADER:
            return AppendDecision(Code.NOT_LEADER, leader_id=self.leader_id)
        if self.barrier is not None:
            return AppendDecision(Code.LEADER_NOT_READY, leader_id=self.id)
        if self.transferee is not None:
            return AppendDecision(Code.LEADER_TRANSFERRING, leader_id=self.id)
        if count <= 0:
            return AppendDecision(Code.UNEXPECTED_ARGUMENT, leader_id=self.id)
        if len(self.pending) >= self.cfg.max_pending:
            return AppendDecision(Code.LEADER_PENDING_FULL, leader_id=self.id)
        first = self.log.last_index + 1
        self.log.append_leader(first, count, self.term)
        self.sendable_last = self.log.last_index
        self.pending.append((first, first + count - 1, self.term,
                             self.now + self.cfg.max_wait_ack_ticks))
        self.need_bcast = True
        return AppendDecision(Code.SUCCESS, first, count, self.term, self.id)

    def abandon_proposal(self, d: AppendDecision) -> None:
        """Take back the indexes of the last :meth:`propose` because the driver could not write
        them (disk full, I/O error).  Allowed only right after that ``propose``: ``d`` must be
        the log's tail and the newest pending request, and no ``ready()`` may have run since
        (nothing about these entries can have left the core yet).  The request is dropped
        without a completion; the driver answers its client itself."""
        self._guard()
        if (d.code is not Code.SUCCESS or self.role is not Role.LEADER or d.term != self.term
                or d.last_index != self.log.last_index or not self.pending
                or self.pending[-1][:2] != (d.first_index, d.last_index)
                or self.sendable_last != d.last_index
                or any(pr.next > d.first_index for pr in self.prs.values())):
            raise RuntimeError(f"abandon_proposal({d.first_index}..{d.last_index}) is not the "
                               f"latest proposal")
        self.pending.pop()
        self.log.runs.truncate(d.first_index)
        self.sendable_last = self.log.last_index

    def on_persisted(self, index: int, term: int) -> None:
        """The store has flushed every entry up to ``index`` (whose term was ``term``)."""
        self._guard()
        if not self.log.persisted_to(index, term):
            return
        if self.role is Role.LEADER:
            replication.maybe_commit(self)
        else:
            self.log.commit_to(self.commit_target)
            replication.send_ack(self)

    def transfer_leadership(self, target: str) -> Code:
        """Start a leadership transfer to ``target`` (result later in ``Ready.transfer_result``)."""
        self._guard()
        if self.role is not Role.LEADER:
            return Code.NOT_LEADER
        if target == self.id:
            return Code.SUCCESS
        if target not in self._members:
            return Code.UNKNOWN_MEMBER
        if self.transferee == target:
            return Code.SUCCESS
        if self.transferee is not None:
            self._end_transfer(Code.TAKE_LEADERSHIP_FAILED)
        self.transferee, self.transfer_elapsed, self.timeout_now_sent = target, 0, False
        replication.maybe_send_timeout_now(self, target)
        if not self.timeout_now_sent:
            replication.fill_pipeline(self, target, allow_empty=True)
        return Code.SUCCESS

    def campaign(self) -> None:
        """Start an election now (tests and admin tools); no-op on a leader."""
        self._guard()
        if self.role is not Role.LEADER:
            election.campaign(self)

    # ================================================================== outputs
    def has_ready(self) -> bool:
        return bool(self._msgs or self._completions or self.log.unstable
                    or self.log.truncate_from is not None or self.log.reset_from is not None
                    or self._transfer_result
                    or (self.role is Role.LEADER and (self.need_bcast or self.need_commit_push))
                    or (self.barrier is not None and self.sendable_last < self.barrier.first_index)
                    or HardState(self.term, self.vote) != self._hs_reported
                    or self.log.committed != self._commit_reported
                    or RoleChange(self.role, self.term, self.leader_id) != self._role_reported)

    def ready(self) -> Ready:
        self._guard()
        if self.role is Role.LEADER:
            if self.need_bcast:
                self.need_bcast = False
                replication.bcast_append(self)
            if self.need_commit_push:
                self.need_commit_push = False
                for p in self.others:
                    if self.prs[p].next > self.sendable_last:
                        replication.send_append(self, p, allow_empty=True)
        rd = Ready()
        hs = HardState(self.term, self.vote)
        if hs != self._hs_reported:
            rd.hard_state = self._hs_reported = hs
        rd.reset_begin = self.log.take_reset()
        rd.truncate_from, rd.entries = self.log.take_unstable()
        if self.barrier is not None and self.sendable_last < self.barrier.first_index:
            rd.append_barrier = self.barrier
        rd.messages, self._msgs = self._msgs, []
        if self.log.committed != self._commit_reported:
            rd.committed_index = self._commit_reported = self.log.committed
        rd.completions, self._completions = self._completions, []
        rc = RoleChange(self.role, self.term, self.leader_id)
        if rc != self._role_reported:
            rd.role_change = self._role_reported = rc
        rd.transfer_result, self._transfer_result = self._transfer_result, None
        self._outstanding = rd
        return rd

    def advance(self, rd: Ready) -> None:
        if rd is not self._outstanding:
            raise RuntimeError("advance() must be given the Ready returned by the last ready()")
        self._outstanding = None
        if rd.append_barrier is not None and self.barrier is rd.append_barrier:
            self.sendable_last = self.log.last_index
            self.barrier = None
            self.need_bcast = True

    # ================================================================== queries
    @property
    def committed_index(self) -> int:
        return self.log.committed

    def status(self) -> Status:
        peers: tuple[PeerStatus, ...] = ()
        if self.role is Role.LEADER:
            last = self.log.last_index
            begin = self.log.begin_index
            peers = tuple(PeerStatus(p, pr.match, pr.next, last - pr.match, pr.state.value,
                                     len(pr.inflight), pr.recent_active, pr.hint_resets,
                                     pr.begin_resets, pr.next < begin)
                          for p, pr in sorted(self.prs.items()))
        return Status(self.id, self.role, self.term, self.leader_id, self.vote,
                      self.log.begin_index, self.log.last_index, self.log.last_term,
                      self.log.committed, self.log.persisted, len(self.pending), self.transferee,
                      peers, self.dropped_unknown, self.begin_resets)

    # ================================================================== role changes
    def become_follower(self, term: int, leader: Optional[str]) -> None:
        self._leave_leadership()
        if leader != self.leader_id or term != self.term or self.role is not Role.FOLLOWER:
            self.ack_target = self.ack_sent = self.commit_target = -1
        if term != self.term:
            self.term, self.vote = term, None
        self.role, self.leader_id = Role.FOLLOWER, leader
        self._reset_timers()

    def become_pre_candidate(self) -> None:
        self._leave_leadership()
        self.role, self.leader_id = Role.PRE_CANDIDATE, None
        self.votes = {self.id: True}
        self._reset_timers()

    def become_candidate(self) -> None:
        self._leave_leadership()
        self.term += 1
        self.vote = self.id
        self.role, self.leader_id = Role.CANDIDATE, None
        self.votes = {self.id: True}
        self._reset_timers()

    def become_leader(self) -> None:
        assert self.role is Role.CANDIDATE
        self.role, self.leader_id = Role.LEADER, self.id
        self._reset_timers()
        nxt = self.log.last_index + 1
        self.sendable_last = self.log.last_index
        self.prs = {p: Progress(nxt) for p in self.others}
        for pr in self.prs.values():
            pr.recent_active = True
        self.preferred_elapsed = 0
        # The barrier is only needed when this leader holds entries it does not know to be
        # committed: they can commit only through a current-term entry (Raft §5.4.2). A fully
        # committed log needs none, so an idle restart does not shift the next offset.
        if self.cfg.leader_barrier and self.log.last_index > self.committed_index:
            self.log.append_leader(nxt, 1, self.term)
            self.barrier = AppendDecision(Code.SUCCESS, nxt, 1, self.term, self.id)
        self.need_bcast = True
        replication.maybe_commit(self)    # single-member group

    def _leave_leadership(self) -> None:
        if self.role is not Role.LEADER:
            return
        if self.transferee is not None:
            self._end_transfer(Code.TAKE_LEADERSHIP_FAILED)
        while self.pending:
            first, last, term, _ = self.pending.popleft()
            self._completions.append(Completion(first, last, term, Code.NOT_LEADER))
        self.prs = {}
        self.need_bcast = self.need_commit_push = False
        if self.barrier is not None:
            self.sendable_last = self.log.last_index
            self.barrier = None

    def _end_transfer(self, code: Code) -> None:
        assert self.transferee is not None
        self._transfer_result = (self.transferee, code)
        self.transferee, self.timeout_now_sent = None, False

    def _reset_timers(self) -> None:
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self.rng.randrange(self.cfg.election_ticks_min,
                                                     self.cfg.election_ticks_max)

    # ================================================================== helpers
    def send(self, m: Message) -> None:
        self._msgs.append(m)

    def complete_pending(self) -> None:
        c = self.log.committed
        while self.pending and self.pending[0][1] <= c:
            first, last, term, _ = self.pending.popleft()
            self._completions.append(Completion(first, last, term, Code.SUCCESS))

    def _guard(self) -> None:
        if self._outstanding is not None:
            raise RuntimeError("input fed between ready() and advance()")

    def quorum_active(self) -> bool:
        return 1 + sum(1 for pr in self.prs.values() if pr.recent_active) >= self.cfg.quorum


# ====================================================================== per-role tick
def _tick_election(r: RaftCore) -> None:
    r.election_elapsed += 1
    if r.election_elapsed >= r.randomized_timeout:
        r.election_elapsed = 0
        election.campaign(r)


def _tick_leader(r: RaftCore) -> None:
    cfg = r.cfg
    r.election_elapsed += 1
    r.heartbeat_elapsed += 1
    for pr in r.prs.values():
        if pr.inflight:
            pr.idle_ticks += 1
    if r.election_elapsed >= cfg.election_ticks_min:
        r.election_elapsed = 0
        if cfg.check_quorum and not r.quorum_active():
            r.become_follower(r.term, None)
            return
        for pr in r.prs.values():
            pr.recent_active = False
    while r.pending and r.pending[0][3] <= r.now:
        first, last, term, _ = r.pending.popleft()
        r._completions.append(Completion(first, last, term, Code.WAIT_QUORUM_ACK_TIMEOUT))
    if r.transferee is not None:
        r.transfer_elapsed += 1
        if r.transfer_elapsed >= cfg.transfer_ticks:
            r._end_transfer(Code.TAKE_LEADERSHIP_FAILED)
    if r.heartbeat_elapsed >= cfg.heartbeat_ticks:
        r.heartbeat_elapsed = 0
        replication.send_heartbeats(r)
    if cfg.preferred_leaders and r.id not in cfg.preferred_leaders:
        r.preferred_elapsed += 1
        if r.preferred_elapsed >= cfg.preferred_check_ticks:
            r.preferred_elapsed = 0
            _check_preferred(r)


def _check_preferred(r: RaftCore) -> None:
    """DLedgerServer.checkPreferredLeader: hand over to the least-lagging live preferred peer."""
    if r.transferee is not None:
        return
    last = r.log.last_index
    best: Optional[tuple[int, str]] = None
    for p in r.cfg.preferred_leaders:
        pr = r.prs.get(p)
        if pr is None or not pr.recent_active and pr.match < 0:
            continue
        lag = last - pr.match
        if lag < r.cfg.max_transfer_lag and (best is None or lag < best[0]):
            best = (lag, p)
    if best is not None:
        r.transfer_leadership(best[1])


_TICK: dict[Role, Callable[[RaftCore], None]] = {
    Role.FOLLOWER: _tick_election,
    Role.PRE_CANDIDATE: _tick_election,
    Role.CANDIDATE: _tick_election,
    Role.LEADER: _tick_leader,
}


# ====================================================================== per-role step
def _step_follower(r: RaftCore, m: Message) -> None:
    if isinstance(m, AppendRequest):
        if r.leader_id != m.src:
            r.become_follower(r.term, m.src)
        r.election_elapsed = 0
        replication.handle_append(r, m)
    elif isinstance(m, TimeoutNow) and m.src == r.leader_id:
        election.campaign(r, transfer=True)


def _step_candidate(r: RaftCore, m: Message) -> None:
    if isinstance(m, AppendRequest):
        r.become_follower(r.term, m.src)
        replication.handle_append(r, m)
    elif isinstance(m, VoteResponse):
        election.handle_vote_response(r, m)


def _step_leader(r: RaftCore, m: Message) -> None:
    if isinstance(m, AppendResponse) and m.src in r.prs:
        if m.success or m.code is not Code.EXPIRED_TERM:
            replication.handle_append_response(r, m)
        else:
            r.prs[m.src].recent_active = True


_STEP: dict[Role, Callable[[RaftCore, Message], None]] = {
    Role.FOLLOWER: _step_follower,
    Role.PRE_CANDIDATE: _step_candidate,
    Role.CANDIDATE: _step_candidate,
    Role.LEADER: _step_leader,
}

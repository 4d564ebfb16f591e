"""The Raft paper's rules, one test each: terms (§5.1), elections (§5.2), the election
restriction (§5.4.1) and Figure 2's persistence rule, driving the real RaftCore.

Rules
-----
- Named after the sections of Ongaro & Ousterhout, "In Search of an Understandable Consensus
  Algorithm" (extended version), like etcd-raft's ``raft_paper_test.go``.  Replication and
  commitment (§5.3, §5.4.2, §5.5) are in ``test_paper_replication.py``; the thesis' extensions
  (pre-vote, lease, check-quorum, leadership transfer) in ``test_paper_extensions.py``.
- Each test feeds the core only through its public inputs (step / tick / campaign / propose /
  on_persisted) and asserts on its outputs (Ready messages and hard state, role, term, commit).
- Indexes are DLedger's: the first entry is 0 and an empty log ends at -1 with term -1 (the paper
  counts from 1).  Ids are "1".."n".  Pre-vote and check-quorum are off unless a test says so,
  so these tests check the paper's algorithm alone.
- Deterministic: every core gets a seeded ``random.Random``; no I/O, no sleeps.
"""
from __future__ import annotations

from typing import Any

import pytest

from dledger.core import (AppendRequest, AppendResponse, Code, Entry, HardState, Message,
                          RaftCore, Role, VoteRequest, VoteResponse, VoteResult)
from tests.dledger.core.harness import Net, drain, make_core
from tests.sim.memlog import MemLog


def of(kind: type, msgs: list[Message]) -> list[Any]:
    return [m for m in msgs if isinstance(m, kind)]


def become_leader(core: RaftCore, log: MemLog) -> None:
    """Campaign (no pre-vote) and win with the votes of every peer."""
    core.campaign()
    drain(core, log)
    for p in core.others:
        core.step(VoteResponse(p, core.id, core.term, True))
    drain(core, log)
    assert core.role is Role.LEADER


# ====================================================================== §5.1 terms

def _in_role(role: str) -> tuple[RaftCore, MemLog]:
    if role == "pre_candidate":
        core, log = make_core(term=1, pre_vote=True)
        core.campaign()
    else:
        core, log = make_core(term=1)
        if role == "candidate":
            core.campaign()
        elif role == "leader":
            become_leader(core, log)
    drain(core, log)
    assert core.role.value == role.upper()
    return core, log


HIGHER: dict[str, tuple[Message, tuple[str | None, str | None]]] = {  # message of term 5 from "2" -> (leader, vote) afterwards
    "append": (AppendRequest("2", "1", 5, -1, -1, -1), ("2", None)),
    "append_resp": (AppendResponse("2", "1", 5, False, code=Code.EXPIRED_TERM), (None, None)),
    "vote": (VoteRequest("2", "1", 5, 9, 9), (None, "2")),        # up to date: granted
    "vote_resp": (VoteResponse("2", "1", 5, False), (None, None)),
}


@pytest.mark.parametrize("kind", sorted(HIGHER))
@pytest.mark.parametrize("role", ["follower", "pre_candidate", "candidate", "leader"])
def test_5_1_update_term_from_message(role: str, kind: str) -> None:
    """§5.1: a server seeing a larger term adopts it; a candidate or leader reverts to follower."""
    core, _ = _in_role(role)
    msg, (leader, vote) = HIGHER[kind]
    core.step(msg)
    assert (core.role, core.term, core.leader_id) == (Role.FOLLOWER, 5, leader)
    assert core.ready().hard_state == HardState(5, vote)   # the new term is persisted


def test_5_1_reject_stale_term_message() -> None:
    """§5.1: "If a server receives a request with a stale term number, it rejects the request."
    A stale AppendRequest is answered EXPIRED_TERM with our term (so the old leader steps down,
    DLedger's answer); a stale vote request gets no vote; stale grants do not count."""
    core, log = make_core(term=2)
    core.campaign()                                       # candidate of term 3
    drain(core, log)
    core.step(AppendRequest("2", "1", 2, -1, -1, -1))
    core.step(VoteRequest("3", "1", 2, 9, 9))
    for p in ("2", "3"):
        core.step(VoteResponse(p, "1", 2, True))
    out = drain(core, log)
    assert (core.role, core.term, core.vote) == (Role.CANDIDATE, 3, "1")
    assert out == [AppendResponse("1", "2", 3, False, reject_index=-1, last_index=-1,
                                  code=Code.EXPIRED_TERM)]


# ====================================================================== §5.2 elections

def test_5_2_start_as_follower() -> None:
    """§5.2: "When servers start up, they begin as followers" -- with the persisted term and vote."""
    core, _ = make_core()
    assert (core.role, core.term, core.vote, core.leader_id) == (Role.FOLLOWER, 0, None, None)
    core, _ = make_core(term=5, vote="2")
    assert (core.role, core.term, core.vote) == (Role.FOLLOWER, 5, "2")


def test_5_2_leader_bcast_beat() -> None:
    """§5.2: leaders send periodic heartbeats (AppendEntries with no entries) to all followers."""
    net = Net(3)
    net.elect("1")
    net.clear_sent()
    hb = net.core("1").cfg.heartbeat_ticks
    net.tick("1", hb - 1)
    net.process("1")
    assert net.sent("1") == []
    net.tick("1")
    net.process("1")
    beats = net.sent("1")
    assert sorted(m.dst for m in beats) == ["2", "3"]
    assert all(isinstance(m, AppendRequest) and not m.entries and m.term == 1 for m in beats)


@pytest.mark.parametrize("start", ["follower", "candidate"])
def test_5_2_follower_and_candidate_start_new_election(start: str) -> None:
    """§5.2: on election timeout a follower (or a candidate whose election failed) increments its
    term, votes for itself (persisted first) and sends RequestVote to every other server."""
    core, log = make_core(terms=[1, 1], term=1)
    if start == "candidate":
        core.campaign()
        drain(core, log)
    term = core.term
    for _ in range(core.cfg.election_ticks_max):
        core.tick()
        if core.term != term:
            break
    rd = core.ready()
    assert (core.role, core.term, core.vote) == (Role.CANDIDATE, term + 1, "1")
    assert rd.hard_state == HardState(term + 1, "1")
    assert sorted(rd.messages, key=lambda m: m.dst) == [
        VoteRequest("1", p, term + 1, 1, 1) for p in ("2", "3")]


CASES_ONE_ROUND = [
    # (group size, vote responses, role after the round)
    (1, {}, Role.LEADER),
    (3, {"2": True, "3": True}, Role.LEADER),
    (3, {"2": True}, Role.LEADER),
    (5, {"2": True, "3": True, "4": True, "5": True}, Role.LEADER),
    (5, {"2": True, "3": True, "4": True}, Role.LEADER),
    (5, {"2": True, "3": True}, Role.LEADER),
    (3, {}, Role.CANDIDATE),
    (5, {"2": True}, Role.CANDIDATE),
    (5, {"2": False, "3": False}, Role.CANDIDATE),
    (5, {}, Role.CANDIDATE),
    (3, {"2": False, "3": False}, Role.FOLLOWER),
    (5, {"2": False, "3": False, "4": False}, Role.FOLLOWER),
    (5, {"2": True, "3": False, "4": False, "5": False}, Role.FOLLOWER),
]


@pytest.mark.parametrize("n, votes, role", CASES_ONE_ROUND)
def test_5_2_leader_election_in_one_round_rpc(n: int, votes: dict[str, bool], role: Role) -> None:
    """§5.2: a candidate wins with votes from a majority (its own included) and then sends
    heartbeats to all; a majority of rejections ends the round as follower (same term, the
    etcd-raft/DLedger reading of "another server established itself"); otherwise it waits."""
    core, log = make_core(n=n)
    core.campaign()
    drain(core, log)
    for p, granted in votes.items():
        core.step(VoteResponse(p, "1", 1, granted))
    out = drain(core, log)
    assert (core.role, core.term) == (role, 1)
    if role is Role.LEADER:
        assert sorted(m.dst for m in of(AppendRequest, out)) == [str(k) for k in range(2, n + 1)]


@pytest.mark.parametrize("vote, candidate, granted", [
    (None, "2", True), (None, "3", True), ("2", "2", True), ("3", "3", True),
    ("2", "3", False), ("3", "2", False),
])
def test_5_2_follower_vote(vote: str | None, candidate: str, granted: bool) -> None:
    """§5.2: "Each server will vote for at most one candidate in a given term, on a
    first-come-first-served basis" (a repeated request from the same candidate is granted again)."""
    core, log = make_core(term=1, vote=vote)
    core.step(VoteRequest(candidate, "1", 1, -1, -1))
    rd = core.ready()
    [resp] = rd.messages
    assert isinstance(resp, VoteResponse) and resp.granted is granted and resp.dst == candidate
    assert core.vote == (candidate if granted else vote)
    if granted and vote is None:
        assert rd.hard_state == HardState(1, candidate)   # persisted with the answer (Figure 2)
    if not granted:
        assert resp.result is VoteResult.REJECT_ALREADY_VOTED


def test_5_2_follower_votes_once_per_term_first_come_first_served() -> None:
    """§5.2: of two candidates of the same term, only the first to ask gets the vote."""
    core, log = make_core(term=0)
    core.step(VoteRequest("2", "1", 1, -1, -1))
    core.step(VoteRequest("3", "1", 1, -1, -1))
    out = of(VoteResponse, drain(core, log))
    assert [(m.dst, m.granted) for m in out] == [("2", True), ("3", False)]
    assert log.hard == HardState(1, "2")


@pytest.mark.parametrize("term_delta", [0, 1])
def test_5_2_candidate_fallback(term_delta: int) -> None:
    """§5.2: a candidate receiving AppendEntries from a leader whose term is at least its own
    recognises the leader and returns to follower state (and handles the request)."""
    core, log = make_core(term=1)
    core.campaign()
    drain(core, log)
    t = core.term + term_delta
    core.step(AppendRequest("2", "1", t, -1, -1, -1))
    out = drain(core, log)
    assert (core.role, core.term, core.leader_id) == (Role.FOLLOWER, t, "2")
    assert of(AppendResponse, out) == [AppendResponse("1", "2", t, True, match_index=-1,
                                                      last_index=-1)]


def test_fig2_follower_hearing_from_its_leader_never_times_out() -> None:
    """Figure 2 (Followers): convert to candidate only "if election timeout elapses without
    receiving AppendEntries RPC from current leader" -- heartbeats keep it a follower."""
    core, log = make_core("2", term=1)
    for _ in range(10 * core.cfg.election_ticks_max):
        core.tick()
        core.step(AppendRequest("1", "2", 1, -1, -1, -1))
        drain(core, log)
    assert (core.role, core.term) == (Role.FOLLOWER, 1)


def test_fig2_granting_a_vote_resets_the_election_timer() -> None:
    """Figure 2 (Followers): the timeout counts from the last AppendEntries *or granted vote*; a
    follower that grants a vote (same term) just before its timeout does not campaign then."""
    twin, _ = make_core("2", term=2, seed=3)      # same seed: same timeout, measured first
    timeout = _timeouts(twin, 1, back_to_follower=False)[0]
    core, log = make_core("2", term=2, seed=3)
    for _ in range(timeout - 1):
        core.tick()
    core.step(VoteRequest("3", "2", 2, -1, -1))
    drain(core, log)
    for _ in range(core.cfg.election_ticks_min - 1):
        core.tick()
    assert (core.role, core.term, core.vote) == (Role.FOLLOWER, 2, "3")


def _timeouts(core: RaftCore, rounds: int, back_to_follower: bool) -> list[int]:
    """Ticks between successive campaigns of ``core``."""
    out = []
    for _ in range(rounds):
        term, ticks = core.term, 0
        while core.term == term:
            core.tick()
            ticks += 1
            assert ticks <= core.cfg.election_ticks_max
        out.append(ticks)
        if back_to_follower:
            core.step(AppendRequest("2", "1", core.term, -1, -1, -1))
        core.advance(core.ready())
    return out


@pytest.mark.parametrize("role", ["follower", "candidate"])
def test_5_2_election_timeout_randomized(role: str) -> None:
    """§5.2: "election timeouts are chosen randomly from a fixed interval" -- every timeout lies in
    [election_ticks_min, election_ticks_max) and, across rounds, the whole interval is used."""
    core, log = make_core(seed=7)
    if role == "candidate":
        core.campaign()
        drain(core, log)
    seen = _timeouts(core, 200, back_to_follower=role == "follower")
    lo, hi = core.cfg.election_ticks_min, core.cfg.election_ticks_max
    assert set(seen) == set(range(lo, hi))


def test_5_2_election_timeouts_of_different_servers_rarely_collide() -> None:
    """§5.2: randomised timeouts spread out the servers, so in most cases only one times out
    first: over 100 seeded 5-node groups, the earliest timeout is unique in most of them."""
    unique = 0
    for seed in range(100):
        net = Net(5, seed=seed)
        firsts = [_timeouts(net.core(i), 1, False)[0] for i in net.ids]
        unique += firsts.count(min(firsts)) == 1
    assert unique >= 60


# ====================================================================== §5.4.1 election restriction

@pytest.mark.parametrize("pre_vote", [False, True])
@pytest.mark.parametrize("last_index, last_term, granted, why", [
    (2, 2, True, VoteResult.ACCEPT),                       # identical logs
    (3, 2, True, VoteResult.ACCEPT),                       # same last term, longer
    (0, 3, True, VoteResult.ACCEPT),                       # higher last term, shorter
    (1, 2, False, VoteResult.REJECT_SMALL_LEDGER_END_INDEX),  # same last term, shorter
    (5, 1, False, VoteResult.REJECT_EXPIRED_LEDGER_TERM),     # lower last term, longer
    (-1, -1, False, VoteResult.REJECT_EXPIRED_LEDGER_TERM),   # empty log
])
def test_5_4_1_vote_request(pre_vote: bool, last_index: int, last_term: int, granted: bool,
                            why: VoteResult) -> None:
    """§5.4.1: "the voter denies its vote if its own log is more up-to-date than that of the
    candidate" -- compare last terms, then lengths.  Pre-votes apply the same check (§9.6)."""
    core, log = make_core(terms=[1, 1, 2], term=2, pre_vote=pre_vote)
    core.step(VoteRequest("2", "1", 3, last_index, last_term, pre_vote=pre_vote))
    [resp] = drain(core, log)
    assert isinstance(resp, VoteResponse)
    assert (resp.granted, resp.result, resp.pre_vote) == (granted, why, pre_vote)
    assert core.vote == ("2" if granted and not pre_vote else None)


# ====================================================================== Figure 2: persistence

def test_fig2_vote_and_term_persisted_before_the_answer_is_sent() -> None:
    """Figure 2: currentTerm and votedFor are "updated on stable storage before responding to
    RPCs" -- the Ready that carries the granted vote also carries the hard state, which the
    driver contract (ready.py) persists before sending."""
    core, log = make_core(term=1)
    core.step(VoteRequest("2", "1", 4, -1, -1))
    rd = core.ready()
    assert rd.hard_state == HardState(4, "2")
    [resp] = rd.messages
    assert isinstance(resp, VoteResponse) and resp.granted


def test_fig2_restart_keeps_the_vote_of_the_term() -> None:
    """Figure 2: after a restart with votedFor persisted, a second candidate of that term is
    refused (a server cannot vote twice in a term by crashing)."""
    core, log = make_core(term=1)
    core.step(VoteRequest("2", "1", 4, -1, -1))
    drain(core, log)
    again, _ = make_core(term=log.hard.term, vote=log.hard.vote)
    again.step(VoteRequest("3", "1", 4, -1, -1))
    [resp] = again.ready().messages
    assert isinstance(resp, VoteResponse) and not resp.granted


def test_fig2_entries_tuple() -> None:
    """Figure 2: AppendEntries carries prevLogIndex/prevLogTerm, the entries and leaderCommit."""
    net = Net(3)
    net.elect("1")
    assert net.propose("1", b"cmd").code is Code.SUCCESS
    net.clear_sent()
    net.process("1")
    reqs = of(AppendRequest, net.sent("1"))
    assert reqs and all(r.prev_index == -1 and r.prev_term == -1 and r.commit == -1
                        and r.entries == (Entry(0, 1, b"cmd"),) for r in reqs)

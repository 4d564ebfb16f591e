"""The thesis' extensions as the core implements them: pre-vote (§9.6), the leader lease against
disruptive servers (§4.2.3), check-quorum (§6.2) and leadership transfer (§3.10).

Rules
-----
- Section numbers are those of Ongaro's PhD thesis, "Consensus: Bridging Theory and Practice"
  (the extended paper has none of these), as etcd-raft's tests cite them.
- Same conventions as ``test_paper.py``: public inputs only, seeded, no I/O.  Pre-vote and
  check-quorum are switched on per test.
- Where the core follows DLedger (the lease only exists with check-quorum; a transfer is
  reported SUCCESS as soon as the target's higher term is seen; a check-quorum step-down keeps
  the term) the docstring says so.
"""
from __future__ import annotations

from typing import Any

from dledger.core import (AppendRequest, Code, Message, Role, TimeoutNow, VoteRequest,
                          VoteResponse, VoteResult)
from tests.dledger.core.harness import Net, drain, make_core


def of(kind: type, msgs: list[Message]) -> list[Any]:
    return [m for m in msgs if isinstance(m, kind)]


def _run_timeout(net: Net, nid: str) -> None:
    net.tick(nid, net.core(nid).cfg.election_ticks_max)


# ====================================================================== §9.6 pre-vote

def test_9_6_pre_candidate_keeps_its_term_and_vote() -> None:
    """§9.6: a pre-candidate asks for pre-votes of term+1 "without incrementing its term" (and
    without voting for itself on disk)."""
    core, log = make_core(terms=[1], term=1, pre_vote=True)
    core.campaign()
    rd = core.ready()
    assert (core.role, core.term, core.vote, rd.hard_state) == (Role.PRE_CANDIDATE, 1, None, None)
    assert sorted(rd.messages, key=lambda m: m.dst) == [
        VoteRequest("1", p, 2, 0, 1, pre_vote=True) for p in ("2", "3")]


def test_9_6_granting_a_pre_vote_changes_nothing_on_the_voter() -> None:
    """§9.6: voters answer pre-votes without changing their term or recording a vote."""
    core, log = make_core(terms=[1], term=1, pre_vote=True)
    core.step(VoteRequest("2", "1", 2, 0, 1, pre_vote=True))
    rd = core.ready()
    [resp] = rd.messages
    assert isinstance(resp, VoteResponse) and resp.granted and resp.pre_vote and resp.term == 2
    assert (core.term, core.vote, rd.hard_state) == (1, None, None)


def test_9_6_a_quorum_of_pre_votes_starts_the_real_election() -> None:
    """§9.6: only a pre-candidate that would win (a majority of pre-votes) increments its term
    and runs a real election."""
    core, log = make_core(term=1, pre_vote=True)
    core.campaign()
    drain(core, log)
    core.step(VoteResponse("2", "1", 2, True, pre_vote=True))
    rd = core.ready()
    assert (core.role, core.term, core.vote) == (Role.CANDIDATE, 2, "1")
    assert all(isinstance(m, VoteRequest) and not m.pre_vote and m.term == 2 for m in rd.messages)


def test_9_6_partitioned_node_does_not_inflate_its_term() -> None:
    """§9.6: a server cut off from the majority keeps timing out, but with pre-vote its term never
    rises, so when it rejoins it does not depose the leader."""
    net = Net(3, pre_vote=True, check_quorum=True)
    net.elect("1")
    net.isolate("3")
    for _ in range(5):
        _run_timeout(net, "3")
        net.stabilize()
    assert (net.core("3").role, net.core("3").term) == (Role.PRE_CANDIDATE, 1)
    net.heal()
    for _ in range(10):
        net.tick_all()
    assert [(net.core(i).term, net.core(i).leader_id) for i in net.ids] == [(1, "1")] * 3


def test_9_6_without_pre_vote_the_rejoining_node_disrupts() -> None:
    """The disruption §9.6 prevents: without pre-vote the isolated node's term climbs, and its
    answer to the leader's next heartbeat (a higher term) makes the leader step down (§5.1)."""
    net = Net(3, pre_vote=False, check_quorum=True)
    net.elect("1")
    net.isolate("3")
    for _ in range(5):
        _run_timeout(net, "3")
        net.stabilize()
    assert net.core("3").term > 3
    net.heal()
    net.tick("1", net.core("1").cfg.heartbeat_ticks)
    net.stabilize()
    assert net.core("1").role is not Role.LEADER and net.core("1").term == net.core("3").term


def test_9_6_pre_vote_rejected_for_a_log_that_is_behind() -> None:
    """§9.6 + §5.4.1: a pre-vote is granted only if the candidate could win, i.e. its log is up to
    date; a majority of rejections ends the pre-campaign as follower, term unchanged."""
    net = Net(3, pre_vote=True, check_quorum=False)
    net.elect("1")
    net.isolate("3")
    net.propose("1", b"a")
    net.stabilize()
    net.heal()
    net.campaign("3")
    net.stabilize()
    got = of(VoteResponse, [m for i in ("1", "2") for m in net.sent(i) if m.dst == "3"])
    assert [(m.granted, m.result) for m in got] == [
        (False, VoteResult.REJECT_EXPIRED_LEDGER_TERM)] * 2
    assert (net.core("3").role, net.core("3").term) == (Role.FOLLOWER, 1)


# ====================================================================== §4.2.3 leader lease

def test_4_2_3_votes_ignored_within_the_minimum_election_timeout() -> None:
    """§4.2.3: "if a server receives a RequestVote request within the minimum election timeout of
    hearing from a current leader, it does not update its term or grant its vote".  In this
    core (as in etcd-raft) the lease is part of check-quorum."""
    core, log = make_core("2", term=1, check_quorum=True)
    core.step(AppendRequest("1", "2", 1, -1, -1, -1))
    drain(core, log)
    for _ in range(core.cfg.election_ticks_min - 1):
        core.tick()
    core.step(VoteRequest("3", "2", 5, 9, 9))
    assert drain(core, log) == [] and (core.term, core.vote, core.leader_id) == (1, None, "1")
    core.tick()                                       # the lease is over
    core.step(VoteRequest("3", "2", 5, 9, 9))
    [resp] = drain(core, log)
    assert isinstance(resp, VoteResponse) and resp.granted and core.term == 5


def test_4_2_3_without_check_quorum_there_is_no_lease() -> None:
    """The same vote request right after a heartbeat is honoured when check-quorum is off: the
    lease is only sound when leaders step down without a quorum (config.py)."""
    core, log = make_core("2", term=1, check_quorum=False)
    core.step(AppendRequest("1", "2", 1, -1, -1, -1))
    drain(core, log)
    core.step(VoteRequest("3", "2", 5, 9, 9))
    [resp] = drain(core, log)
    assert isinstance(resp, VoteResponse) and resp.granted and core.term == 5


# ====================================================================== §6.2 check-quorum

def test_6_2_check_quorum_leader_steps_down_without_a_majority() -> None:
    """§6.2: "a leader steps down if an election timeout elapses without a successful round of
    heartbeats to a majority of its cluster".  The core checks every ``election_ticks_min`` ticks;
    the first check after election passes (followers start active), the next one fails; the
    leader becomes follower in the same term (DLedger: no new election of its own)."""
    net = Net(3, check_quorum=True)
    net.elect("1")
    net.isolate("1")
    lo = net.core("1").cfg.election_ticks_min
    net.tick("1", 2 * lo - 1)
    assert net.core("1").role is Role.LEADER
    net.tick("1")
    assert (net.core("1").role, net.core("1").term, net.core("1").leader_id) == (
        Role.FOLLOWER, 1, None)


def test_6_2_check_quorum_leader_stays_with_a_majority() -> None:
    """§6.2: a leader that hears from a majority every election timeout stays leader (one
    follower down is not enough to step down)."""
    net = Net(3, check_quorum=True)
    net.elect("1")
    net.isolate("3")
    for _ in range(5 * net.core("1").cfg.election_ticks_min):
        net.tick("1")
        net.stabilize()
    assert net.core("1").role is Role.LEADER


def test_6_2_without_check_quorum_an_isolated_leader_stays() -> None:
    """The test above can fail: with check-quorum off the isolated leader never steps down."""
    net = Net(3, check_quorum=False)
    net.elect("1")
    net.isolate("1")
    net.tick("1", 10 * net.core("1").cfg.election_ticks_max)
    assert net.core("1").role is Role.LEADER


# ====================================================================== §3.10 leadership transfer

def _transfer_results(net: Net, nid: str) -> list[tuple[str, Code]]:
    return [rd.transfer_result for rd in net.nodes[nid].readies if rd.transfer_result]


def test_3_10_leadership_transfer_to_an_up_to_date_follower() -> None:
    """§3.10: the leader sends TimeoutNow to an up-to-date target, which starts an election at
    once (term+1, no pre-vote, ``transfer`` so the voters' lease does not refuse it) and wins."""
    net = Net(3, pre_vote=True, check_quorum=True)
    net.elect("1")
    net.propose("1", b"a")
    net.stabilize()
    net.clear_sent()
    assert net.core("1").transfer_leadership("2") is Code.SUCCESS
    net.process("1")
    assert net.sent("1") == [TimeoutNow("1", "2", 1)]
    net.stabilize()
    votes = of(VoteRequest, net.sent("2"))
    assert votes and all(v.transfer and not v.pre_vote and v.term == 2 for v in votes)
    assert [(net.core(i).role, net.core(i).term) for i in net.ids] == [
        (Role.FOLLOWER, 2), (Role.LEADER, 2), (Role.FOLLOWER, 2)]
    assert _transfer_results(net, "1") == [("2", Code.SUCCESS)]


def test_3_10_transfer_waits_until_the_target_is_up_to_date() -> None:
    """§3.10: "the prior leader ... transfers its log entries to the target server" before
    TimeoutNow, so the target can win (§5.4.1)."""
    net = Net(3, pre_vote=True, check_quorum=True)
    net.elect("1")
    net.isolate("3")
    net.propose("1", b"a")
    net.stabilize()
    net.heal()
    net.clear_sent()
    net.core("1").transfer_leadership("3")
    net.process("1")
    assert not of(TimeoutNow, net.sent("1"))
    net.stabilize()
    sent = net.sent("1")
    first_tn = next(k for k, m in enumerate(sent) if isinstance(m, TimeoutNow))
    assert any(isinstance(m, AppendRequest) and m.dst == "3" and m.entries
               for m in sent[:first_tn])
    assert net.core("3").role is Role.LEADER and net.terms_of("3") == [1]


def test_3_10_leader_refuses_proposals_while_transferring() -> None:
    """§3.10: during the transfer "the prior leader stops accepting new client requests"."""
    net = Net(3)
    net.elect("1")
    net.isolate("2")
    net.core("1").transfer_leadership("2")
    d = net.propose("1", b"x")
    assert (d.code, d.leader_id) == (Code.LEADER_TRANSFERRING, "1")


def test_3_10_transfer_aborts_after_an_election_timeout() -> None:
    """§3.10: "if the transfer does not complete within about one election timeout, the prior
    leader aborts the transfer and resumes accepting client requests"."""
    net = Net(3)
    net.elect("1")
    net.isolate("2")
    net.core("1").transfer_leadership("2")
    for _ in range(net.core("1").cfg.transfer_ticks):
        net.tick("1")
        net.stabilize()
    assert _transfer_results(net, "1") == [("2", Code.TAKE_LEADERSHIP_FAILED)]
    assert net.core("1").role is Role.LEADER
    assert net.propose("1", b"x").code is Code.SUCCESS


def test_3_10_timeout_now_only_from_the_current_leader() -> None:
    """TimeoutNow is obeyed only from the follower's current leader (a stray or forged one from
    another member must not start an election)."""
    core, log = make_core("2", term=1)
    core.step(AppendRequest("1", "2", 1, -1, -1, -1))
    drain(core, log)
    core.step(TimeoutNow("3", "2", 1))
    assert core.role is Role.FOLLOWER and core.term == 1
    core.step(TimeoutNow("1", "2", 1))
    assert core.role is Role.CANDIDATE and core.term == 2

"""LeaderElectorTest (DLedger 0.3.1.2) ported to the core + simulation, plus pre-vote,
check-quorum, vote persistence, leadership transfer and membership filtering."""
from __future__ import annotations

import random

from dledger.core import (AppendRequest, Code, Config, HardState, RaftCore, Role, VoteRequest)
from tests.sim.cluster import Cluster
from tests.sim.memlog import MemLog


def _terms(c: Cluster) -> set[int]:
    return {c.core(i).term for i in c.ids if c.nodes[i].alive}


def test_single_server_is_leader_and_restart_reelects() -> None:
    c = Cluster(1, seed=1)
    ld = c.wait_leader()
    assert ld == "n0"
    t = c.core(ld).term
    c.crash(ld)
    c.restart(ld)
    assert c.wait_leader() == "n0"
    # DLedger re-uses the term (same-term revote); Raft with pre-vote takes exactly one more
    assert c.core("n0").term == t + 1


def test_three_servers_elect_exactly_one_leader_and_stay_stable() -> None:
    c = Cluster(3, seed=2)
    ld = c.wait_leader()
    assert [c.core(i).role for i in c.ids].count(Role.LEADER) == 1
    assert {c.core(i).leader_id for i in c.ids} == {ld}
    term = c.core(ld).term
    c.tick_all(30 * c.nodes[ld].cfg.election_ticks_max)
    assert c.leader() == ld and _terms(c) == {term}


def test_restart_follower_rejoins_in_same_term() -> None:
    c = Cluster(3, seed=3)
    ld = c.wait_leader()
    term = c.core(ld).term
    f = next(i for i in c.ids if i != ld)
    c.crash(f)
    c.tick_all(5)
    c.restart(f)
    c.tick_all(40)
    assert c.leader() == ld and c.core(f).leader_id == ld
    assert _terms(c) == {term} and c.core(f).role is Role.FOLLOWER


def test_shutdown_leader_elects_new_leader_among_the_rest() -> None:
    c = Cluster(3, seed=4)
    ld = c.wait_leader()
    term = c.core(ld).term
    c.crash(ld)
    new = c.wait_leader()
    assert new != ld and c.core(new).term > term


def test_shutdown_followers_leader_steps_down_term_unchanged() -> None:
    c = Cluster(3, seed=5)
    ld = c.wait_leader()
    term = c.core(ld).term
    for i in c.ids:
        if i != ld:
            c.crash(i)
    c.tick_all(2 * c.nodes[ld].cfg.election_ticks_min)
    assert c.core(ld).role is not Role.LEADER
    c.tick_all(20 * c.nodes[ld].cfg.election_ticks_max)
    assert c.core(ld).term == term          # pre-vote: no inflation while alone
    assert c.core(ld).role is not Role.LEADER


def test_preferred_leader_wins_and_regains_leadership_after_restart() -> None:
    c = Cluster(3, seed=6, preferred_leaders=("n2",), preferred_check_ticks=5)
    c.wait_leader()
    c.tick_all(40)
    assert c.leader() == "n2"
    c.crash("n2")
    other = c.wait_leader()
    assert other != "n2"
    c.propose(other, 3)
    c.restart("n2")
    c.tick_all(60)
    assert c.leader() == "n2"
    assert c.nodes[other].transfer_results[-1] == ("n2", Code.SUCCESS)


def test_partitioned_node_does_not_inflate_terms() -> None:
    c = Cluster(3, seed=7)
    ld = c.wait_leader()
    term = c.core(ld).term
    f = next(i for i in c.ids if i != ld)
    c.isolate(f)
    c.tick_all(20 * c.nodes[f].cfg.election_ticks_max)
    assert c.core(f).term == term and c.core(f).role is Role.PRE_CANDIDATE
    c.heal()
    c.tick_all(10)
    assert c.leader() == ld and _terms(c) == {term}


def test_without_pre_vote_a_partitioned_node_inflates_terms() -> None:
    """The control experiment: the test above fails if pre-vote is off."""
    c = Cluster(3, seed=7, pre_vote=False)
    ld = c.wait_leader()
    term = c.core(ld).term
    f = next(i for i in c.ids if i != ld)
    c.isolate(f)
    c.tick_all(20 * c.nodes[f].cfg.election_ticks_max)
    assert c.core(f).term > term + 5


def test_leader_partitioned_from_quorum_steps_down() -> None:
    c = Cluster(5, seed=8)
    ld = c.wait_leader()
    c.isolate(ld)
    c.tick_all(2 * c.nodes[ld].cfg.election_ticks_min + 1)   # one full check-quorum period
    assert c.core(ld).role is not Role.LEADER
    new = c.wait_leader()
    assert new != ld


def test_vote_is_persisted_and_honoured_after_restart() -> None:
    log = MemLog()
    cfg = Config("n0", ("n0", "n1", "n2"))
    core = RaftCore(cfg, log, random.Random(1))
    core.step(VoteRequest("n1", "n0", 5, -1, -1))
    rd = core.ready()
    assert rd.hard_state == HardState(5, "n1")            # persisted in the same Ready...
    assert rd.messages[0].granted                          # ...as the grant it protects
    core.advance(rd)
    core2 = RaftCore(cfg, log, random.Random(2), rd.hard_state)
    core2.step(VoteRequest("n2", "n0", 5, -1, -1))
    rd2 = core2.ready()
    assert not rd2.messages[0].granted and rd2.messages[0].term == 5


def test_unknown_members_are_dropped_and_counted() -> None:
    cfg = Config("n0", ("n0", "n1", "n2"))
    core = RaftCore(cfg, MemLog(), random.Random(1))
    core.step(AppendRequest("intruder", "n0", 9, -1, -1, -1, ()))
    core.step(VoteRequest("n1", "n7", 9, -1, -1))
    assert core.term == 0 and core.status().dropped_unknown == 2 and not core.has_ready()


def test_leadership_transfer_to_follower() -> None:
    c = Cluster(3, seed=9)
    ld = c.wait_leader()
    c.propose(ld, 5)
    c.stabilize()
    target = next(i for i in c.ids if i != ld)
    assert c.core(ld).transfer_leadership(target) is Code.SUCCESS
    c.process(ld)
    c.stabilize()
    assert c.leader() == target
    c.tick_all(3)
    assert c.core(ld).leader_id == target
    assert c.nodes[ld].transfer_results == [(target, Code.SUCCESS)]


def test_leadership_transfer_catches_up_lagging_target_first() -> None:
    c = Cluster(3, seed=10)
    ld = c.wait_leader()
    target = next(i for i in c.ids if i != ld)
    c.crash(target)
    for _ in range(4):
        c.propose(ld, 3)
    c.stabilize()
    c.restart(target)
    assert c.core(ld).transfer_leadership(target) is Code.SUCCESS
    assert c.propose(ld).code is Code.LEADER_TRANSFERRING
    c.process(ld)
    c.stabilize()
    for _ in range(c.nodes[ld].cfg.transfer_ticks):
        c.tick_all()
        if c.leader() == target:
            break
    assert c.leader() == target
    assert c.nodes[target].log.ledger_end_index >= 11
    assert c.nodes[ld].transfer_results == [(target, Code.SUCCESS)]


def test_leadership_transfer_aborts_after_timeout() -> None:
    c = Cluster(3, seed=11, check_quorum=False)
    ld = c.wait_leader()
    target = next(i for i in c.ids if i != ld)
    c.isolate(target)
    assert c.core(ld).transfer_leadership(target) is Code.SUCCESS
    assert c.propose(ld).code is Code.LEADER_TRANSFERRING
    c.tick(ld, c.nodes[ld].cfg.transfer_ticks)
    assert c.nodes[ld].transfer_results == [(target, Code.TAKE_LEADERSHIP_FAILED)]
    assert c.core(ld).role is Role.LEADER
    assert c.propose(ld).code is Code.SUCCESS

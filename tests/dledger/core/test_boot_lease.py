"""Issue 24.6: a restarting (wiped) follower never helps depose a live leader (boot lease).

The scenario: the leader stalls for a few ticks (a GC pause, the burst of a catch-up) just as a
follower whose store was wiped restarts. The other follower's election timer fires and it
campaigns. Without the boot lease the wiped node -- no leader heard yet, an empty log, so every
candidate is "up to date" -- grants the pre-vote and the vote, and the stalled but live leader is
deposed (a new term). With it the wiped node ignores higher-term (pre-)votes for its first
``election_ticks_min`` ticks, the campaign fails, and the leader keeps its term once the stall ends.
"""
from __future__ import annotations

import random

import pytest

from dledger.core import Code, Role
from dledger.core.config import Config
from dledger.core.messages import VoteRequest, VoteResponse
from dledger.core.raft import RaftCore
from tests.sim.cluster import Cluster
from tests.sim.memlog import MemLog


def _leader_stalls_while_a_wiped_follower_restarts(boot_lease: bool) -> tuple[str, int, Cluster]:
    c = Cluster(3, seed=246, boot_lease=boot_lease)
    ld = c.wait_leader()
    for _ in range(10):
        assert c.propose(ld, 2).code is Code.SUCCESS
    c.stabilize()
    c.tick_all(4)
    term = c.core(ld).term
    wiped, other = [n for n in c.ids if n != ld]
    c.isolate(ld)                 # the leader stalls: nothing from it, nothing to it
    c.wipe(wiped)                 # ... as the wiped follower comes back empty
    c.tick(wiped, 2)
    c.campaign(other)             # the other follower's timer fired during the stall
    c.campaign(other)             # (twice: a first pre-vote may only teach it the term)
    c.heal()
    for _ in range(60):
        c.tick_all()
    return ld, term, c


def test_a_wiped_follower_in_its_boot_lease_does_not_help_depose_a_stalled_leader() -> None:
    ld, term, c = _leader_stalls_while_a_wiped_follower_restarts(boot_lease=True)
    assert c.leader() == ld and c.core(ld).term == term, c.describe_failure()
    assert all(c.core(n).term == term for n in c.ids)


def test_without_the_boot_lease_the_same_restart_elects_a_new_leader() -> None:
    ld, term, c = _leader_stalls_while_a_wiped_follower_restarts(boot_lease=False)
    assert c.core(ld).term > term   # the failure the boot lease prevents (what 24.6 saw)


@pytest.mark.parametrize("pre_vote", [True, False])
def test_boot_lease_ignores_higher_term_votes_for_election_ticks_min_ticks(pre_vote: bool) -> None:
    cfg = Config("n0", ("n0", "n1", "n2"), election_ticks_min=10, election_ticks_max=20, boot_lease=True)
    core = RaftCore(cfg, MemLog(), random.Random(1))
    core.step(VoteRequest("n1", "n0", 3, -1, -1, pre_vote=pre_vote))
    rd = core.ready()
    assert rd.messages == [] and core.term == 0 and core.vote is None   # ignored: no answer, no term
    core.advance(rd)
    for _ in range(9):
        core.tick()
    assert core.role is Role.FOLLOWER   # no timer fires inside the lease either
    core.step(VoteRequest("n1", "n0", 3, -1, -1, pre_vote=pre_vote))
    core.advance(core.ready())
    core.tick()                          # tick 10: the boot lease is over
    core.step(VoteRequest("n1", "n0", 3, -1, -1, pre_vote=pre_vote))
    rd = core.ready()
    granted = [m for m in rd.messages if isinstance(m, VoteResponse) and m.granted]
    assert len(granted) == 1 and granted[0].pre_vote is pre_vote


def test_the_server_turns_the_boot_lease_on() -> None:
    from dledger.config import DLedgerConfig
    from dledger.storelog import core_config

    assert core_config(DLedgerConfig(peers="n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3")).boot_lease

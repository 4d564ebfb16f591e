"""Stranded followers (issue 13.2): a follower whose store was moved away, and a follower behind
the leader's begin index, must both catch up; retention faults keep every safety invariant.

Each scripted test fails without its fix: before the reject hint the leader kept ``match`` at the
wiped follower's old value and re-probed there forever (the follower stayed empty); before the
begin reset a follower behind the leader's begin index was never sent anything.
"""
from __future__ import annotations

import pytest

from dledger.core import Code, Role
from tests.sim.cluster import Cluster
from tests.sim.runner import run_seed


def _caught_up(c: Cluster, nid: str) -> bool:
    committed = c.checker.committed
    log = c.nodes[nid].log
    last = len(committed) - 1
    return (c.core(nid).committed_index == last and len(log.hashes) > last
            and log.hashes[last] == committed[last])


def _commit(c: Cluster, ld: str, n: int) -> None:
    for _ in range(n):
        assert c.propose(ld, 2).code is Code.SUCCESS
    c.stabilize()
    c.tick_all(4)


@pytest.mark.parametrize("net", [{}, {"delay": (1, 40), "drop": 0.1, "dup": 0.1, "wire": True}])
def test_follower_whose_store_was_moved_away_catches_up(net: dict) -> None:
    c = Cluster(3, seed=131, **net)  # type: ignore[arg-type]
    ld = c.wait_leader()
    _commit(c, ld, 30)
    f = next(i for i in c.ids if i != ld)
    assert _caught_up(c, f)
    c.wipe(f)                       # `mv dledger-<id> away` and restart, as the error says
    assert c.nodes[f].log.ledger_end_index == -1
    for _ in range(60):
        c.tick_all(1)
        if _caught_up(c, f):
            break
    assert _caught_up(c, f), (c.nodes[f].log.ledger_end_index, c.core(ld).prs[f])
    assert c.core(ld).role is Role.LEADER
    assert c.core(ld).status().peers[c.core(ld).others.index(f)].hint_resets >= 1
    _commit(c, ld, 5)               # and keeps replicating afterwards
    assert all(_caught_up(c, i) for i in c.ids)


def test_wiped_follower_while_leader_probes_it() -> None:
    """The leader is in PROBE for the follower (a lost pipeline) when the store disappears."""
    c = Cluster(3, seed=132)
    ld = c.wait_leader()
    _commit(c, ld, 10)
    f = next(i for i in c.ids if i != ld)
    c.crash(f)
    _commit(c, ld, 5)               # the leader's pushes to f time out: PROBE at match + 1
    c.tick_all(10)
    c.crash(f)
    c.nodes[f].log = type(c.nodes[f].log)()
    c.checker.max_term.pop(f, None)
    c.restart(f)
    c.tick_all(30)
    assert _caught_up(c, f)


def _behind_begin(seed: int) -> tuple[Cluster, str, str, str]:
    c = Cluster(3, seed=seed)
    ld = c.wait_leader()
    f = next(i for i in c.ids if i != ld)
    other = next(i for i in c.ids if i not in (ld, f))
    _commit(c, ld, 3)
    c.crash(f)
    _commit(c, ld, 20)
    upto = c.core(ld).committed_index - 4
    c.compact(ld, upto)             # retention on the leader and the other follower
    c.compact(other, upto)
    c.restart(f)
    return c, ld, f, other


def test_follower_behind_leader_begin_is_reset_to_it() -> None:
    c, ld, f, other = _behind_begin(133)
    begin = c.nodes[ld].log.begin
    assert c.nodes[f].log.ledger_end_index < begin - 1
    c.tick_all(20)
    assert _caught_up(c, f)
    assert c.nodes[f].log.begin == begin          # its log now starts at the leader's begin
    assert c.core(f).status().begin_resets == 1
    peer = c.core(ld).status().peers[c.core(ld).others.index(f)]
    assert peer.begin_resets >= 1 and not peer.behind_begin
    c.crash(f)                                    # a reset log survives a restart
    c.restart(f)
    _commit(c, ld, 3)
    assert _caught_up(c, f)
    c.crash(ld)                                   # and the group keeps its safety after it
    nl = c.wait_new_leader(ld)
    _commit(c, nl, 3)
    c.restart(ld)
    c.tick_all(20)
    assert all(_caught_up(c, i) for i in c.ids)


def test_follower_behind_begin_of_a_live_leader() -> None:
    """Retention runs on the live leader (the begin index moves under the core)."""
    c = Cluster(3, seed=134)
    ld = c.wait_leader()
    f = next(i for i in c.ids if i != ld)
    _commit(c, ld, 3)
    c.isolate(f)
    _commit(c, ld, 15)
    for i in c.ids:
        if i != f:
            c.compact(i, c.core(i).committed_index - 2)
    c.heal()
    c.tick_all(20)
    assert _caught_up(c, f) and c.nodes[f].log.begin > 0


@pytest.mark.parametrize("seeds", [range(300, 330)])
def test_retention_fault_sweep_keeps_safety(seeds: range) -> None:
    """Random retention on random live nodes, with crashes, partitions, drops: every invariant
    of the checker holds and the group converges (every node holds the committed chain)."""
    for s in seeds:
        run_seed(s, 2500, 3 if s % 2 else 5, compact=True)

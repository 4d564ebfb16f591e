"""Raft paper figure 8, scripted: an earlier-term entry replicated on a majority must not be
committed by count, or a later leader can overwrite it.  The deliberately broken variant
(``unsafe_commit_previous_terms``, DLedger 0.3.1.2's rule) must be caught by the checker."""
from __future__ import annotations

import pytest

from dledger.core import Code
from tests.sim.checker import InvariantViolation
from tests.sim.cluster import Cluster


def _cut_all_but(c: Cluster, nid: str, keep: set[str]) -> None:
    for o in c.ids:
        if o != nid and o not in keep:
            c.cut.add((nid, o))
            c.cut.add((o, nid))


def figure8(unsafe: bool) -> Cluster:
    # no leader lease, so the script can move votes around without waiting out timeouts
    c = Cluster(5, seed=8, check_quorum=False, unsafe_commit_previous_terms=unsafe)
    c.elect("n0")
    assert c.propose("n0").code is Code.SUCCESS          # index 0, committed everywhere
    c.stabilize()
    assert all(c.core(i).committed_index == 0 for i in c.ids)
    # (a) n0 replicates A (index 1) to n1 only
    _cut_all_but(c, "n0", {"n1"})
    a = c.propose("n0")
    c.stabilize()
    assert [c.nodes[i].log.ledger_end_index for i in c.ids] == [1, 1, 0, 0, 0]
    # (b) n0 crashes; n4 is elected by n2, n3, n4 and appends B at index 1, alone
    c.crash("n0")
    c.heal()
    c.cut |= {("n4", "n1"), ("n1", "n4")}
    c.elect("n4")
    c.isolate("n4")
    b = c.propose("n4")
    assert b.first_index == a.first_index == 1 and b.term > a.term
    c.stabilize()
    # (c) n4 crashes; n0 restarts, is elected (n1, n2, n3) and copies A to n2: a majority
    c.crash("n4")
    c.heal()
    c.restart("n0")
    _cut_all_but(c, "n0", {"n1", "n2"})
    c.elect("n0")
    c.tick("n0", c.nodes["n0"].cfg.heartbeat_ticks)
    c.stabilize()
    assert [c.nodes[i].log.terms[1] for i in ("n0", "n1", "n2")] == [a.term] * 3
    # (d) n0 crashes before any entry of its own term commits; n4 comes back and wins
    c.crash("n0")
    c.heal()
    c.restart("n4")
    c.elect("n4")
    c.tick("n4", c.nodes["n4"].cfg.heartbeat_ticks)
    c.stabilize()
    return c


def test_figure8_safe_rule_never_commits_by_count() -> None:
    c = figure8(unsafe=False)
    # B replaced A everywhere: A was never committed, so nothing acknowledged was lost
    assert all(c.nodes[i].log.terms[1] == c.core("n4").log.term(1) for i in c.ids if c.nodes[i].alive)
    assert c.nodes["n0"].completions == [(0, 0, 1, Code.SUCCESS)]


def test_figure8_checker_catches_commit_by_count() -> None:
    with pytest.raises(InvariantViolation, match="leader completeness|committed prefixes"):
        figure8(unsafe=True)


def test_figure8_current_term_entry_commits_the_old_one() -> None:
    """(e): once n0 commits an entry of its own term on a majority, A commits with it and n4
    can no longer be elected."""
    c = Cluster(5, seed=8, check_quorum=False)
    c.elect("n0")
    c.propose("n0")
    c.stabilize()
    _cut_all_but(c, "n0", {"n1"})
    a = c.propose("n0")
    c.stabilize()
    c.crash("n0")
    c.heal()
    c.cut |= {("n4", "n1"), ("n1", "n4")}
    c.elect("n4")
    c.isolate("n4")
    c.propose("n4")
    c.crash("n4")
    c.heal()
    c.restart("n0")
    _cut_all_but(c, "n0", {"n1", "n2"})
    c.elect("n0")
    e = c.propose("n0")
    c.stabilize()
    assert c.core("n0").committed_index == e.first_index == a.first_index + 1
    c.crash("n0")
    c.heal()
    c.restart("n4")
    with pytest.raises(AssertionError, match="could not win"):
        c.elect("n4")

"""The Raft paper's replication and commitment rules (§5.3, §5.4.2, §5.5), one test each.

Rules
-----
- Same conventions as ``test_paper.py``: named after the paper's sections, public inputs only,
  assertions on Ready / role / term / commit index, DLedger indexes (first entry 0), ids "1".."n",
  pre-vote and check-quorum off, seeded and I/O-free.
- Where the core follows DLedger rather than the paper (no no-op entry at election unless
  ``leader_barrier``; a follower acknowledges only flushed entries) the docstring says so.
"""
from __future__ import annotations

from typing import Any

import pytest

from dledger.core import (AppendRequest, AppendResponse, Code, Entry, Message, Role)
from tests.dledger.core.harness import Net, apply_ready, drain, flush, make_core


def of(kind: type, msgs: list[Message]) -> list[Any]:
    return [m for m in msgs if isinstance(m, kind)]


def ents(first: int, *terms: int) -> tuple[Entry, ...]:
    return tuple(Entry(first + k, t, f"e{first + k}".encode()) for k, t in enumerate(terms))


# ====================================================================== §5.3 leader

def test_5_3_leader_start_replication() -> None:
    """§5.3: the leader appends the command to its log as a new entry, then issues AppendEntries
    in parallel to each of the other servers (prev = its previous last entry)."""
    net = Net(3)
    net.elect("1")
    net.propose("1", b"a")
    net.stabilize()
    net.clear_sent()
    d = net.propose("1", b"b")
    assert (d.code, d.first_index, d.term) == (Code.SUCCESS, 1, 1)
    assert net.terms_of("1") == [1, 1]            # in the leader's log before anything is sent
    net.process("1")
    reqs = of(AppendRequest, net.sent("1"))
    assert sorted(r.dst for r in reqs) == ["2", "3"]
    assert all((r.term, r.prev_index, r.prev_term, r.commit, r.entries)
               == (1, 0, 1, 0, (Entry(1, 1, b"b"),)) for r in reqs)


def test_5_3_leader_commit_entry() -> None:
    """§5.3: once the entry is replicated on a majority it is committed, the leader answers the
    client (completion SUCCESS) and later AppendEntries carry the new commit index."""
    net = Net(3)
    net.elect("1")
    net.propose("1", b"a")
    net.stabilize()
    leader = net.nodes["1"]
    assert net.core("1").committed_index == 0
    assert [(c.first_index, c.code) for rd in leader.readies for c in rd.completions] == [
        (0, Code.SUCCESS)]
    commits = [r.commit for r in of(AppendRequest, net.sent("1")) if r.dst == "2"]
    assert commits[-1] == 0
    assert [net.core(i).committed_index for i in ("2", "3")] == [0, 0]


@pytest.mark.parametrize("n, acceptors, commits", [
    (1, set(), True),
    (3, set(), False), (3, {"2"}, True), (3, {"2", "3"}, True),
    (5, set(), False), (5, {"2"}, False), (5, {"2", "3"}, True), (5, {"2", "3", "4"}, True),
    (5, {"2", "3", "4", "5"}, True),
])
def test_5_3_leader_acknowledge_commit(n: int, acceptors: set[str], commits: bool) -> None:
    """§5.3: an entry is committed once the leader has replicated it on a majority of servers
    (the leader's own flushed copy counts)."""
    net = Net(n)
    net.elect("1")
    net.stabilize()
    for p in net.ids[1:]:
        if p not in acceptors:
            net.drop_link(p, "1")            # its acknowledgements never arrive
    net.propose("1", b"a")
    net.stabilize()
    assert (net.core("1").committed_index == 0) is commits


@pytest.mark.parametrize("barrier", [False, True])
def test_5_3_leader_commit_preceding_entries(barrier: bool) -> None:
    """§5.3: committing an entry also commits all preceding entries, including those created by
    previous leaders.  DLedger appends no no-op at election (§8), so by default the earlier-term
    entries wait for the first current-term proposal; ``leader_barrier`` is that no-op."""
    logs = {i: [1, 2] for i in ("1", "2", "3")}
    net = Net(3, logs=logs, terms={i: 2 for i in logs}, leader_barrier=barrier)
    net.elect("1")
    net.stabilize()
    assert net.core("1").term == 3
    if barrier:
        assert net.terms_of("1") == [1, 2, 3] and net.core("1").committed_index == 2
    else:
        assert net.core("1").committed_index == -1   # term-2 entries alone do not commit
        net.propose("1", b"now")
        net.stabilize()
        assert net.core("1").committed_index == 2
    assert all(net.core(i).committed_index == 2 and net.terms_of(i) == [1, 2, 3]
               for i in net.ids)


# ====================================================================== §5.3 follower

def test_5_3_follower_commit_entry() -> None:
    """§5.3 / Figure 2: "If leaderCommit > commitIndex, set commitIndex = min(leaderCommit, index
    of last new entry)"."""
    core, log = make_core("2")
    core.step(AppendRequest("1", "2", 1, -1, -1, 0, ents(0, 1, 1)))
    drain(core, log)
    assert core.committed_index == 0
    core.step(AppendRequest("1", "2", 1, 1, 1, 1))
    drain(core, log)
    assert core.committed_index == 1
    core.step(AppendRequest("1", "2", 1, 1, 1, 7, ents(2, 1)))
    drain(core, log)
    assert core.committed_index == 2                # not 7: only what it holds and matched


@pytest.mark.parametrize("prev_index, prev_term, ok", [
    (1, 2, True), (0, 1, True), (-1, -1, True),
    (1, 3, False), (0, 2, False), (2, 2, False), (5, 3, False),
])
def test_5_3_follower_check_append(prev_index: int, prev_term: int, ok: bool) -> None:
    """§5.3: "If the follower does not find an entry in its log with the same index and term
    [as prevLogIndex/prevLogTerm], then it refuses the new entries" (consistency check)."""
    core, log = make_core("2", terms=[1, 2], term=2)
    core.step(AppendRequest("1", "2", 2, prev_index, prev_term, -1, ()))
    [resp] = drain(core, log)
    assert isinstance(resp, AppendResponse) and resp.success is ok
    if not ok:
        assert (resp.reject_index, resp.code) == (prev_index, Code.INCONSISTENT_STATE)
        assert resp.last_index == 1
    assert log.terms == [1, 2]


@pytest.mark.parametrize("prev_index, prev_term, new, expect, truncated", [
    (1, 2, ents(2, 3), [1, 2, 3], None),                 # append after the last entry
    (0, 1, ents(1, 3, 4), [1, 3, 4], 1),                 # conflict at 1: truncated, replaced
    (-1, -1, ents(0, 1), [1, 2], None),                  # already held: nothing changes
    (-1, -1, ents(0, 1, 2), [1, 2], None),               # duplicate / reordered request
    (-1, -1, ents(0, 3), [3], 0),                        # conflict at 0: whole log replaced
])
def test_5_3_follower_append_entries(prev_index: int, prev_term: int, new: tuple[Entry, ...],
                                     expect: list[int], truncated: int | None) -> None:
    """§5.3: "If an existing entry conflicts with a new one (same index but different terms),
    delete the existing entry and all that follow it; append any new entries not already in
    the log" -- and never truncate for entries it already holds."""
    core, log = make_core("2", terms=[1, 2], term=4)
    core.step(AppendRequest("1", "2", 4, prev_index, prev_term, -1, new))
    rd = core.ready()
    assert rd.truncate_from == truncated
    apply_ready(core, log, rd)                    # the driver applies the Ready to its store
    core.advance(rd)
    assert log.terms == expect


FIGURE_7_LEADER = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6]
FIGURE_7 = {
    "a": [1, 1, 1, 4, 4, 5, 5, 6, 6],
    "b": [1, 1, 1, 4],
    "c": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
    "d": [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
    "e": [1, 1, 1, 4, 4, 4, 4],
    "f": [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
}


@pytest.mark.parametrize("name", sorted(FIGURE_7))
def test_5_3_leader_sync_follower_log(name: str) -> None:
    """§5.3, Figure 7: whatever the follower's log (missing entries, extra uncommitted entries,
    or both), the leader of term 8 finds the latest point where the logs agree, and the follower's
    log ends up identical to the leader's."""
    follower = FIGURE_7[name]
    net = Net(3, logs={"1": FIGURE_7_LEADER, "2": follower, "3": FIGURE_7_LEADER},
              terms={"1": 7, "2": 7, "3": 7})
    net.elect("1")                                   # 3 votes for 1; d may refuse (longer term 7)
    assert net.core("1").term == 8
    net.propose("1", b"term 8")
    net.stabilize()
    net.tick("1", net.core("1").cfg.heartbeat_ticks)
    net.stabilize()
    assert net.terms_of("2") == FIGURE_7_LEADER + [8]
    assert net.nodes["2"].log.datas == net.nodes["1"].log.datas
    assert net.core("2").committed_index == len(FIGURE_7_LEADER)


def test_5_3_follower_acknowledges_only_flushed_entries() -> None:
    """Figure 2 (persist before responding), in DLedger's form: the follower acknowledges an
    entry only once its store has flushed it (``on_persisted``), so a majority ack is durable."""
    core, log = make_core("2")
    core.step(AppendRequest("1", "2", 1, -1, -1, -1, ents(0, 1, 1)))
    out = drain(core, log, auto_flush=False)
    assert out == [] and log.terms == [1, 1] and log.durable == 0
    flush(core, log)
    [ack] = drain(core, log, auto_flush=False)
    assert isinstance(ack, AppendResponse) and ack.success and ack.match_index == 1


# ====================================================================== §5.4.2 / §5.5

def test_5_4_2_leader_only_commits_log_from_current_term() -> None:
    """§5.4.2, Figure 8: "Raft never commits log entries from previous terms by counting
    replicas" -- an earlier-term entry stored on every server stays uncommitted until an entry of
    the leader's own term is replicated on a majority."""
    net = Net(3, logs={"1": [1, 2], "2": [1], "3": [1]}, terms={"1": 2, "2": 2, "3": 2})
    net.elect("1")
    net.stabilize()
    net.tick("1", net.core("1").cfg.heartbeat_ticks)
    net.stabilize()
    assert [net.terms_of(i) for i in net.ids] == [[1, 2]] * 3
    assert [p.match_index for p in net.core("1").status().peers] == [1, 1]
    assert net.core("1").committed_index == -1
    net.propose("1", b"term 3")
    net.stabilize()
    assert net.core("1").committed_index == 2


def test_5_4_2_figure_8_unsafe_rule_would_commit() -> None:
    """The test above can fail: with DLedger 0.3.1.2's rule (``unsafe_commit_previous_terms``,
    counting replicas of earlier-term entries) the same scenario commits index 1 at once."""
    net = Net(3, logs={"1": [1, 2], "2": [1], "3": [1]}, terms={"1": 2, "2": 2, "3": 2},
              unsafe_commit_previous_terms=True)
    net.elect("1")
    net.stabilize()
    assert net.core("1").committed_index == 1


def test_5_5_leader_retries_until_the_follower_answers() -> None:
    """§5.5: "If a follower or candidate crashes ... Raft handles these failures by retrying
    indefinitely; if the crashed server restarts, then the RPC will complete successfully"."""
    net = Net(3)
    net.elect("1")
    net.isolate("3")
    for k in range(3):
        net.propose("1", f"c{k}".encode())
        net.stabilize()
    for _ in range(10):
        net.tick("1", net.core("1").cfg.heartbeat_ticks)
        net.stabilize()
    assert net.terms_of("3") == []
    net.heal()
    for _ in range(10):
        net.tick("1", net.core("1").cfg.heartbeat_ticks)
        net.stabilize()
    assert net.terms_of("3") == [1, 1, 1] and net.core("3").committed_index == 2
    assert net.core("1").role is Role.LEADER

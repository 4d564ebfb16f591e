"""AppendAndPushTest / BatchPushTest (DLedger 0.3.1.2) ported to the core + simulation, plus
flow control, persistence-gated acks, fast back-off and the leader barrier."""
from __future__ import annotations

from dledger.core import AppendRequest, AppendResponse, Code, Message, Role
from tests.sim.cluster import Cluster


def _same_logs(c: Cluster) -> None:
    logs = {i: (c.nodes[i].log.terms, c.nodes[i].log.datas) for i in c.ids}
    first = logs[c.ids[0]]
    assert all(v == first for v in logs.values()), {i: len(v[0]) for i, v in logs.items()}


def test_push_committed_index_to_late_follower() -> None:
    c = Cluster(3, seed=21)
    ld = c.wait_leader()
    late = next(i for i in c.ids if i != ld)
    c.crash(late)
    for _ in range(10):
        assert c.propose(ld).code is Code.SUCCESS
    c.stabilize()
    assert c.core(ld).committed_index == 9
    c.restart(late)
    c.tick_all(10)
    assert c.core(late).committed_index == 9
    _same_logs(c)


def test_network_offline_times_out_then_pending_full() -> None:
    c = Cluster(3, seed=22, check_quorum=False, max_pending=10, max_wait_ack_ticks=30)
    ld = c.wait_leader()
    c.isolate(ld)
    assert c.propose(ld).code is Code.SUCCESS
    c.tick(ld, 30)
    assert [x[3] for x in c.nodes[ld].completions] == [Code.WAIT_QUORUM_ACK_TIMEOUT]
    codes = [c.propose(ld).code for _ in range(11)]
    assert codes == [Code.SUCCESS] * 10 + [Code.LEADER_PENDING_FULL]
    c.heal()
    c.tick_all(5)          # the timed-out entry and the ten queued ones all commit now
    assert [x[3] for x in c.nodes[ld].completions[1:]] == [Code.SUCCESS] * 10
    assert c.core(ld).committed_index == 10


def test_unstable_network_converges() -> None:
    c = Cluster(3, seed=23, delay=(1, 150), drop=0.2, dup=0.1)
    acked = 0
    for _ in range(150):
        ld = c.leader()
        if ld is not None:
            c.propose(ld, 2)
        c.tick_all(1)
    c.drop_p = c.dup_p = 0.0
    c.tick_all(30)
    ld = c.leader()
    assert ld is not None
    acked = sum(1 for x in c.nodes[ld].completions if x[3] is Code.SUCCESS)
    assert acked > 10 and c.checker.acked >= acked
    assert len({c.core(i).committed_index for i in c.ids}) == 1
    _same_logs(c)


def test_missed_pushes_every_third_dropped() -> None:
    c = Cluster(3, seed=24, max_batch_entries=2)
    ld = c.wait_leader()
    seen = [0]

    def every_third(m: Message) -> bool:
        if isinstance(m, AppendRequest) and m.entries:
            seen[0] += 1
            return seen[0] % 3 == 0
        return False

    c.filters.append(every_third)
    for _ in range(30):
        c.propose(ld)
    c.stabilize()
    c.tick_all(30)
    assert seen[0] > 10
    assert all(c.core(i).committed_index == 29 for i in c.ids)
    _same_logs(c)


def test_old_leader_suffix_truncated() -> None:
    c = Cluster(3, seed=25)
    old = c.wait_leader()
    for _ in range(5):
        c.propose(old)
    c.stabilize()
    c.isolate(old)
    for _ in range(5):                               # 5..9 only on the old leader
        assert c.propose(old).code is Code.SUCCESS
    new = c.wait_new_leader(old)
    decisions = [c.propose(new) for _ in range(10)]
    assert [d.first_index for d in decisions] == list(range(5, 15))
    c.stabilize()
    c.heal()
    c.tick_all(25)
    assert c.core(old).role is Role.FOLLOWER
    assert [x[3] for x in c.nodes[old].completions[5:]] == [Code.NOT_LEADER] * 5
    assert all(c.core(i).committed_index == 14 for i in c.ids)
    _same_logs(c)


def test_batch_append_is_one_proposal_and_batches_respect_limits() -> None:
    c = Cluster(3, seed=26, max_batch_entries=4, max_batch_bytes=40, max_inflight=2)
    ld = c.wait_leader()
    sent: list[AppendRequest] = []
    inflight_peak = [0]

    def spy(m: Message) -> bool:
        if isinstance(m, AppendRequest) and m.entries:
            sent.append(m)
        pr = c.core(ld).prs if c.core(ld).role is Role.LEADER else {}
        inflight_peak[0] = max([inflight_peak[0], *(len(p.inflight) for p in pr.values())])
        return False

    c.filters.append(spy)
    d = c.propose(ld, 25)
    assert (d.first_index, d.last_index) == (0, 24)
    c.stabilize()
    c.tick_all(3)
    assert c.nodes[ld].completions == [(0, 24, d.term, Code.SUCCESS)]
    assert sent and all(len(m.entries) <= 4 for m in sent)
    assert all(len(m.entries) == 1 or sum(len(e.data) for e in m.entries) <= 40 for m in sent)
    assert 0 < inflight_peak[0] <= 2
    _same_logs(c)


def test_follower_acks_only_flushed_entries_and_leader_commits_only_flushed() -> None:
    c = Cluster(3, seed=27, auto_flush=False)
    ld = c.wait_leader()
    for i in c.ids:
        c.flush(i)
    acks: list[AppendResponse] = []
    c.filters.append(lambda m: isinstance(m, AppendResponse) and bool(acks.append(m)))
    d = c.propose(ld, 3)
    c.stabilize()
    assert all(a.match_index < d.first_index for a in acks if a.success)
    assert c.core(ld).committed_index < d.first_index
    f = next(i for i in c.ids if i != ld)
    c.flush(f)
    c.stabilize()
    assert any(a.success and a.match_index == d.last_index for a in acks)
    assert c.core(ld).committed_index < d.first_index   # the leader itself has not flushed
    c.flush(ld)
    assert c.core(ld).committed_index == d.last_index


def test_fast_backoff_over_long_divergent_suffix() -> None:
    c = Cluster(3, seed=28, max_batch_entries=64, max_batch_bytes=1 << 16)
    old = c.wait_leader()
    c.propose(old)
    c.stabilize()
    c.isolate(old)
    for _ in range(40):
        c.propose(old)                               # 40 divergent entries on the old leader
    new = c.wait_new_leader(old)
    for _ in range(40):
        c.propose(new)
    c.stabilize()
    rejects: list[AppendResponse] = []
    c.filters.append(lambda m: isinstance(m, AppendResponse) and not m.success
                     and m.dst == new and bool(rejects.append(m)))
    c.heal()
    c.filters.append(lambda m: False)
    c.tick_all(25)
    _same_logs(c)
    assert len(rejects) <= 3, rejects


def test_leader_barrier_commits_previous_term_tail() -> None:
    c = Cluster(3, seed=29, leader_barrier=True)
    ld = c.wait_leader()
    assert c.nodes[ld].log.datas == []      # a fully committed (empty) log needs no barrier
    c.propose(ld, 2)
    # strand an uncommitted tail: followers get the entries but never report back
    c.filters.append(lambda m: isinstance(m, AppendResponse))
    c.propose(ld, 3)
    c.stabilize()
    tail_end = c.core(ld).log.last_index
    assert c.core(ld).committed_index < tail_end
    c.crash(ld)
    c.filters.clear()
    new = c.wait_leader()
    c.tick_all(3)
    # no client proposal needed: the new leader's barrier commits the earlier-term tail
    assert c.nodes[new].log.datas[tail_end + 1] == b"barrier"
    assert c.core(new).committed_index == tail_end + 1


def test_propose_before_barrier_is_handed_out_is_not_ready() -> None:
    c = Cluster(1, seed=30, leader_barrier=True)
    core = c.core("n0")
    core.campaign()
    assert core.role is Role.LEADER
    assert c.propose("n0").code is Code.SUCCESS    # empty, fully committed log: no barrier
    c.process("n0")
    c.flush("n0")
    # restart without a checkpoint: the durable entry is not known to be committed
    c.crash("n0")
    c.restart("n0")
    core = c.core("n0")
    core.campaign()
    assert core.role is Role.LEADER
    assert core.propose().code is Code.LEADER_NOT_READY
    c.process("n0")
    assert core.propose().code is Code.SUCCESS
    assert c.nodes["n0"].log.datas[1] == b"barrier"


def test_abandoned_proposal_frees_its_indexes() -> None:
    """A driver whose store refused a proposal's entries takes the indexes back; the next
    proposal reuses them and replication goes on as if the failed one never happened."""
    import pytest

    c = Cluster(3, seed=31)
    ld = c.wait_leader()
    assert c.propose(ld, 2).code is Code.SUCCESS
    c.stabilize()
    core = c.core(ld)
    end, pending = core.log.last_index, core.status().pending
    d = core.propose(3)  # the driver's write fails: nothing is appended to the store
    assert d.code is Code.SUCCESS and d.first_index == end + 1
    core.abandon_proposal(d)
    assert core.log.last_index == end and core.status().pending == pending
    with pytest.raises(RuntimeError):
        core.abandon_proposal(d)  # no longer the tail
    c.process(ld)
    assert c.propose(ld, 1).first_index == end + 1
    c.stabilize()
    assert core.committed_index == end + 1
    _same_logs(c)
    # too late once the entries may have been pushed
    d = c.propose(ld, 1)
    with pytest.raises(RuntimeError):
        core.abandon_proposal(d)

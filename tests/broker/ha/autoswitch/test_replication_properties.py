"""Property: two replicas under random writes, syncs and failovers, replicated only through the
sans-I/O machines (tests/broker/ha/autoswitch/harness.py), always converge -- the follower's log
and epoch history become the leader's -- and no byte synced before a failover is ever lost."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.autoswitch.sync_state import AppendEpochEntry, ChangeToMaster, TruncateEpochSuffixByEpoch
from tests.broker.ha.autoswitch.harness import Pump, Replica

FILE = 256

ops_st = st.lists(st.tuples(st.sampled_from(["write", "sync", "failover", "reelect"]), st.integers(1, 300)),
                  min_size=1, max_size=25)


def become_master(r: Replica, epoch: int) -> None:
    """sync_state.ChangeToMaster's epoch steps (nothing dirty to cut: the log is whole)."""
    steps = ChangeToMaster(epoch).finish(r.epochs.get_all_entries(), truncate_offset=-1, max_phy_offset=r.max_offset)
    for step in steps:
        if isinstance(step, TruncateEpochSuffixByEpoch):
            r.epochs.truncate_suffix_by_epoch(step.epoch)
        elif isinstance(step, AppendEpochEntry):
            assert r.epochs.append_entry(step.entry)


def pairs(r: Replica) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in r.epochs.get_all_entries()]


def sync(leader: Replica, follower: Replica) -> Pump:
    p = Pump.start(leader, follower, batch=100, file_size=FILE)
    p.run()
    p.tick(5001)  # a heartbeat: an empty master's epoch reaches the follower this way
    return p


@settings(max_examples=120, deadline=None)
@given(ops=ops_st)
def test_replicas_converge_and_synced_bytes_survive(ops):
    a, b = Replica(file_size=FILE), Replica(file_size=FILE)
    leader, follower = a, b
    epoch = 1
    become_master(leader, epoch)
    leader.append(0, b"genesis")  # a first epoch holding bytes on both (see the bootstrap test)
    assert sync(leader, follower).closed is None
    seed = 0
    durable = leader.bytes_from(0)  # bytes both replicas held at the last sync: never lost
    in_sync = True  # the follower is in the SyncStateSet (an election makes it {new master} alone)
    for op, n in ops:
        if op == "write":
            seed += 1
            leader.append(leader.max_offset, bytes((seed * 31 + i) % 256 for i in range(n)))
        elif op == "sync":
            p = sync(leader, follower)
            assert p.closed is None, p.closed
            assert follower.bytes_from(0) == leader.bytes_from(0)
            durable, in_sync = leader.bytes_from(0), True
        elif op == "failover":
            if not in_sync:  # the controller elects only from the SyncStateSet
                continue
            in_sync = False
            epoch += 1
            leader, follower = follower, leader
            become_master(leader, epoch)
        else:  # the same leader elected again in a new epoch
            epoch += 1
            become_master(leader, epoch)
        assert leader.bytes_from(0)[:len(durable)] == durable
    p = sync(leader, follower)
    assert p.closed is None, p.closed
    assert follower.max_offset == leader.max_offset
    assert follower.bytes_from(0) == leader.bytes_from(0)
    # every epoch: those holding bytes come with frames, the current one also with a heartbeat
    assert pairs(follower) == pairs(leader)
    assert leader.bytes_from(0)[:len(durable)] == durable


def test_bootstrap_edge_is_refused_not_diverged():
    """The first master wrote its first bytes and died before any reached the follower: the new
    master's only epoch held nothing, so it is dropped (sync_state's named divergence) and the
    old master shares no epoch with it. It is refused with the reason, never silently kept with
    its own bytes under the new master's (what Apache's refused appendEntry leads to)."""
    a, b = Replica(file_size=FILE), Replica(file_size=FILE)
    become_master(a, 1)
    assert sync(a, b).closed is None and pairs(b) == [(1, 0)]  # learned from a heartbeat
    a.append(0, b"x")
    become_master(b, 2)
    assert pairs(b) == [(2, 0)]
    b.append(0, b"yy")
    p = sync(b, a)
    assert p.closed is not None and "no consistent point" in p.closed
    assert a.bytes_from(0) == b"x"

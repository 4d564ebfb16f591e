"""The master's SyncStateSet bookkeeping, confirm offset, put-acknowledgement rules and the
changeToMaster plan (broker/ha/autoswitch/sync_state.py), as Apache 5.3.3's AutoSwitchHAService,
CommitLog.getConfirmOffset and GroupTransferService.doWaitTransfer."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.autoswitch.epoch_file import EpochEntry, EpochFileCache
from broker.ha.autoswitch.sync_state import (
    ALL_ACK_IN_SYNC_STATE_SET,
    AckPolicy,
    AppendEpochEntry,
    ChangeToMaster,
    DestroyConnections,
    RecoverTopicQueueTable,
    Refused,
    SetStateMachineVersion,
    StopHAClient,
    SyncStateSet,
    TruncateEpochSuffixByEpoch,
    TruncateEpochSuffixByOffset,
    TruncateInvalidMsg,
    UpdateConfirmOffset,
    WaitDispatch,
    change_to_master_when_last_role_is_master,
    change_to_slave_allowed,
    need_ack_nums,
    transfer_ok,
)

E = EpochEntry
LEADER = E(2, 1000)


def master_alone(all_ack: bool = False) -> SyncStateSet:
    s = SyncStateSet(1, ha_max_time_slave_not_catchup_ms=15000, all_ack_in_sync_state_set=all_ack)
    s.set_sync_state_set({1}, 1000)
    return s


# ---------------------------------------------------------------------------------- expand


def test_expand_when_the_ack_reaches_the_confirm_offset_and_the_leader_epoch():
    s = master_alone()
    s.connection_added(2)
    # allAckInSyncStateSet off: the confirm offset is the master's max offset (2000)
    assert s.on_slave_ack(2, 1999, 10.0, max_phy_offset=2000, leader_epoch=LEADER) is None
    assert not s.synchronizing
    assert s.on_slave_ack(2, 2000, 11.0, max_phy_offset=2000, leader_epoch=LEADER) == {1, 2}
    assert s.synchronizing and s.get_local_sync_state_set() == {1}
    assert s.get_sync_state_set() == {1, 2} and s.in_sync_replicas_nums() == 2
    assert s.caught_up_ms == {2: 11.0}
    s.set_sync_state_set({1, 2}, 2000)  # the controller agreed
    assert not s.synchronizing and s.get_sync_state_set() == {1, 2}
    # a member is never proposed again
    assert s.maybe_expand(2, 5000, max_phy_offset=5000, leader_epoch=LEADER) is None


def test_expand_needs_an_offset_inside_the_current_leader_epoch():
    s = SyncStateSet(1, all_ack_in_sync_state_set=True)
    s.connection_added(2)
    s.connection_added(3)
    s.acks[2] = 900
    s.set_sync_state_set({1, 2}, 2000)
    assert s.get_confirm_offset(2000) == 900
    # 3 reached the confirm offset (900) but not epoch 2's start (1000): stays out
    assert s.maybe_expand(3, 950, max_phy_offset=2000, leader_epoch=LEADER) is None
    assert s.maybe_expand(3, 1000, max_phy_offset=2000, leader_epoch=LEADER) == {1, 2, 3}
    # below the confirm offset: out
    t = SyncStateSet(1, all_ack_in_sync_state_set=True)
    t.connection_added(2)
    t.acks[2] = 1800
    t.set_sync_state_set({1, 2}, 2000)
    assert t.maybe_expand(3, 1700, max_phy_offset=2000, leader_epoch=LEADER) is None
    assert t.maybe_expand(3, 1800, max_phy_offset=2000, leader_epoch=LEADER) == {1, 2, 3}


def test_ack_without_the_caught_up_rule_never_expands():
    s = master_alone()
    s.connection_added(2)
    assert s.on_slave_ack(2, 5000, None, max_phy_offset=2000, leader_epoch=LEADER) is None
    assert s.get_sync_state_set() == {1} and s.acks[2] == 5000 and s.caught_up_ms == {}


# ---------------------------------------------------------------------------------- shrink


def test_shrink_after_ha_max_time_slave_not_catchup():
    s = master_alone()
    for sid in (2, 3):
        s.connection_added(sid)
        s.update_connection_last_caught_up_time(sid, 1000.0)
    s.set_sync_state_set({1, 2, 3}, 2000)
    s.update_connection_last_caught_up_time(3, 5000.0)
    assert s.maybe_shrink(16000.0) == ({1, 2, 3}, False)  # 15000 ms is not more than 15000
    assert not s.synchronizing
    assert s.maybe_shrink(16000.1) == ({1, 3}, True)
    assert s.synchronizing and s.get_sync_state_set() == {1, 2, 3}  # union while synchronizing
    assert s.in_sync_replicas_nums() == 3
    # the caught-up time only moves forward (updateConnectionLastCaughtUpTime's max)
    s.update_connection_last_caught_up_time(3, 10.0)
    assert s.caught_up_ms[3] == 5000.0


def test_shrink_drops_a_member_never_seen_but_keeps_the_master():
    s = master_alone()
    s.set_sync_state_set({1, 4}, 2000)
    assert s.maybe_shrink(0.0) == ({1}, True)
    anonymous = SyncStateSet(None)
    anonymous.set_sync_state_set({1}, 0)
    assert anonymous.maybe_shrink(0.0) == (frozenset(), True)  # no local id known: Apache drops it too


def test_a_closed_connection_leaves_the_proposal():
    s = master_alone()
    s.connection_added(2)
    s.set_sync_state_set({1, 2}, 2000)
    assert s.connection_removed(3) is None
    assert s.connection_removed(2) == {1}
    assert s.synchronizing and 2 not in s.acks


# ---------------------------------------------------------------------------- confirm offset


def test_compute_confirm_offset_is_the_min_over_connected_members_with_an_ack():
    s = SyncStateSet(1, all_ack_in_sync_state_set=True)
    for sid, ack in ((2, 1500), (3, 0), (4, 700)):
        s.connection_added(sid)
        s.acks[sid] = ack
    s.set_sync_state_set({1, 2, 3}, 2000)
    # 3's ack 0 is skipped, 4 is not a member
    assert s.compute_confirm_offset(2000) == 1500 == s.get_confirm_offset(2000)
    s.on_slave_ack(2, 1800, None, max_phy_offset=2100, leader_epoch=LEADER)
    assert s.confirm_offset == 1800
    s.on_slave_ack(4, 100, None, max_phy_offset=2200, leader_epoch=LEADER)  # not a member: unchanged
    assert s.confirm_offset == 1800


def test_a_member_without_connection_freezes_the_confirm_offset():
    # Apache issue 6662: computeConfirmOffset returns the stored value
    s = SyncStateSet(1, all_ack_in_sync_state_set=True)
    s.connection_added(2)
    s.acks[2] = 1500
    s.set_sync_state_set({1, 2}, 2000)
    assert s.confirm_offset == 1500
    s.acks.pop(2)
    s.set_sync_state_set({1, 2}, 3000)
    assert s.confirm_offset == 1500


def test_get_confirm_offset_is_the_max_offset_when_alone_or_without_all_ack():
    alone = master_alone(all_ack=True)
    assert alone.get_confirm_offset(777) == 777
    off = SyncStateSet(1, all_ack_in_sync_state_set=False)
    off.connection_added(2)
    off.acks[2] = 5
    off.set_sync_state_set({1, 2}, 100)
    assert off.get_confirm_offset(100) == 100 and off.confirm_offset == 5
    lazy = SyncStateSet(1, all_ack_in_sync_state_set=True)
    lazy.local = {1, 2}
    lazy.acks = {2: 40}
    assert lazy.confirm_offset == -1 and lazy.get_confirm_offset(100) == 40 and lazy.confirm_offset == 40


def test_apaches_confirm_offset_can_move_back_when_the_controller_answers_late():
    # the named divergence from "never moves back": kept as Apache, the lower value is true
    s = master_alone(all_ack=True)
    s.connection_added(2)
    assert s.on_slave_ack(2, 1000, 1.0, max_phy_offset=1000, leader_epoch=LEADER) == {1, 2}
    assert s.get_confirm_offset(1200) == 1200  # local set still the master alone
    s.set_sync_state_set({1, 2}, 1200)  # the answer arrives after the master wrote 200 more
    assert s.get_confirm_offset(1200) == 1000


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["write", "transfer", "ack", "shrink", "close"]),
                              st.integers(2, 4), st.integers(0, 300)), max_size=40))
def test_confirm_offset_never_moves_back_when_the_controller_agrees_at_once(ops):
    s = master_alone(all_ack=True)
    max_phy, now, last_transfer_max = 1000, 0.0, -1
    acked = {sid: 0 for sid in (2, 3, 4)}
    for sid in acked:
        s.connection_added(sid)
    last = s.get_confirm_offset(max_phy)
    for op, sid, n in ops:
        now += n
        if op == "write":
            max_phy += n
        elif op == "transfer":
            last_transfer_max = max_phy
        elif op == "ack" and sid in s.acks:
            acked[sid] = min(max_phy, acked[sid] + n * 10)  # acks only grow, never past the master
            # AutoSwitchHAConnection.maybeExpandInSyncStateSet's connection-level rule
            caught = now if acked[sid] >= last_transfer_max else None
            proposal = s.on_slave_ack(sid, acked[sid], caught, max_phy_offset=max_phy, leader_epoch=E(1, 0))
            if proposal is not None:
                s.set_sync_state_set(proposal, max_phy)
        elif op == "shrink":
            proposal, changed = s.maybe_shrink(now)
            if changed:
                s.set_sync_state_set(proposal, max_phy)
        elif op == "close" and sid in s.acks:
            proposal = s.connection_removed(sid)
            if proposal is not None:
                s.set_sync_state_set(proposal, max_phy)
        confirm = s.get_confirm_offset(max_phy)
        assert confirm >= last, (op, sid, confirm, last)
        assert confirm <= max_phy
        last = confirm


# ------------------------------------------------------------------------------------ puts


@pytest.mark.parametrize("policy, nums, expected", [
    (AckPolicy(), 1, 1),
    (AckPolicy(in_sync_replicas=2, min_in_sync_replicas=2), 1, None),  # IN_SYNC_REPLICAS_NOT_ENOUGH
    (AckPolicy(in_sync_replicas=2, min_in_sync_replicas=2), 2, 2),
    (AckPolicy(all_ack_in_sync_state_set=True), 3, ALL_ACK_IN_SYNC_STATE_SET),
    (AckPolicy(min_in_sync_replicas=2, all_ack_in_sync_state_set=True), 1, None),
])
def test_need_ack_nums(policy, nums, expected):
    assert need_ack_nums(policy, nums) == expected


def test_transfer_ok_rules():
    members, acks = {1, 2, 3}, {2: 500, 3: 400, 4: 900}
    all_ = ALL_ACK_IN_SYNC_STATE_SET
    assert transfer_ok(all_, 400, sync_state_set=members, acks=acks, push_to_slave_max_offset=0)
    assert not transfer_ok(all_, 450, sync_state_set=members, acks=acks, push_to_slave_max_offset=900)
    assert transfer_ok(all_, 10 ** 9, sync_state_set={1}, acks={}, push_to_slave_max_offset=0)  # master alone
    # counting mode: any connection counts, the master is one
    assert transfer_ok(2, 900, sync_state_set=members, acks=acks, push_to_slave_max_offset=0)
    assert transfer_ok(3, 500, sync_state_set=members, acks=acks, push_to_slave_max_offset=0)
    assert not transfer_ok(3, 501, sync_state_set=members, acks=acks, push_to_slave_max_offset=0)
    # one ack asked: the furthest slave push decides (GroupTransferService's ackNums <= 1 branch)
    assert transfer_ok(1, 900, sync_state_set=members, acks={}, push_to_slave_max_offset=900)
    assert not transfer_ok(1, 901, sync_state_set=members, acks={}, push_to_slave_max_offset=900)


@settings(max_examples=200, deadline=None)
@given(members=st.sets(st.integers(1, 6), min_size=1), acks=st.dictionaries(st.integers(2, 9), st.integers(0, 100)),
       outsider=st.integers(7, 9), outsider_ack=st.integers(0, 100), offset=st.integers(0, 100))
def test_a_slave_outside_the_set_never_counts_for_all_ack(members, acks, outsider, outsider_ack, offset):
    members = members | {1}
    without = {k: v for k, v in acks.items() if k in members}
    with_outsider = {**without, outsider: outsider_ack}
    assert transfer_ok(ALL_ACK_IN_SYNC_STATE_SET, offset, sync_state_set=members, acks=with_outsider,
                       push_to_slave_max_offset=100) == transfer_ok(
        ALL_ACK_IN_SYNC_STATE_SET, offset, sync_state_set=members, acks=without, push_to_slave_max_offset=100)


# --------------------------------------------------------------------------- changeToMaster


def apply(cache: EpochFileCache, steps) -> None:
    for step in steps:
        if isinstance(step, TruncateEpochSuffixByOffset):
            cache.truncate_suffix_by_offset(step.offset)
        elif isinstance(step, TruncateEpochSuffixByEpoch):
            cache.truncate_suffix_by_epoch(step.epoch)
        elif isinstance(step, AppendEpochEntry):
            assert cache.append_entry(step.entry)


def cache_of(*entries: EpochEntry) -> EpochFileCache:
    c = EpochFileCache()
    for e in entries:
        assert c.append_entry(e)
    return c


def test_change_to_master_refuses_an_older_epoch():
    assert ChangeToMaster(2).begin(3) == Refused("newMasterEpoch 2 < lastEpoch 3")
    assert ChangeToMaster(3).begin(3) == [DestroyConnections(), StopHAClient(), TruncateInvalidMsg()]


@pytest.mark.parametrize("before, epoch, truncate_offset, max_phy, after", [
    # nothing cut: the new epoch starts at the log's end
    ([E(1, 0)], 2, -1, 1570, [E(1, 0), E(2, 1570)]),
    # a dirty tail cut at 1500 takes the epochs that began at or after it
    ([E(1, 0), E(2, 1600)], 3, 1500, 1500, [E(1, 0), E(3, 1500)]),
    # elected again in the same epoch: that epoch is replaced at the new start
    ([E(1, 0), E(2, 100)], 2, -1, 300, [E(1, 0), E(2, 300)]),
    # a fresh store
    ([], 1, -1, 0, [E(1, 0)]),
    # elected where epoch 2 began, holding none of its bytes: epoch 2 is dropped, not kept as the
    # label of the new writes (Apache's appendEntry would refuse <3, 1000> and keep <2, 1000>)
    ([E(1, 0), E(2, 1000)], 3, -1, 1000, [E(1, 0), E(3, 1000)]),
    # the same after a cut of the dirty tail at 1000
    ([E(1, 0), E(2, 1000)], 3, 1200, 1000, [E(1, 0), E(3, 1000)]),
])
def test_change_to_master_plan_on_the_epoch_cache(before, epoch, truncate_offset, max_phy, after):
    cache = cache_of(*before)
    steps = ChangeToMaster(epoch).finish(cache.get_all_entries(), truncate_offset=truncate_offset,
                                         max_phy_offset=max_phy)
    assert steps[0] == UpdateConfirmOffset()
    assert steps[-3:] == [WaitDispatch(), RecoverTopicQueueTable(), SetStateMachineVersion(epoch)]
    apply(cache, steps)
    assert [(e.epoch, e.start_offset) for e in cache.get_all_entries()] == [(e.epoch, e.start_offset) for e in after]


def test_change_roles_without_truncation():
    steps = change_to_master_when_last_role_is_master(2, [E(1, 0), E(2, 10)], 50)
    assert steps == [TruncateEpochSuffixByEpoch(2), AppendEpochEntry(E(2, 50)), SetStateMachineVersion(2)]
    assert change_to_master_when_last_role_is_master(1, [E(2, 10)], 50) == Refused("newMasterEpoch 1 < lastEpoch 2")
    assert change_to_master_when_last_role_is_master(3, [E(1, 0), E(2, 50)], 50) == [
        TruncateEpochSuffixByEpoch(2), AppendEpochEntry(E(3, 50)), SetStateMachineVersion(3)]
    assert change_to_slave_allowed(3, 3) is None
    assert change_to_slave_allowed(2, 3) == Refused("newMasterEpoch 2 < lastEpoch 3")

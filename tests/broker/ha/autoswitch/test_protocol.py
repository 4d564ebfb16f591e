"""AutoSwitch HA state machines (broker/ha/autoswitch/protocol.py): every table row driven for
real, the truncation decision (the pure cases of Apache's AutoSwitchHATest), transfers that never
cross an epoch end, in-memory replication between two replicas, and fuzzed input."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.autoswitch.epoch_file import EpochEntry, EpochFileCache
from broker.ha.autoswitch.frames import (
    HAConnectionState as S,
)
from broker.ha.autoswitch.frames import (
    MasterHandshake,
    SlaveHandshake,
    TransferFrame,
    encode_master_handshake,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer,
)
from broker.ha.autoswitch.protocol import (
    MASTER_TRANSITIONS,
    SLAVE_TRANSITIONS,
    AppendData,
    AppendEpoch,
    Close,
    Ev,
    MasterMachine,
    Send,
    SetConfirmOffset,
    SlaveAcked,
    SlaveMachine,
    Step,
    decide_truncation,
)
from tests.broker.ha.autoswitch.harness import Pump, Replica

LONG_MAX = 2 ** 63 - 1
E = EpochEntry


def data(n: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


# ------------------------------------------------------------------------ truncation decision


def test_new_replica_skips_truncation_and_requests_its_max():
    # AutoSwitchHAClient.doTruncate: an empty epoch cache means a new replica
    d = decide_truncation([], 0, [E(1, 0)], 500)
    assert (d.event, d.request_offset) == (Ev.HANDSHAKE_NEW_REPLICA, 0)
    assert decide_truncation([], 300, [E(1, 0)], 500).request_offset == 300


@pytest.mark.parametrize("local, local_max, master, master_max, point", [
    # same history, slave behind: resume at its own end
    ([E(1, 0)], 300, [E(1, 0)], 500, 300),
    # old master with an unreplicated tail of epoch 1; the new master started epoch 2 at 1570
    # (AutoSwitchHATest.testChangeRoleManyTimes / design.md's truncation example)
    ([E(1, 0)], 1700, [E(1, 0), E(2, 1570)], 3270, 1570),
    # both saw epoch 2 from the same start: the smaller end
    ([E(1, 0), E(2, 1570)], 2000, [E(1, 0), E(2, 1570), E(3, 2500)], 4000, 2000),
    ([E(1, 0), E(2, 1570)], 3000, [E(1, 0), E(2, 1570), E(3, 2500)], 4000, 2500),
    # the slave's epoch 3 started elsewhere than the master's: back to epoch 2's common end
    ([E(1, 0), E(2, 1570), E(3, 2600)], 3000, [E(1, 0), E(2, 1570), E(3, 2500)], 4000, 2500),
    # the master's prefix was truncated (testTruncateEpochLogAndChangeMaster): epoch 2 still shared
    ([E(1, 0), E(2, 1570)], 3270, [E(2, 1570), E(3, 3270)], 5000, 3270),
])
def test_consistent_point(local, local_max, master, master_max, point):
    d = decide_truncation(local, local_max, master, master_max)
    assert (d.event, d.request_offset) == (Ev.HANDSHAKE_CONSISTENT, point)


@pytest.mark.parametrize("local, master, why", [
    ([E(3, 0)], [E(1, 0), E(2, 100)], "no epoch with the same start offset"),
    ([E(1, 0)], [E(1, 10)], "no epoch with the same start offset"),
    ([E(1, 0)], [E(2, 0), E(1, 5)], "not in order"),
])
def test_no_consistent_point_is_refused_with_a_reason(local, master, why):
    d = decide_truncation(local, 100, master, 200)
    assert d.event is Ev.HANDSHAKE_NO_CONSISTENT_POINT and d.request_offset == -1
    assert why in d.reason


# ----------------------------------------------------------------------------- table rows


def _kinds(step: Step):
    return tuple(a.kind for a in step.actions)


def _slave_in(state: S, local_max: int = 0) -> SlaveMachine:
    s = SlaveMachine(2, heartbeat_interval_ms=5000, housekeeping_interval_ms=20000)
    if state is not S.READY:
        s.connected(0.0, local_max)
    if state is S.TRANSFER:
        s.receive_data(encode_master_handshake(MasterHandshake(100, 1, (E(1, 0),))), 0.0)
        step = s.next_step(0.0, local_max, [])
        assert step is not None and step.state is S.TRANSFER
    return s


def _feed_slave(s: SlaveMachine, raw: bytes, local_max: int = 0, local=()):
    s.receive_data(raw, 1.0)
    return s.next_step(1.0, local_max, list(local))


SLAVE_ROWS = {
    (S.READY, Ev.CONNECTED): lambda: SlaveMachine(2).connected(0.0, 0),
    (S.HANDSHAKE, Ev.HANDSHAKE_NEW_REPLICA): lambda: _feed_slave(
        _slave_in(S.HANDSHAKE), encode_master_handshake(MasterHandshake(9, 1, (E(1, 0),)))),
    (S.HANDSHAKE, Ev.HANDSHAKE_CONSISTENT): lambda: _feed_slave(
        _slave_in(S.HANDSHAKE, 50), encode_master_handshake(MasterHandshake(9, 1, (E(1, 0),))), 50, [E(1, 0)]),
    (S.HANDSHAKE, Ev.HANDSHAKE_NO_CONSISTENT_POINT): lambda: _feed_slave(
        _slave_in(S.HANDSHAKE, 50), encode_master_handshake(MasterHandshake(9, 2, (E(2, 0),))), 50, [E(1, 0)]),
    (S.HANDSHAKE, Ev.STATE_MISMATCH): lambda: _feed_slave(
        _slave_in(S.HANDSHAKE), encode_transfer(TransferFrame(0, 1, 0, 0, b"x"))),
    (S.HANDSHAKE, Ev.MALFORMED): lambda: _feed_slave(_slave_in(S.HANDSHAKE), struct.pack(">ii", 9, 0)),
    (S.HANDSHAKE, Ev.EXPIRED): lambda: _slave_in(S.HANDSHAKE).poll(20001.0),
    (S.HANDSHAKE, Ev.CLOSED): lambda: _slave_in(S.HANDSHAKE).closed(),
    (S.TRANSFER, Ev.TRANSFER_FRAME): lambda: _feed_slave(
        _slave_in(S.TRANSFER), encode_transfer(TransferFrame(0, 1, 0, 2, b"ab"))),
    (S.TRANSFER, Ev.OFFSET_MISMATCH): lambda: _feed_slave(
        _slave_in(S.TRANSFER, 10), encode_transfer(TransferFrame(11, 1, 0, 0, b"ab")), 10),
    (S.TRANSFER, Ev.STATE_MISMATCH): lambda: _feed_slave(
        _slave_in(S.TRANSFER), encode_master_handshake(MasterHandshake(9, 1, (E(1, 0),)))),
    (S.TRANSFER, Ev.HEARTBEAT_DUE): lambda: _slave_in(S.TRANSFER).poll(5001.0),
    (S.TRANSFER, Ev.MALFORMED): lambda: _feed_slave(_slave_in(S.TRANSFER), struct.pack(">ii", 2, -1)),
    (S.TRANSFER, Ev.EXPIRED): lambda: _slave_in(S.TRANSFER).poll(20001.0),
    (S.TRANSFER, Ev.CLOSED): lambda: _slave_in(S.TRANSFER).closed(),
}


def test_every_slave_row_is_driven():
    assert set(SLAVE_ROWS) == set(SLAVE_TRANSITIONS)


@pytest.mark.parametrize("key", list(SLAVE_ROWS), ids=lambda k: f"{k[0].name}-{k[1].name}")
def test_slave_row(key):
    step = SLAVE_ROWS[key]()
    assert step is not None and step.event is key[1]
    assert (step.state, _kinds(step)) == SLAVE_TRANSITIONS[key]


def _master_in(state: S, entries=(E(1, 0),), learner=False) -> MasterMachine:
    cache = EpochFileCache()
    for e in entries:
        cache.append_entry(e)
    m = MasterMachine(cache, now_ms=0.0, mapped_file_size=1000)
    if state is S.TRANSFER:
        m.receive_data(encode_slave_handshake(SlaveHandshake(2, async_learner=learner)) + encode_slave_ack(0), 0.0)
        assert m.next_step(0.0, 100) is not None
        step = m.next_step(0.0, 100)
        assert step is not None and step.state is S.TRANSFER
    return m


def _feed_master(m: MasterMachine, raw: bytes, master_max: int = 100):
    m.receive_data(raw, 1.0)
    return m.next_step(1.0, master_max)


def _first_ack():
    m = _master_in(S.HANDSHAKE)
    assert _feed_master(m, encode_slave_handshake(SlaveHandshake(2))) is not None
    return _feed_master(m, encode_slave_ack(40))


def _master_heartbeat():
    m = _master_in(S.TRANSFER)
    assert m.start_transfer(0, 100) is None
    return m.poll(5001.0, 100)


MASTER_ROWS = {
    (S.HANDSHAKE, Ev.SLAVE_HANDSHAKE): lambda: _feed_master(_master_in(S.HANDSHAKE), encode_slave_handshake(SlaveHandshake(2))),
    (S.HANDSHAKE, Ev.FIRST_ACK): _first_ack,
    (S.HANDSHAKE, Ev.STATE_MISMATCH): lambda: _feed_master(_master_in(S.HANDSHAKE), encode_slave_ack(5)),
    (S.HANDSHAKE, Ev.MALFORMED): lambda: _feed_master(_master_in(S.HANDSHAKE), struct.pack(">iq", 0, 0)),
    (S.HANDSHAKE, Ev.EXPIRED): lambda: _master_in(S.HANDSHAKE).poll(20001.0, 0),
    (S.HANDSHAKE, Ev.CLOSED): lambda: _master_in(S.HANDSHAKE).closed(),
    (S.TRANSFER, Ev.ACK): lambda: _feed_master(_master_in(S.TRANSFER), encode_slave_ack(0)),
    (S.TRANSFER, Ev.HEARTBEAT_DUE): _master_heartbeat,
    (S.TRANSFER, Ev.STATE_MISMATCH): lambda: _feed_master(_master_in(S.TRANSFER), encode_slave_handshake(SlaveHandshake(2))),
    (S.TRANSFER, Ev.MALFORMED): lambda: _feed_master(_master_in(S.TRANSFER), struct.pack(">iq", 2, -9)),
    (S.TRANSFER, Ev.EXPIRED): lambda: _master_in(S.TRANSFER).poll(20001.0, 0),
    (S.TRANSFER, Ev.CLOSED): lambda: _master_in(S.TRANSFER).closed(),
}


def test_every_master_row_is_driven():
    assert set(MASTER_ROWS) == set(MASTER_TRANSITIONS)


@pytest.mark.parametrize("key", list(MASTER_ROWS), ids=lambda k: f"{k[0].name}-{k[1].name}")
def test_master_row(key):
    step = MASTER_ROWS[key]()
    assert step is not None and step.event is key[1]
    assert (step.state, _kinds(step)) == MASTER_TRANSITIONS[key]


# ------------------------------------------------------------------------- slave details


def test_slave_transfer_frame_actions_in_order():
    s = _slave_in(S.TRANSFER)
    step = _feed_slave(s, encode_transfer(TransferFrame(0, 1, 0, 7, b"abcd")))
    assert step.actions == (AppendEpoch(E(1, 0)), AppendData(0, b"abcd"), SetConfirmOffset(4),
                            Send(encode_slave_ack(4)))
    # same epoch, no data (heartbeat at the slave's end): only the confirm offset; no ack (not grown)
    step = _feed_slave(s, encode_transfer(TransferFrame(4, 1, 0, 3)), 4)
    assert step.actions == (SetConfirmOffset(3),)


def test_slave_repairs_apaches_early_epoch_label():
    # Apache's master sends the frame that ends epoch 1 (at 100) labelled <2, 100>; a new replica
    # whose first frame that is takes epoch 1 from the master's handshake first
    s = SlaveMachine(2)
    s.connected(0.0, 0)
    s.receive_data(encode_master_handshake(MasterHandshake(300, 2, (E(1, 0), E(2, 100)))), 0.0)
    assert s.next_step(0.0, 0, []).event is Ev.HANDSHAKE_NEW_REPLICA
    step = _feed_slave(s, encode_transfer(TransferFrame(64, 2, 100, 0, data(36))), 0)
    assert step.actions[:3] == (AppendEpoch(E(1, 0)), AppendEpoch(E(2, 100)), AppendData(64, data(36)))
    cache = EpochFileCache()
    for a in step.actions[:2]:
        assert cache.append_entry(a.entry)
    assert cache.find_epoch_entry_by_offset(64) == E(1, 0, 100)
    # a frame inside its own epoch never adds the handshake's entry
    step = _feed_slave(s, encode_transfer(TransferFrame(100, 2, 100, 0, data(10))), 100)
    assert [type(a) for a in step.actions] == [AppendData, SetConfirmOffset, Send]


def test_slave_reacks_after_the_heartbeat_interval_and_handshake_is_sent_first():
    s = SlaveMachine(5, sync_from_last_file=True)
    step = s.connected(100.0, 77)
    assert step.actions == (Send(encode_slave_handshake(SlaveHandshake(5, True, False))),)
    assert s.poll(5000.0) is None  # in HANDSHAKE there is no re-ack
    s.receive_data(encode_master_handshake(MasterHandshake(100, 1, (E(1, 0),))), 200.0)
    step = s.next_step(200.0, 77, [E(1, 0)])
    assert [type(a).__name__ for a in step.actions] == ["TruncateLog", "TruncateEpochs", "Send"]
    assert step.actions[-1] == Send(encode_slave_ack(77))
    assert s.poll(5200.0) is None and s.next_deadline() == 5200.0
    assert s.poll(5200.1).actions == (Send(encode_slave_ack(77)),)


# ------------------------------------------------------------------------ master details


def test_master_handshake_carries_max_offset_last_epoch_and_entries():
    m = _master_in(S.HANDSHAKE, entries=(E(1, 0), E(2, 1570)))
    step = _feed_master(m, encode_slave_handshake(SlaveHandshake(3)), 3270)
    assert step.actions == (Send(encode_master_handshake(MasterHandshake(3270, 2, (E(1, 0), E(2, 1570))))),)
    # Apache resends its handshake for a repeated slave handshake (the slave retries after 5 s)
    again = _feed_master(m, encode_slave_handshake(SlaveHandshake(3)), 3300)
    assert again.state is S.HANDSHAKE and again.actions[0].data[8:16] == struct.pack(">q", 3300)


@pytest.mark.parametrize("request_offset, sync_from_last_file, min_offset, expected", [
    (0, False, 0, 0),          # the min offset
    (0, False, 1700, 1700),    # the min offset after the prefix was deleted
    (0, True, 0, 2000),        # the start of the last file: 2500 - 2500 % 1000
    (1234, True, 0, 1234),     # any other request is exact
])
def test_first_request_rule(request_offset, sync_from_last_file, min_offset, expected):
    cache = EpochFileCache()
    cache.append_entry(E(1, 0))
    m = MasterMachine(cache, now_ms=0.0, mapped_file_size=1000)
    m.receive_data(encode_slave_handshake(SlaveHandshake(2, sync_from_last_file)) + encode_slave_ack(request_offset), 0.0)
    m.next_step(0.0, 2500)
    step = m.next_step(0.0, 2500)
    assert step.event is Ev.FIRST_ACK and step.actions[1].request_offset == request_offset
    assert m.start_transfer(min_offset, 2500) is None
    assert m.transfer_from == expected


def test_start_transfer_waits_on_an_empty_log_or_a_missing_epoch():
    cache = EpochFileCache()
    cache.append_entry(E(3, 500))
    m = MasterMachine(cache, now_ms=0.0, mapped_file_size=1000)
    m.receive_data(encode_slave_handshake(SlaveHandshake(2)) + encode_slave_ack(0), 0.0)
    m.next_step(0.0, 0)
    m.next_step(0.0, 0)
    assert m.start_transfer(-1, 0) == "the master's commitlog is empty"
    assert m.transfer_from is None
    # a heartbeat still goes out, labelled with the first entry (buildTransferHeaderBuffer)
    hb = m.poll(5001.0, 0)
    assert hb.actions == (Send(encode_transfer(TransferFrame(-1, 3, 500, 0))),)


def test_frames_are_cut_at_batch_size_and_never_cross_an_epoch_end():
    cache = EpochFileCache()
    for e in (E(1, 0), E(2, 100), E(3, 250)):
        cache.append_entry(e)
    m = MasterMachine(cache, now_ms=0.0, mapped_file_size=10_000, transfer_batch_size=64)
    m.receive_data(encode_slave_handshake(SlaveHandshake(2)) + encode_slave_ack(0), 0.0)
    m.next_step(0.0, 400)
    m.next_step(0.0, 400)
    assert m.start_transfer(0, 400) is None
    log = data(400)
    seen = []
    while m.transfer_from is not None and m.transfer_from < 400:
        pieces, n = m.next_frame(log[m.transfer_from:], now_ms=1.0, master_max_offset=400, confirm_offset=9)
        header = pieces[0]
        _, size, offset, epoch, start, confirm = struct.unpack(">iiqiqq", header)
        assert size == n and b"".join(pieces[1:]) == log[offset:offset + n]
        seen.append((offset, size, epoch, start))
    # 64-byte batches; 64..100 is cut at epoch 1's end and labelled epoch 1 (Apache: epoch 2)
    assert seen == [(0, 64, 1, 0), (64, 36, 1, 0), (100, 64, 2, 100), (164, 64, 2, 100),
                    (228, 22, 2, 100), (250, 64, 3, 250), (314, 64, 3, 250), (378, 22, 3, 250)]
    assert m.next_frame(b"", now_ms=2.0, master_max_offset=400, confirm_offset=9) is None


def test_slave_acked_carries_apaches_caught_up_rule():
    m = _master_in(S.TRANSFER)
    assert m.start_transfer(0, 100) is None
    m.next_frame(data(100), now_ms=500.0, master_max_offset=100, confirm_offset=0)
    assert (m.last_master_max_offset, m.last_transfer_time_ms) == (100, 500.0)
    behind = _feed_master(m, encode_slave_ack(60), 120)
    assert behind.actions == (SlaveAcked(2, 60, None),)  # below the max at the last transfer
    at_last = _feed_master(m, encode_slave_ack(100), 120)
    assert at_last.actions == (SlaveAcked(2, 100, 500.0),)  # caught up to the last transfer
    m.next_frame(data(20), now_ms=600.0, master_max_offset=120, confirm_offset=0)
    at_max = _feed_master(m, encode_slave_ack(120), 120)
    assert at_max.actions == (SlaveAcked(2, 120, 1.0),)  # equal to the master's max: now
    learner = _master_in(S.TRANSFER, learner=True)
    assert _feed_master(learner, encode_slave_ack(0), 100).actions == (SlaveAcked(2, 0, None),)


def test_acks_beyond_the_master_or_beyond_what_was_sent_are_refused():
    m = _master_in(S.HANDSHAKE)
    _feed_master(m, encode_slave_handshake(SlaveHandshake(2)), 100)
    step = _feed_master(m, encode_slave_ack(101), 100)
    assert step.event is Ev.MALFORMED and "requests offset 101 beyond our max offset 100" in step.actions[0].reason
    m = _master_in(S.TRANSFER)  # requested 0
    assert m.start_transfer(0, 100) is None
    m.next_frame(data(40), now_ms=1.0, master_max_offset=100, confirm_offset=0)
    assert _feed_master(m, encode_slave_ack(40), 100).event is Ev.ACK
    step = _feed_master(m, encode_slave_ack(41), 100)
    assert step.event is Ev.MALFORMED and "acked 41, beyond what was sent (40)" in step.actions[0].reason
    assert m.state is S.SHUTDOWN


# ------------------------------------------------------------------- replication end to end


def test_new_replica_copies_log_and_epochs_across_files_and_epochs():
    master = Replica.with_log(data(2000), [(1, 0), (2, 900), (3, 1500)])
    slave = Replica()
    p = Pump.start(master, slave, batch=256)
    p.run()
    assert p.closed is None
    assert slave.max_offset == 2000 and slave.bytes_from(0) == master.bytes_from(0)
    assert slave.epochs.get_all_entries() == master.epochs.get_all_entries()
    assert slave.confirm == 2000 and p.acked[-1].offset == 2000
    for frame in p.frames_sent:  # never across a file end (700) nor an epoch end
        _, size, offset, *_ = struct.unpack(">iiqiqq", frame[:36])
        assert size <= 256 and offset // 700 == (offset + size - 1) // 700
        assert not any(offset < b < offset + size for b in (900, 1500))


def test_old_master_truncates_its_unreplicated_tail():
    # AutoSwitchHATest.testChangeRoleManyTimes: the old master wrote 1570..1700 in epoch 1 that
    # nobody got; the new master began epoch 2 at 1570 and wrote on
    common = data(1570)
    old = Replica.with_log(common + data(130, seed=9), [(1, 0)])
    new = Replica.with_log(common + data(1700, seed=3), [(1, 0), (2, 1570)])
    p = Pump.start(new, old, slave_id=1)
    p.run()
    assert p.closed is None
    assert old.bytes_from(0) == new.bytes_from(0)
    assert old.epochs.get_all_entries() == new.epochs.get_all_entries()
    assert [s.event for s in p.steps[:2]] == [Ev.CONNECTED, Ev.SLAVE_HANDSHAKE]
    assert any(s.event is Ev.HANDSHAKE_CONSISTENT for s in p.steps)


def test_new_broker_after_prefix_deletion_starts_at_the_min_offset():
    # AutoSwitchHATest.testTruncateEpochLogAndAddBroker: files below 1700 deleted, epoch file's
    # prefix truncated at 1570; a new broker copies from 1700 and learns epoch 2's entry
    master = Replica.with_log(data(1570, 1), [(1, 0), (2, 1570)], base=1700, file_size=1700)
    master.epochs.truncate_prefix_by_offset(1570)
    assert master.epochs.get_all_entries() == [E(2, 1570)]
    slave = Replica(file_size=1700)
    p = Pump.start(master, slave, slave_id=3, file_size=1700)
    p.run()
    assert p.closed is None and slave.base == 1700 and slave.max_offset == 3270
    assert slave.epochs.get_all_entries() == [E(2, 1570)]


def test_sync_from_last_file():
    # AutoSwitchHATest.testAddBrokerAndSyncFromLastFile: a new slave starts at the last file
    master = Replica.with_log(data(3270), [(1, 0), (2, 1570)], file_size=1700)
    slave = Replica(file_size=1700)
    p = Pump.start(master, slave, slave_id=3, sync_from_last_file=True, file_size=1700)
    p.run()
    assert slave.base == 1700 and slave.bytes_from(1700) == master.bytes_from(1700)
    assert slave.epochs.get_all_entries() == [E(2, 1570)]


def test_diverged_replica_is_refused_and_keeps_its_log():
    master = Replica.with_log(data(500), [(1, 0), (2, 100)])
    slave = Replica.with_log(data(300, 5), [(3, 0)])
    p = Pump.start(master, slave)
    p.run()
    assert p.closed is not None and "no consistent point" in p.closed
    assert p.s.state is S.READY and slave.bytes_from(0) == data(300, 5)


# ------------------------------------------------------------------------------ fuzzing


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=200), transfer=st.booleans(), local_max=st.integers(0, 100))
def test_slave_never_raises_and_follows_its_table(raw, transfer, local_max):
    s = _slave_in(S.TRANSFER if transfer else S.HANDSHAKE, local_max)
    s.receive_data(raw, 1.0)
    for _ in range(50):
        before = s.state
        step = s.next_step(1.0, local_max, [E(1, 0)])
        if step is None:
            break
        nxt, kinds = SLAVE_TRANSITIONS[(before, step.event)]
        assert step.state is nxt and [k for k in kinds if k in _kinds(step)] == list(_kinds(step))
        if any(isinstance(a, Close) for a in step.actions):
            assert s.state is S.READY
            break


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=200))
def test_master_never_raises_and_follows_its_table(raw):
    m = _master_in(S.HANDSHAKE)
    m.receive_data(raw, 1.0)
    for _ in range(50):
        before = m.state
        step = m.next_step(1.0, 100)
        if step is None:
            break
        nxt, kinds = MASTER_TRANSITIONS[(before, step.event)]
        assert step.state is nxt
        if step.state is S.SHUTDOWN:
            assert m.next_step(1.0, 100) is None
            break

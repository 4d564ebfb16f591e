"""AutoSwitch HA frames against bytes derived by hand from Apache 5.3.3's Java, round trips,
incremental decoding and every malformed-frame error (broker/ha/autoswitch/frames.py)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.autoswitch.epoch_file import EpochEntry
from broker.ha.autoswitch.frames import (
    MAX_EPOCH_ENTRIES,
    FrameError,
    HAConnectionState,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    TransferFrame,
    encode_master_handshake,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer,
)
from broker.ha.handshake import SessionKeys

H = bytes.fromhex


def test_state_ordinals_are_javas():
    # store/ha/HAConnectionState.java: READY, HANDSHAKE, TRANSFER, SUSPEND, SHUTDOWN
    assert [s.value for s in HAConnectionState] == [0, 1, 2, 3, 4]
    assert [s.name for s in HAConnectionState] == ["READY", "HANDSHAKE", "TRANSFER", "SUSPEND", "SHUTDOWN"]


def test_slave_handshake_bytes():
    # AutoSwitchHAClient.sendHandshakeHeader: putInt(HANDSHAKE.ordinal()=1),
    # putShort(isSyncFromLastFile), putShort(isAsyncLearner), putLong(brokerId): 16 bytes
    assert encode_slave_handshake(SlaveHandshake(2, sync_from_last_file=True)) == H(
        "00000001" "0001" "0000" "0000000000000002")
    assert encode_slave_handshake(SlaveHandshake(3, async_learner=True)) == H(
        "00000001" "0000" "0001" "0000000000000003")


def test_slave_ack_bytes():
    # AutoSwitchHAClient.reportSlaveOffset: putInt(TRANSFER.ordinal()=2), putLong(offset): 12 bytes
    assert encode_slave_ack(1570) == H("00000002" "0000000000000622")


def test_master_handshake_bytes():
    # AutoSwitchHAConnection.buildHandshakeBuffer: putInt(HANDSHAKE=1), putInt(entries*12),
    # putLong(maxPhyOffset), putInt(lastEpoch), then per entry putInt(epoch) putLong(startOffset)
    frame = MasterHandshake(3270, 2, (EpochEntry(1, 0), EpochEntry(2, 1570)))
    assert encode_master_handshake(frame) == H(
        "00000001" "00000018" "0000000000000cc6" "00000002"
        "00000001" "0000000000000000"
        "00000002" "0000000000000622")
    # an empty cache: lastEpoch() is -1, body empty
    assert encode_master_handshake(MasterHandshake(0, -1, ())) == H(
        "00000001" "00000000" "0000000000000000" "ffffffff")


def test_transfer_bytes():
    # AutoSwitchHAConnection.buildTransferHeaderBuffer: putInt(TRANSFER=2), putInt(bodySize),
    # putLong(offset), putInt(epoch), putLong(epochStartOffset), putLong(confirmOffset); then data
    frame = TransferFrame(1570, 2, 1570, 1000, b"abc")
    assert encode_transfer(frame) == H(
        "00000002" "00000003" "0000000000000622" "00000002" "0000000000000622" "00000000000003e8"
        "616263")
    # a heartbeat of a master with an empty log: nextTransferFromWhere = -1, bodySize 0
    assert encode_transfer(TransferFrame(-1, 1, 0, 0)) == H(
        "00000002" "00000000" "ffffffffffffffff" "00000001" "0000000000000000" "0000000000000000")


def _all(decoder, data):
    decoder.feed(data)
    out = []
    while (f := decoder.next_frame()) is not None:
        out.append(f)
    return out


def test_slave_stream_byte_by_byte_and_batched():
    stream = (encode_slave_handshake(SlaveHandshake(7, True, True)) + encode_slave_ack(0)
              + encode_slave_ack(99))
    want = [SlaveHandshake(7, True, True), SlaveAck(0), SlaveAck(99)]
    assert _all(SlaveFrameDecoder(), stream) == want
    d = SlaveFrameDecoder()
    got = []
    for b in stream:
        got += _all(d, bytes([b]))
    assert got == want and d.buffered == 0


def test_master_stream_byte_by_byte_and_batched():
    hs = MasterHandshake(10, 1, (EpochEntry(1, 0),))
    frames = [hs, TransferFrame(0, 1, 0, 0, b"0123456789"), TransferFrame(10, 1, 0, 10)]
    stream = encode_master_handshake(hs) + b"".join(encode_transfer(f) for f in frames[1:])
    assert _all(MasterFrameDecoder(), stream) == frames
    d = MasterFrameDecoder()
    got = []
    for b in stream:
        got += _all(d, bytes([b]))
    assert got == frames


entries_st = st.lists(st.tuples(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** 63 - 1)),
                      max_size=20).map(lambda xs: tuple(EpochEntry(e, s) for e, s in xs))


@settings(max_examples=60, deadline=None)
@given(entries=entries_st, max_offset=st.integers(0, 2 ** 63 - 1), epoch=st.integers(-1, 2 ** 31 - 1),
       data=st.binary(max_size=300), offset=st.integers(0, 2 ** 62), confirm=st.integers(-2 ** 63, 2 ** 63 - 1),
       cut=st.integers(0, 400))
def test_master_round_trip(entries, max_offset, epoch, data, offset, confirm, cut):
    hs = MasterHandshake(max_offset, epoch, entries)
    tf = TransferFrame(offset, epoch, offset, confirm, data)
    stream = encode_master_handshake(hs) + encode_transfer(tf)
    d = MasterFrameDecoder()
    got = _all(d, stream[:cut]) + _all(d, stream[cut:])
    assert got == [hs, tf]


@settings(max_examples=60, deadline=None)
@given(broker_id=st.integers(0, 2 ** 63 - 1), sync=st.booleans(), learner=st.booleans(),
       acks=st.lists(st.integers(0, 2 ** 63 - 1), max_size=5))
def test_slave_round_trip(broker_id, sync, learner, acks):
    frames = [SlaveHandshake(broker_id, sync, learner)] + [SlaveAck(a) for a in acks]
    stream = encode_slave_handshake(frames[0]) + b"".join(encode_slave_ack(a) for a in acks)
    assert _all(SlaveFrameDecoder(), stream) == frames


@pytest.mark.parametrize("raw, message", [
    (struct.pack(">i", 7) + bytes(12), "state 7: not an HAConnectionState ordinal"),
    (struct.pack(">i", -1) + bytes(12), "state -1"),
    (struct.pack(">iq", 0, 5), "state READY: a slave only sends HANDSHAKE or TRANSFER"),
    (struct.pack(">iq", 3, 5), "state SUSPEND"),
    (struct.pack(">iq", 4, 5), "state SHUTDOWN"),
    (struct.pack(">iq", 2, -5), "slave ack with max offset -5"),
    (struct.pack(">ihhq", 1, 2, 0, 1), "isSyncFromLastFile=2: must be 0 or 1"),
    (struct.pack(">ihhq", 1, 0, -1, 1), "isAsyncLearner=-1"),
    (struct.pack(">ihhq", 1, 0, 0, -3), "slaveBrokerId -3"),
])
def test_slave_frame_errors(raw, message):
    d = SlaveFrameDecoder()
    d.feed(raw)
    with pytest.raises(FrameError, match=message):
        d.next_frame()
    d.feed(encode_slave_ack(1))  # dead: the same error again, nothing buffered
    with pytest.raises(FrameError, match=message):
        d.next_frame()
    assert d.buffered == 0


@pytest.mark.parametrize("raw, message", [
    (struct.pack(">ii", 9, 0) + bytes(40), "state 9: not an HAConnectionState ordinal"),
    (struct.pack(">ii", 0, 0) + bytes(40), "state READY: a master only sends"),
    (struct.pack(">ii", 4, 0) + bytes(40), "state SHUTDOWN"),
    (struct.pack(">ii", 2, -1) + bytes(40), "TRANSFER frame with bodySize -1"),
    (struct.pack(">ii", 1, -12) + bytes(40), "HANDSHAKE frame with bodySize -12"),
    (struct.pack(">iiqi", 1, 13, 0, 1) + bytes(13), "bodySize 13: not a multiple"),
    (struct.pack(">iiqi", 1, 12 * (MAX_EPOCH_ENTRIES + 1), 0, 1), "1001 epoch entries"),
    (struct.pack(">iiqi", 1, 0, -1, 1), "max offset -1"),
    (struct.pack(">iiqi", 1, 12, 5, 1) + struct.pack(">iq", 1, -4), "epoch entry 1--4: negative start"),
    (struct.pack(">iiqiqq", 2, 1, -1, 1, 0, 0) + b"x", "offset -1 with 1 bytes"),
    (struct.pack(">iiqiqq", 2, 0, -2, 1, 0, 0), "offset -2 with 0 bytes"),
])
def test_master_frame_errors(raw, message):
    d = MasterFrameDecoder()
    d.feed(raw)
    with pytest.raises(FrameError, match=message):
        d.next_frame()
    with pytest.raises(FrameError, match=message):
        d.next_frame()


def test_transfer_body_bound_refused_from_the_header_alone():
    # a hostile bodySize is refused before a byte of the body is buffered
    d = MasterFrameDecoder(max_body_size=1024)
    d.feed(struct.pack(">ii", 2, 1025))
    with pytest.raises(FrameError, match="bodySize 1025: larger than the 1024-byte limit"):
        d.next_frame()
    ok = MasterFrameDecoder(max_body_size=1024)
    assert _all(ok, encode_transfer(TransferFrame(0, 1, 0, 0, bytes(1024))))[0].data == bytes(1024)
    default = MasterFrameDecoder()
    default.feed(struct.pack(">ii", 2, 4 * 1024 * 1024 - 35))  # 36 + body > Apache's 4 MiB buffer
    with pytest.raises(FrameError, match="larger than the 4194268-byte limit"):
        default.next_frame()


def test_encoder_refuses_more_entries_than_apache_can_send():
    many = tuple(EpochEntry(i, i) for i in range(MAX_EPOCH_ENTRIES + 1))
    with pytest.raises(ValueError, match="at most 1000"):
        encode_master_handshake(MasterHandshake(0, 1000, many))
    assert len(encode_master_handshake(MasterHandshake(0, 999, many[:-1]))) == 20 + 12 * 1000


def _pair():
    keys = SessionKeys(b"s" * 32, b"m" * 32)
    return keys.for_master(), keys.for_slave()


def test_authenticated_frames_round_trip_and_forgery_is_refused():
    master, slave = _pair()
    stream = encode_master_handshake(MasterHandshake(5, 1, (EpochEntry(1, 0),)), master) + encode_transfer(
        TransferFrame(0, 1, 0, 5, b"hello"), master)
    assert len(stream) == 32 + 16 + 41 + 16
    assert [type(f) for f in _all(MasterFrameDecoder(slave), stream)] == [MasterHandshake, TransferFrame]

    master, slave = _pair()
    ack = encode_slave_ack(5, slave)
    assert _all(SlaveFrameDecoder(master), ack) == [SlaveAck(5)]
    replayed = SlaveFrameDecoder(master)
    replayed.feed(ack)  # the counter has moved on: the same bytes do not verify twice
    with pytest.raises(FrameError, match="tag does not verify"):
        replayed.next_frame()
    master2, slave2 = _pair()
    d = SlaveFrameDecoder(master2)
    forged = bytearray(encode_slave_ack(5, slave2))
    forged[11] ^= 1
    d.feed(bytes(forged))
    with pytest.raises(FrameError, match="tag does not verify"):
        d.next_frame()

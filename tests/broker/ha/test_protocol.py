"""Sans-I/O HA protocol: golden bytes, split feeding, timing with injected time, errors, fuzz."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.protocol import (
    ConnectionExpired,
    DataFrame,
    HAError,
    HeartbeatFrame,
    MasterConnection,
    OffsetMismatch,
    ProtocolError,
    SlaveConnection,
    SlaveReport,
    TransferStarted,
    encode_frame_header,
    encode_report,
)

MB = 1024 * 1024


def master(now: float = 0.0, file_size: int = MB, batch: int = 32 * 1024) -> MasterConnection:
    return MasterConnection(
        now_ms=now,
        mapped_file_size=file_size,
        transfer_batch_size=batch,
        heartbeat_interval_ms=5000,
        housekeeping_interval_ms=20000,
    )


def slave(offset: int = 0, now: float = 0.0, max_frame: int = 4 * MB) -> SlaveConnection:
    return SlaveConnection(
        slave_max_offset=offset,
        now_ms=now,
        heartbeat_interval_ms=5000,
        housekeeping_interval_ms=20000,
        max_frame_size=max_frame,
    )


# ------------------------------------------------------------------------------ golden bytes


def test_report_golden_bytes() -> None:
    assert encode_report(0) == b"\x00" * 8
    assert encode_report(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert encode_report(3_665_318) == bytes.fromhex("000000000037eda6")
    assert encode_report(1 << 40) == bytes.fromhex("0000010000000000")


def test_frame_header_golden_bytes() -> None:
    assert encode_frame_header(0, 0) == b"\x00" * 12
    assert encode_frame_header(1_073_741_824, 32_768) == bytes.fromhex("0000000040000000" "00008000")
    assert encode_frame_header(0x0102030405060708, 0x0A0B0C0D) == bytes(range(1, 9)) + bytes([10, 11, 12, 13])


def test_slave_initiate_sends_its_offset() -> None:
    s = slave(offset=4096)
    assert s.initiate(0) == struct.pack(">q", 4096)


def test_master_frames_golden_and_chunked() -> None:
    m = master(batch=4)
    events = m.receive_data(encode_report(100), 0, master_max_offset=200)
    assert events == [TransferStarted(100, 100), SlaveReport(100, first=True)]
    out = m.frames_for(b"abcdefghij", 1)
    assert b"".join(out) == (
        encode_frame_header(100, 4) + b"abcd" + encode_frame_header(104, 4) + b"efgh" + encode_frame_header(108, 2) + b"ij"
    )
    assert m.transfer_from == 110


def test_master_frames_for_respects_max_bytes() -> None:
    m = master(batch=4)
    m.receive_data(encode_report(0), 0, master_max_offset=0)
    out = m.frames_for(b"0123456789", 1, max_bytes=6)
    assert b"".join(out) == encode_frame_header(0, 4) + b"0123" + encode_frame_header(4, 2) + b"45"
    assert m.transfer_from == 6


def test_master_sends_nothing_before_the_request() -> None:
    m = master()
    assert m.transfer_from is None
    assert m.frames_for(b"data", 0) == []
    assert m.poll(10_000) is None  # no heartbeat before the request


# ------------------------------------------------------------------------------ first request


@pytest.mark.parametrize(
    "master_max, expected",
    [(0, 0), (5, 0), (MB - 1, 0), (MB, MB), (3 * MB + 123, 3 * MB)],
)
def test_offset_zero_starts_at_last_file(master_max: int, expected: int) -> None:
    m = master(file_size=MB)
    events = m.receive_data(encode_report(0), 0, master_max_offset=master_max)
    assert events[0] == TransferStarted(0, expected)
    assert m.transfer_from == expected
    assert m.slave_request_offset == 0


def test_nonzero_request_transfers_from_exactly_there() -> None:
    m = master(file_size=MB)
    m.receive_data(encode_report(MB + 17), 0, master_max_offset=3 * MB)
    assert m.transfer_from == MB + 17


# ------------------------------------------------------------------------------ split feeding


def test_master_reports_split_across_reads_use_last_complete_value() -> None:
    m = master()
    m.receive_data(encode_report(0), 0, master_max_offset=1000)
    m.frames_for(b"x" * 500, 0)
    stream = encode_report(100) + encode_report(300) + encode_report(500)
    events: list = []
    for i in range(len(stream)):
        events += m.receive_data(stream[i : i + 1], 1, master_max_offset=1000)
    assert events == [SlaveReport(100), SlaveReport(300), SlaveReport(500)]
    # Several reports in one read: only the newest is reported (RocketMQ reads the last long).
    m2 = master()
    got = m2.receive_data(encode_report(0) + encode_report(0) + encode_report(0)[:3], 0, master_max_offset=10)
    assert got == [TransferStarted(0, 0), SlaveReport(0, first=True), SlaveReport(0)]
    assert m2.receive_data(encode_report(0)[3:], 0, master_max_offset=10) == [SlaveReport(0)]


def build_stream(start: int, chunks: list[bytes]) -> bytes:
    out = bytearray()
    off = start
    for c in chunks:
        out += encode_frame_header(off, len(c)) + c
        off += len(c)
    return bytes(out)


@pytest.mark.parametrize("step", [1, 5, 12, 13, 100])
def test_slave_reassembles_frames_split_anywhere(step: int) -> None:
    chunks = [b"a" * 7, b"", b"b" * 30, b"c" * 1]
    stream = build_stream(1000, chunks)
    s = slave(offset=1000)
    events: list = []
    for i in range(0, len(stream), step):
        events += s.receive_data(stream[i : i + step], 0)
    assert events == [DataFrame(1000, b"a" * 7), HeartbeatFrame(1007), DataFrame(1007, b"b" * 30), DataFrame(1037, b"c")]
    assert s.expected_offset == 1038


def test_slave_appended_reports_only_when_grown() -> None:
    s = slave(offset=10)
    s.initiate(0)
    assert s.appended(10, 1) is None
    assert s.appended(50, 2) == encode_report(50)
    assert s.reported_offset == 50
    assert s.appended(50, 3) is None


# ------------------------------------------------------------------------------ timing


def test_slave_heartbeat_and_housekeeping_with_injected_time() -> None:
    s = slave(offset=64, now=0)
    s.initiate(0)
    assert s.next_deadline() == 5000
    assert s.poll(5000) is None  # strictly greater, as RocketMQ
    assert s.poll(5001) == encode_report(64)
    assert s.poll(5002) is None
    assert s.next_deadline() == 10_001
    s.receive_data(encode_frame_header(64, 0), 15_000)  # master heartbeat keeps it alive
    assert s.poll(30_000) == encode_report(64)
    assert s.poll(35_000) is None
    ev = s.poll(35_001)
    assert isinstance(ev, ConnectionExpired) and ev.idle_ms == 20_001
    assert "20001 ms" in ev.message
    assert s.poll(50_000) is None  # dead machines stay quiet


def test_master_heartbeat_and_housekeeping_with_injected_time() -> None:
    m = master(now=0)
    m.receive_data(encode_report(0), 0, master_max_offset=0)
    assert m.poll(5000) is None
    assert m.poll(5001) == encode_frame_header(0, 0)
    m.frames_for(b"hello", 6000)
    assert m.poll(11_000) is None
    assert m.poll(11_001) == encode_frame_header(5, 0)  # heartbeat carries the next offset
    m.receive_data(encode_report(5), 12_000, master_max_offset=5)
    assert m.next_deadline() == 16_001
    assert not isinstance(m.poll(32_000), HAError)
    ev = m.poll(32_001)
    assert isinstance(ev, ConnectionExpired)


def test_master_expires_a_silent_connection_that_never_reported() -> None:
    m = master(now=100)
    assert m.next_deadline() == 20_100
    assert m.poll(20_100) is None
    assert isinstance(m.poll(20_101), ConnectionExpired)


# ------------------------------------------------------------------------------ errors


def test_slave_offset_mismatch_carries_both_offsets() -> None:
    s = slave(offset=4096)
    events = s.receive_data(encode_frame_header(4000, 4) + b"abcd", 0)
    assert len(events) == 1
    ev = events[0]
    assert isinstance(ev, OffsetMismatch)
    assert (ev.master_offset, ev.slave_offset) == (4000, 4096)
    assert "4000" in ev.message and "4096" in ev.message
    assert s.receive_data(encode_frame_header(4096, 0), 1) == []  # dead after an error


def test_empty_slave_accepts_any_start_then_checks_continuity() -> None:
    s = slave(offset=0)
    ev = s.receive_data(encode_frame_header(MB, 2) + b"xy" + encode_frame_header(MB + 3, 1) + b"z", 0)
    assert ev[0] == DataFrame(MB, b"xy")
    assert isinstance(ev[1], OffsetMismatch) and (ev[1].master_offset, ev[1].slave_offset) == (MB + 3, MB + 2)


def test_frames_after_a_good_one_are_delivered_before_the_error() -> None:
    s = slave(offset=8)
    ev = s.receive_data(encode_frame_header(8, 1) + b"a" + encode_frame_header(-1, 0), 0)
    assert ev[0] == DataFrame(8, b"a")
    assert isinstance(ev[1], ProtocolError) and "negative offset" in ev[1].message


@pytest.mark.parametrize("size", [-1, 4 * MB + 1, 2**31 - 1])
def test_slave_rejects_bad_frame_sizes(size: int) -> None:
    s = slave(offset=0)
    (ev,) = s.receive_data(encode_frame_header(0, size), 0)
    assert isinstance(ev, ProtocolError) and str(size) in ev.message


def test_master_rejects_negative_report() -> None:
    m = master()
    (ev,) = m.receive_data(encode_report(-5), 0, master_max_offset=100)
    assert isinstance(ev, ProtocolError) and "negative" in ev.message
    assert m.receive_data(encode_report(0), 0, master_max_offset=100) == []


def test_master_rejects_report_beyond_its_max() -> None:
    m = master()
    (ev,) = m.receive_data(encode_report(101), 0, master_max_offset=100)
    assert isinstance(ev, ProtocolError) and "101" in ev.message and "100" in ev.message


def test_master_rejects_backwards_and_unsent_acks() -> None:
    m = master()
    m.receive_data(encode_report(50), 0, master_max_offset=100)
    m.frames_for(b"x" * 10, 0)
    (ev,) = m.receive_data(encode_report(61), 0, master_max_offset=100)
    assert isinstance(ev, ProtocolError) and "beyond what was sent" in ev.message
    m = master()
    m.receive_data(encode_report(50), 0, master_max_offset=100)
    m.frames_for(b"x" * 10, 0)
    assert m.receive_data(encode_report(60), 0, master_max_offset=100) == [SlaveReport(60)]
    (ev,) = m.receive_data(encode_report(55), 0, master_max_offset=100)
    assert isinstance(ev, ProtocolError) and "backwards" in ev.message


def test_ascii_garbage_on_the_master_port_is_an_error() -> None:
    m = master()
    ev = m.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 0, master_max_offset=10 * MB)
    assert len(ev) == 1 and isinstance(ev[0], ProtocolError)


# ------------------------------------------------------------------------------ fuzz


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 2**40),
    chunks=st.lists(st.binary(max_size=64), max_size=8),
    cuts=st.lists(st.integers(1, 40), max_size=30),
)
def test_fuzz_frame_roundtrip_any_split(start: int, chunks: list[bytes], cuts: list[int]) -> None:
    stream = build_stream(start, chunks)
    s = slave(offset=start)
    events: list = []
    pos = 0
    for c in cuts:
        events += s.receive_data(stream[pos : pos + c], 0)
        pos += c
    events += s.receive_data(stream[pos:], 0)
    expected = []
    off = start
    for c in chunks:
        expected.append(DataFrame(off, c) if c else HeartbeatFrame(off))
        off += len(c)
    assert events == expected


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=200), offset=st.integers(0, 2**40), cuts=st.lists(st.integers(1, 50), max_size=10))
def test_fuzz_garbage_never_raises(garbage: bytes, offset: int, cuts: list[int]) -> None:
    s = slave(offset=offset, max_frame=64)
    m = master()
    pos = 0
    for c in cuts + [len(garbage)]:
        piece = garbage[pos : pos + c]
        pos += c
        for ev in s.receive_data(piece, 0):
            assert isinstance(ev, (DataFrame, HeartbeatFrame, HAError))
            if isinstance(ev, DataFrame):
                assert len(ev.data) <= 64
        for ev in m.receive_data(piece, 0, master_max_offset=1 << 30):
            assert isinstance(ev, (SlaveReport, TransferStarted, ProtocolError))
            if isinstance(ev, SlaveReport):
                assert 0 <= ev.offset <= 1 << 30
    # Whatever happened, a machine that reported an error stays dead.
    if s.error is not None:
        assert s.receive_data(encode_frame_header(0, 0), 0) == []


def test_master_check_expired_alone_sends_nothing() -> None:
    m = master(now=0)
    m.receive_data(encode_report(0), 0, master_max_offset=0)
    assert m.check_expired(20_000) is None
    ev = m.check_expired(20_001)
    assert isinstance(ev, ConnectionExpired) and m.error is ev
    assert m.poll(30_000) is None and m.check_expired(40_000) is None

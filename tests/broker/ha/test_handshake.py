"""Sans-I/O HA handshake (haAuthToken) and the MACed protocol after it: outcomes, refusals, replay."""
from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.handshake import (
    MAGIC,
    REFUSE_BAD_PROOF,
    REFUSE_BROKER_NAME,
    REFUSE_VERSION,
    TAG_SIZE,
    MasterHandshake,
    SlaveHandshake,
    encode_refused,
    master_proof,
    transcript,
)
from broker.ha.protocol import (
    DataFrame,
    HeartbeatFrame,
    MasterConnection,
    ProtocolError,
    SlaveConnection,
    SlaveReport,
    encode_frame_header,
    encode_report,
)

SECRET = "ha-test-secret-0123456789"
NAME = "broker-a"


def pair(slave_secret: str = SECRET, master_secret: str = SECRET, slave_name: str = NAME,
         master_name: str = NAME, now: float = 0.0) -> tuple[SlaveHandshake, MasterHandshake]:
    return (SlaveHandshake(slave_secret, slave_name, now_ms=now, timeout_ms=1000),
            MasterHandshake(master_secret, master_name, now_ms=now, timeout_ms=1000))


def run(s: SlaveHandshake, m: MasterHandshake, chunk: int | None = None) -> None:
    """Shuttle bytes until both sides stop producing any (optionally fed ``chunk`` bytes at a time)."""
    to_master = s.start()
    for _ in range(10):
        to_slave = feed(m, to_master, chunk)
        to_master = feed(s, to_slave, chunk)
        if not to_master and not to_slave:
            return


def feed(side: SlaveHandshake | MasterHandshake, data: bytes, chunk: int | None) -> bytes:
    if not chunk:
        return side.receive_data(data, 1.0)
    return b"".join(side.receive_data(data[i:i + chunk], 1.0) for i in range(0, len(data), chunk))


@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_same_secret_both_sides_done_with_matching_keys(chunk: int | None) -> None:
    s, m = pair()
    run(s, m, chunk)
    assert s.done and m.done and s.error is None and m.error is None
    assert s.keys == m.keys
    assert s.keys.slave_to_master != s.keys.master_to_slave
    assert s.leftover == m.leftover == b""


def test_hello_golden_layout() -> None:
    s = SlaveHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000, nonce=b"\x01" * 32)
    assert s.start() == MAGIC + b"\x01\x01" + b"\x01" * 32 + bytes([len(NAME)]) + NAME.encode()


def test_proofs_are_hmac_sha256_of_the_transcript() -> None:
    ns, nm = b"\x02" * 32, b"\x03" * 32
    s = SlaveHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000, nonce=ns)
    m = MasterHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000, nonce=nm)
    challenge = m.receive_data(s.start(), 0)
    proof = s.receive_data(challenge, 0)
    tr = ns + nm + bytes([len(NAME)]) + NAME.encode()
    expect = hmac.new(SECRET.encode(), b"rocketmq-py HA v1 slave proof\x00" + tr, hashlib.sha256).digest()
    assert proof == MAGIC + b"\x01\x03" + expect


def test_wrong_slave_secret_is_refused_by_the_master_and_told_why() -> None:
    s, m = pair(slave_secret="not-the-secret-at-all")
    run(s, m)
    assert not m.done and m.error is not None and m.error.refusal == REFUSE_BAD_PROOF
    assert "wrong secret" in m.error.message
    assert not s.done and s.error is not None and "master refused this slave" in s.error.message


def test_fake_master_cannot_prove_the_secret_to_a_slave() -> None:
    s, m = pair(master_secret="the-fake-masters-guess")
    to_master = s.start()
    challenge = m.receive_data(to_master, 0)
    proof = s.receive_data(challenge, 0)
    # The fake master does not know the secret: whatever WELCOME it computes, the slave refuses.
    welcome = m.receive_data(proof, 0)
    assert m.error is not None  # it cannot verify the real slave's proof either
    forged = MAGIC + b"\x01\x04" + hashlib.sha256(b"guess").digest()
    assert welcome.startswith(encode_refused(REFUSE_BAD_PROOF)[:6])
    s.receive_data(forged, 0)
    assert not s.done and s.error is not None and "could not prove haAuthToken" in s.error.message


def test_classic_report_is_not_a_hello_and_gets_nothing() -> None:
    m = MasterHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000)
    assert m.receive_data(encode_report(0), 0) == b""
    assert m.error is not None and m.error.refusal is None and "classic unauthenticated protocol" in m.error.message
    assert m.receive_data(b"more", 0) == b""  # dead


def test_other_broker_name_refused_on_both_sides() -> None:
    s, m = pair(slave_name="broker-b")
    run(s, m)
    assert m.error is not None and m.error.refusal == REFUSE_BROKER_NAME and "broker-b" in m.error.message
    assert s.error is not None and "another brokerName" in s.error.message


def test_other_version_refused() -> None:
    m = MasterHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000)
    out = m.receive_data(MAGIC + b"\x02\x01" + b"\x00" * 40, 0)
    assert out == encode_refused(REFUSE_VERSION) and m.error is not None


def test_timeout() -> None:
    m = MasterHandshake(SECRET, NAME, now_ms=100, timeout_ms=1000)
    m.receive_data(MAGIC, 200)
    assert m.check_timeout(1100) is None
    err = m.check_timeout(1101)
    assert err is not None and "1000 ms" in err.message


def test_recorded_proof_is_useless_against_a_new_master_nonce() -> None:
    s, m = pair()
    hello = s.start()
    proof = s.receive_data(m.receive_data(hello, 0), 0)
    # an eavesdropper replays the same HELLO and PROOF to a fresh master session
    m2 = MasterHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000)
    m2.receive_data(hello, 0)
    out = m2.receive_data(proof, 0)
    assert out == encode_refused(REFUSE_BAD_PROOF) and not m2.done


def test_master_proof_reflected_as_slave_proof_is_refused() -> None:
    """A WELCOME-labelled proof for the very same transcript is never accepted as a PROOF."""
    s, m = pair()
    hello = s.start()
    m.receive_data(hello, 0)
    tr = transcript(s.nonce, m.nonce, NAME.encode())
    out = m.receive_data(MAGIC + b"\x01\x03" + master_proof(SECRET.encode(), tr), 0)
    assert out == encode_refused(REFUSE_BAD_PROOF) and not m.done


def test_leftover_after_handshake_goes_to_the_protocol() -> None:
    s, m = pair()
    proof = s.receive_data(m.receive_data(s.start(), 0), 0)
    m.receive_data(proof + b"extra-bytes", 0)
    assert m.done and m.leftover == b"extra-bytes"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_garbage_never_raises_and_never_authenticates(data: bytes) -> None:
    m = MasterHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000)
    m.receive_data(data, 0)
    assert not m.done
    s = SlaveHandshake(SECRET, NAME, now_ms=0, timeout_ms=1000)
    s.start()
    s.receive_data(data, 0)
    assert not s.done


# ---------------------------------------------------------------- MACed protocol after the handshake


def macs():
    s, m = pair()
    run(s, m)
    return s.keys.for_slave(), m.keys.for_master()


def machines() -> tuple[SlaveConnection, MasterConnection]:
    smac, mmac = macs()
    sl = SlaveConnection(slave_max_offset=0, now_ms=0, mac=smac)
    ma = MasterConnection(now_ms=0, mapped_file_size=1 << 20, transfer_batch_size=4, mac=mmac)
    return sl, ma


def test_maced_session_round_trip() -> None:
    sl, ma = machines()
    first = sl.initiate(0)
    assert len(first) == 8 + TAG_SIZE
    assert ma.receive_data(first, 0, master_max_offset=10)[-1] == SlaveReport(0, first=True)
    frames = ma.frames_for(b"abcdefghij", 1)
    assert len(frames) == 9  # 3 frames x (header, body, tag)
    events = sl.receive_data(b"".join(frames), 2)
    assert [e.data for e in events if isinstance(e, DataFrame)] == [b"abcd", b"efgh", b"ij"]
    report = sl.appended(10, 3)
    assert ma.receive_data(report, 3, master_max_offset=10) == [SlaveReport(10)]
    hb = ma.poll(10_000)
    assert isinstance(hb, bytes) and len(hb) == 12 + TAG_SIZE
    assert sl.receive_data(hb, 10_001) == [HeartbeatFrame(10)]


def test_forged_or_replayed_ack_is_refused() -> None:
    sl, ma = machines()
    ma.receive_data(sl.initiate(0), 0, master_max_offset=100)
    ma.frames_for(b"x" * 100, 1)
    # an injected plain 8-byte ack, padded to the record size with a guessed tag
    events = ma.receive_data(encode_report(100) + b"\x00" * TAG_SIZE, 2, master_max_offset=100)
    assert isinstance(events[-1], ProtocolError) and "MAC" in events[-1].message
    assert ma.slave_ack_offset == 0
    # replay: a genuine report accepted once is refused when sent again
    sl2, ma2 = machines()
    first = sl2.initiate(0)
    ma2.receive_data(first, 0, master_max_offset=100)
    events = ma2.receive_data(first, 1, master_max_offset=100)
    assert isinstance(events[-1], ProtocolError)


def test_tampered_or_injected_frame_is_not_appended() -> None:
    sl, ma = machines()
    ma.receive_data(sl.initiate(0), 0, master_max_offset=10)
    header, body, tag = ma.frames_for(b"abcd", 1)
    events = sl.receive_data(header + b"abcX" + tag, 2)
    assert len(events) == 1 and isinstance(events[0], ProtocolError) and "nothing appended" in events[0].message
    sl2, _ = machines()
    forged = encode_frame_header(0, 4) + b"evil" + b"\x00" * TAG_SIZE
    events = sl2.receive_data(forged, 0)
    assert len(events) == 1 and isinstance(events[0], ProtocolError)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_become_data_on_a_maced_slave(data: bytes) -> None:
    sl, _ = machines()
    events = sl.receive_data(data, 0)
    assert not any(isinstance(e, (DataFrame, HeartbeatFrame)) for e in events)

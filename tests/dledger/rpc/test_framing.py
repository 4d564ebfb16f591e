"""Frames, the incremental decoder, budgets, per-frame tags and the peers string (sans-I/O)."""
from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.rpc import framing as fr

messages = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=20) | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points + [len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8), st.lists(st.integers(0, 10_000), max_size=30))
def test_any_byte_split_decodes_the_same_frames(msgs, cuts):
    wire = fr.encode_frames(msgs)
    assert wire == b"".join(fr.encode_frame(m) for m in msgs)
    dec = fr.FrameDecoder()
    got = []
    for chunk in _chunks(wire, cuts):
        got.extend(dec.feed(chunk))
    assert got == msgs
    assert dec.buffered == 0
    assert dec.frames == len(msgs)


def test_byte_at_a_time_and_partial_header():
    wire = fr.encode_frames([{"a": b"x" * 10}, {"b": 2}])
    dec = fr.FrameDecoder()
    out = []
    for i in range(len(wire)):
        out.extend(dec.feed(wire[i : i + 1]))
        if i < 3:
            assert out == [] and dec.buffered == i + 1
    assert out == [{"a": b"x" * 10}, {"b": 2}]


def test_bytes_and_str_keep_their_types():
    (got,) = fr.FrameDecoder().feed(fr.encode_frame({"body": b"\x00\xff", "s": "é", 7: [1]}))
    assert got == {"body": b"\x00\xff", "s": "é", 7: [1]}
    assert isinstance(got["body"], bytes) and isinstance(got["s"], str)


def test_frame_too_large_raised_at_header_and_decoder_stays_failed():
    dec = fr.FrameDecoder(max_frame_size=100)
    ok = fr.encode_frame(b"y" * 50)
    assert dec.feed(ok) == [b"y" * 50]
    with pytest.raises(fr.FrameTooLarge) as err:
        dec.feed(struct.pack(">I", 101))  # header alone is enough
    assert err.value.size == 101 and err.value.limit == 100
    assert "exceeds the limit" in str(err.value)
    with pytest.raises(fr.FrameError):
        dec.feed(ok)


def test_frames_before_an_oversize_one_are_not_returned_but_detection_is_immediate():
    dec = fr.FrameDecoder(max_frame_size=10)
    with pytest.raises(fr.FrameTooLarge):
        dec.feed(fr.encode_frame(1) + struct.pack(">I", 11) + b"z" * 11)


def test_garbage_payload_is_a_frame_error():
    dec = fr.FrameDecoder()
    with pytest.raises(fr.FrameError):
        dec.feed(struct.pack(">I", 1) + b"\xc1")  # 0xc1 is never valid msgpack


def test_exact_limit_is_accepted():
    payload = msgpack.packb(b"q" * 90, use_bin_type=True)
    dec = fr.FrameDecoder(max_frame_size=len(payload))
    assert dec.feed(fr.encode_frame(b"q" * 90)) == [b"q" * 90]


class _Budget:
    def __init__(self, limit):
        self.limit, self.used = limit, 0

    def reserve(self, n):
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def release(self, n):
        self.used -= n


def test_large_unfinished_frames_reserve_the_budget():
    budget = _Budget(300 * 1024)
    a, b = fr.FrameDecoder(budget=budget), fr.FrameDecoder(budget=budget)
    payload = fr.encode_frame(b"y" * (200 * 1024))
    assert a.feed(payload[:1000]) == [] and budget.used == len(payload) - 4
    with pytest.raises(fr.BudgetExceeded):
        b.feed(payload[:1000])
    assert a.feed(payload[1000:]) == [b"y" * (200 * 1024)] and budget.used == 0
    small = fr.encode_frame(b"z" * 1000)  # small frames are never charged
    c = fr.FrameDecoder(budget=_Budget(1))
    assert c.feed(small[:10]) == [] and c.feed(small[10:]) == [b"z" * 1000]
    a.feed(payload[:1000])
    a.release()
    assert budget.used == 0


# ------------------------------------------------------------------ peers string


def test_parse_peers_round_trip():
    spec = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-localhost:40913"
    peers = fr.parse_peers(spec)
    assert peers == {"n0": ("127.0.0.1", 40911), "n1": ("127.0.0.1", 40912), "n2": ("localhost", 40913)}
    assert fr.format_peers(peers) == spec
    assert fr.parse_peers("a-[::1]:5;") == {"a": ("::1", 5)}


@pytest.mark.parametrize("bad", ["", "n0", "n0-host", "n0-host:x", "n0-host:0", "-h:1", "n0-h:1;n0-h:2", "n0-h:70000"])
def test_parse_peers_errors_are_readable(bad):
    with pytest.raises(ValueError) as err:
        fr.parse_peers(bad)
    assert str(err.value)


# ------------------------------------------------------------------ decoder feed limit


def test_feed_limit_leaves_the_rest_buffered():
    dec = fr.FrameDecoder()
    wire = fr.encode_frames([1, 2, 3])
    assert dec.feed(wire, 1) == [1]
    assert dec.feed(b"", 1) == [2]
    assert dec.feed(b"") == [3]


def test_tag_is_truncated_hmac_sha256_of_sequence_and_payload():
    import hashlib
    import hmac

    key = b"k" * 32
    sealer = fr.FrameSealer(key)
    for seq, payload in enumerate([b"", b"x" * 100, b"y" * 5000]):
        expected = hmac.new(key, seq.to_bytes(8, "big") + payload, hashlib.sha256).digest()[:16]
        assert sealer.tag(payload) == expected

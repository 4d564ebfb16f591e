"""Frames, the incremental decoder, the handshake and the peers string (sans-I/O)."""
from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk

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


# ------------------------------------------------------------------ handshake


def _run(acceptor: hk.AcceptorHandshake, connector: hk.ConnectorHandshake):
    hello = connector.receive_challenge(_wire(acceptor.challenge()))
    accepted = acceptor.receive_hello(_wire(hello))
    remote = connector.receive_welcome(_wire(accepted.reply))
    return accepted, remote


def _wire(frame):
    """Round-trip through real frames so the test covers the types that cross the wire."""
    (out,) = fr.FrameDecoder().feed(fr.encode_frame(frame))
    return out


MEMBERS = ["n0", "n1", "n2"]


@pytest.mark.parametrize("secret", [None, "s3cret"])
def test_peer_handshake_succeeds(secret):
    acc, remote = _run(
        hk.AcceptorHandshake("g", "n0", MEMBERS, secret),
        hk.ConnectorHandshake("g", "n1", hk.ROLE_PEER, secret, expect_id="n0"),
    )
    assert (acc.remote_id, acc.role, remote) == ("n1", "peer", "n0")


def test_client_with_any_id_is_accepted():
    acc, _ = _run(hk.AcceptorHandshake("g", "n0", MEMBERS, "k"), hk.ConnectorHandshake("g", "cli-42", hk.ROLE_CLIENT, "k"))
    assert acc.role == "client" and acc.remote_id == "cli-42"


@pytest.mark.parametrize(
    "acceptor_kwargs, connector_kwargs, code",
    [
        ({}, {"self_id": "n9"}, hk.UNKNOWN_MEMBER),  # not in the peer set
        ({}, {"self_id": "n0"}, hk.UNEXPECTED_MEMBER),  # claims the acceptor's id
        ({"secret": "right"}, {"secret": "wrong"}, hk.AUTH_FAILED),
        ({"secret": "right"}, {"secret": None}, hk.AUTH_FAILED),
        ({"secret": "right"}, {"secret": "wrong", "role": hk.ROLE_CLIENT, "self_id": "c"}, hk.AUTH_FAILED),
        ({}, {"role": "admin"}, hk.UNSUPPORTED),
    ],
)
def test_acceptor_refuses(acceptor_kwargs, connector_kwargs, code):
    a = {"group": "g", "self_id": "n0", "members": MEMBERS, **acceptor_kwargs}
    c = {"group": "g", "self_id": "n1", "role": hk.ROLE_PEER, **connector_kwargs}
    acceptor = hk.AcceptorHandshake(**a)
    connector = hk.ConnectorHandshake(**c)
    hello = connector.receive_challenge(_wire(acceptor.challenge()))
    with pytest.raises(hk.HandshakeRejected) as err:
        acceptor.receive_hello(_wire(hello))
    assert err.value.code == code
    # the reject frame tells the connector why
    with pytest.raises(hk.HandshakeRejected) as err2:
        connector.receive_welcome(_wire(err.value.to_frame()))
    assert err2.value.code == code and err2.value.reason == err.value.reason


@pytest.mark.parametrize("secret", [None, "k"])
def test_wrong_group_refused_by_the_acceptor_after_the_proof(secret):
    acceptor = hk.AcceptorHandshake("g1", "n0", MEMBERS, secret)
    hello = hk.ConnectorHandshake("g2", "n1", secret=secret).receive_challenge(_wire(acceptor.challenge()))
    with pytest.raises(hk.HandshakeRejected) as err:
        acceptor.receive_hello(_wire(hello))
    assert err.value.code == hk.UNKNOWN_GROUP
    # a connector that lies about its group after signing is refused too: the mac covers the group
    hello = hk.ConnectorHandshake("g1", "n1", secret=secret).receive_challenge(_wire(acceptor.challenge()))
    hello["group"] = "g2"
    with pytest.raises(hk.HandshakeRejected) as err:
        acceptor.receive_hello(hello)
    assert err.value.code == (hk.AUTH_FAILED if secret else hk.UNKNOWN_GROUP)


def test_challenge_reveals_nothing_and_unproven_hellos_learn_nothing():
    """Issue 23.1: no group, member id or file size before the peer proved the secret."""
    acceptor = hk.AcceptorHandshake("secret-group", "n0", MEMBERS, "k", ident={"data_file_size": 123456789})
    challenge = _wire(acceptor.challenge())
    assert set(challenge) == {"t", "v", "nonce"}
    for claim in ({"group": "secret-group", "self_id": "n1"}, {"group": "x", "self_id": "n9"},
                  {"group": "x", "self_id": "c", "role": hk.ROLE_CLIENT}):
        hello = hk.ConnectorHandshake(secret="wrong", **claim).receive_challenge(challenge)
        with pytest.raises(hk.HandshakeRejected) as err:
            acceptor.receive_hello(_wire(hello))
        frame = repr(err.value.to_frame())
        assert err.value.code == hk.AUTH_FAILED
        assert "secret-group" not in frame and "n0" not in frame and "123456789" not in frame, frame


def test_handshake_frames_are_bounded_before_the_body_is_read():
    dec = fr.FrameDecoder(hk.HANDSHAKE_MAX_FRAME)
    with pytest.raises(fr.FrameTooLarge):
        dec.feed(fr.HEADER.pack(24 * 1024 * 1024) + b"x" * 10)
    assert dec.buffered == 0


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


def test_hello_mac_cannot_be_replayed_on_another_connection():
    first = hk.AcceptorHandshake("g", "n0", MEMBERS, "k")
    hello = hk.ConnectorHandshake("g", "n1", secret="k").receive_challenge(_wire(first.challenge()))
    first.receive_hello(hello)
    second = hk.AcceptorHandshake("g", "n0", MEMBERS, "k")  # fresh nonce
    with pytest.raises(hk.HandshakeRejected):
        second.receive_hello(hello)


def test_connector_detects_impostor_acceptor_without_secret():
    acceptor = hk.AcceptorHandshake("g", "n0", MEMBERS, None)  # does not know the secret
    connector = hk.ConnectorHandshake("g", "n1", secret="k")
    acceptor.receive_hello(connector.receive_challenge(_wire(acceptor.challenge())))
    welcome = {"t": "welcome", "id": "n0", "mac": b""}
    with pytest.raises(hk.HandshakeRejected) as err:
        connector.receive_welcome(welcome)
    assert err.value.code == hk.AUTH_FAILED


@pytest.mark.parametrize("secret", [None, "k"])
def test_connector_refuses_unexpected_remote_id(secret):
    acceptor = hk.AcceptorHandshake("g", "n2", MEMBERS, secret)
    connector = hk.ConnectorHandshake("g", "n1", secret=secret, expect_id="n0")
    accepted = acceptor.receive_hello(connector.receive_challenge(acceptor.challenge()))
    with pytest.raises(hk.HandshakeRejected) as err:
        connector.receive_welcome(accepted.reply)
    assert err.value.code == hk.UNEXPECTED_MEMBER


@pytest.mark.parametrize("frame", [None, [], {"t": 3}, {"t": "hello"}, {"t": "hello", "v": 1, "group": "g"}])
def test_malformed_hello_is_rejected_not_crashing(frame):
    with pytest.raises(hk.HandshakeRejected):
        hk.AcceptorHandshake("g", "n0", MEMBERS).receive_hello(frame)


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


# ----------------------------------------------------------------- sessions (issue 12)

S = "a-shared-secret-of-16+"


def _sessions(role=hk.ROLE_PEER, allow_clients=True):
    acc = hk.AcceptorHandshake("g", "n0", ["n0", "n1"], S, allow_clients=allow_clients)
    con = hk.ConnectorHandshake("g", "n1" if role == hk.ROLE_PEER else "cli", role, S, expect_id="n0")
    accepted = acc.receive_hello(con.receive_challenge(acc.challenge()))
    assert con.receive_welcome(accepted.reply) == "n0"
    return accepted.session, con.session


def test_sealed_frames_round_trip_in_both_directions_and_keys_differ_per_direction():
    a, c = _sessions()
    dec_a, dec_c = fr.FrameDecoder(), fr.FrameDecoder()
    dec_a.opener, dec_c.opener = a.opener, c.opener
    parts: list = []
    c.sealer.seal([fr.encode_payload({"i": i}) for i in range(3)], parts)
    assert dec_a.feed(b"".join(parts)) == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert dec_c.feed(a.sealer.frame(fr.encode_payload("back"))) == ["back"]
    reflected = c.sealer.frame(fr.encode_payload("x"))
    with pytest.raises(fr.FrameAuthError):  # a connector frame reflected back to the connector
        dec_c.feed(reflected)


def test_each_connection_gets_fresh_keys_so_frames_do_not_replay_across_connections():
    a1, c1 = _sessions()
    a2, _ = _sessions()
    frame = c1.sealer.frame(fr.encode_payload({"vote": 1}))
    dec = fr.FrameDecoder()
    dec.opener = a2.opener
    with pytest.raises(fr.FrameAuthError):
        dec.feed(frame)
    with pytest.raises(fr.FrameError):  # the decoder stays failed
        dec.feed(b"")


def test_feed_limit_leaves_the_rest_buffered():
    dec = fr.FrameDecoder()
    wire = fr.encode_frames([1, 2, 3])
    assert dec.feed(wire, 1) == [1]
    assert dec.feed(b"", 1) == [2]
    assert dec.feed(b"") == [3]


def test_acceptor_serving_peers_only_refuses_clients():
    acc = hk.AcceptorHandshake("g", "n0", ["n0", "n1"], S, allow_clients=False)
    con = hk.ConnectorHandshake("g", "cli", hk.ROLE_CLIENT, S)
    with pytest.raises(hk.HandshakeRejected) as err:
        acc.receive_hello(con.receive_challenge(acc.challenge()))
    assert err.value.code == hk.CLIENTS_REFUSED


def test_welcome_without_session_proof_is_refused_by_a_connector_with_a_secret():
    acc = hk.AcceptorHandshake("g", "n0", ["n0", "n1"], None)  # impostor without the secret
    con = hk.ConnectorHandshake("g", "n1", hk.ROLE_PEER, S)
    accepted = acc.receive_hello(con.receive_challenge(acc.challenge()))
    with pytest.raises(hk.HandshakeRejected) as err:
        con.receive_welcome(accepted.reply)
    assert err.value.code == hk.AUTH_FAILED and con.session is None


def test_tag_is_truncated_hmac_sha256_of_sequence_and_payload():
    import hashlib
    import hmac

    key = b"k" * 32
    sealer = fr.FrameSealer(key)
    for seq, payload in enumerate([b"", b"x" * 100, b"y" * 5000]):
        expected = hmac.new(key, seq.to_bytes(8, "big") + payload, hashlib.sha256).digest()[:16]
        assert sealer.tag(payload) == expected

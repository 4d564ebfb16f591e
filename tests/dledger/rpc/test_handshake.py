"""The connection handshake (challenge, hello, welcome) and the session keys it yields (sans-I/O)."""
from __future__ import annotations

import pytest

from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk


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

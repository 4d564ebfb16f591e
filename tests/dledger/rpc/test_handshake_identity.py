"""Issue 13.7: peers exchange and compare file sizes / broker name in the handshake (sans-I/O)."""
from __future__ import annotations

import pytest

from dledger.config import DLedgerConfig
from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk

MEMBERS = ["n0", "n1", "n2"]
S = "0123456789abcdef-secret"
KEYS = {"data_file_size": "mappedFileSizeCommitLog", "index_file_size": "mappedFileSizeForEntryIndex",
        "broker_name": "brokerName"}


def _wire(frame):
    (out,) = fr.FrameDecoder().feed(fr.encode_frame(frame))
    return out


def _pair(mine: dict, theirs: dict, secret=S):
    acc = hk.AcceptorHandshake("g", "n0", MEMBERS, secret, ident=mine, ident_keys=KEYS)
    con = hk.ConnectorHandshake("g", "n1", hk.ROLE_PEER, secret, expect_id="n0", ident=theirs, ident_keys=KEYS)
    return acc, con


def test_same_identity_connects_and_session_works():
    ident = {"data_file_size": 1 << 20, "index_file_size": 32 * 1024, "broker_name": "broker-a"}
    acc, con = _pair(ident, dict(ident))
    accepted = acc.receive_hello(_wire(con.receive_challenge(_wire(acc.challenge()))))
    assert con.receive_welcome(_wire(accepted.reply)) == "n0"
    payload = fr.encode_payload({"t": "x"})
    assert bytes(accepted.session.opener.open(con.session.sealer.frame(payload)[4:])) == payload


@pytest.mark.parametrize("secret", [S, None])
@pytest.mark.parametrize("field, mine, theirs", [
    ("data_file_size", 1 << 20, 2 << 20),
    ("index_file_size", 32 * 1024, 64 * 1024),
    ("broker_name", "broker-a", "broker-b"),
])
def test_acceptor_refuses_a_different_identity_naming_both_values_and_the_key(secret, field, mine, theirs):
    acc, con = _pair({field: mine}, {field: theirs}, secret)
    hello = _wire(con.receive_challenge(_wire(acc.challenge())))
    with pytest.raises(hk.HandshakeRejected) as err:
        acc.receive_hello(hello)
    text = err.value.reason
    assert f"n1 has {theirs}, n0 has {mine}" in text and f"set {KEYS[field]} to the same value" in text
    with pytest.raises(hk.HandshakeRejected, match=f"n1 has {theirs}, n0 has {mine}"):  # the connector logs it too
        con.receive_welcome(_wire(err.value.to_frame()))


def test_connector_refuses_even_if_the_acceptor_did_not_compare(monkeypatch):
    acc = hk.AcceptorHandshake("g", "n0", MEMBERS, S, ident={"data_file_size": 1 << 20})
    con = hk.ConnectorHandshake("g", "n1", hk.ROLE_PEER, S, expect_id="n0", ident={"data_file_size": 2 << 20},
                                ident_keys=KEYS)
    hello = _wire(con.receive_challenge(_wire(acc.challenge())))
    with monkeypatch.context() as m:  # an acceptor that does not compare (a build without the check)
        m.setattr(hk, "compare_ident", lambda *a: None)
        accepted = acc.receive_hello(hello)
    with pytest.raises(hk.HandshakeRejected, match="n0 has 1048576, n1 has 2097152; set mappedFileSizeCommitLog"):
        con.receive_welcome(_wire(accepted.reply))


def test_identity_is_bound_by_the_mac():
    """A man in the middle that rewrites the ident in the hello breaks the proof."""
    ident = {"data_file_size": 1 << 20}
    acc, con = _pair(ident, dict(ident))
    hello = _wire(con.receive_challenge(_wire(acc.challenge())))
    hello["ident"] = {"data_file_size": 1 << 20, "broker_name": "x"}
    acc.ident = dict(hello["ident"])  # so only the MAC can notice
    with pytest.raises(hk.HandshakeRejected, match="failed authentication"):
        acc.receive_hello(hello)


def test_clients_are_not_compared_and_mistyped_ident_refused():
    acc = hk.AcceptorHandshake("g", "n0", MEMBERS, S, ident={"data_file_size": 1 << 20})
    cli = hk.ConnectorHandshake("g", "cli-1", hk.ROLE_CLIENT, S)
    accepted = acc.receive_hello(_wire(cli.receive_challenge(_wire(acc.challenge()))))
    assert cli.receive_welcome(_wire(accepted.reply)) == "n0" and accepted.role == hk.ROLE_CLIENT
    acc2, con2 = _pair({}, {})
    hello = _wire(con2.receive_challenge(_wire(acc2.challenge())))
    hello["ident"] = ["not", "a", "map"]
    with pytest.raises(hk.HandshakeRejected, match="'ident' mistyped"):
        acc2.receive_hello(hello)


def test_config_handshake_identity_names_broker_keys():
    cfg = DLedgerConfig(broker_name="broker-a", mapped_file_size_for_entry_data=1 << 20,
                        conf_keys={"data_file_size": "mappedFileSizeCommitLog"})
    ident = cfg.handshake_identity()
    assert ident["data_file_size"] == (1 << 20, "mappedFileSizeCommitLog")
    assert ident["broker_name"] == ("broker-a", "brokerName")
    assert "broker_name" not in DLedgerConfig().handshake_identity()
    assert DLedgerConfig().conf_key("data_file_size") == "--data-file-size (mappedFileSizeForEntryData)"

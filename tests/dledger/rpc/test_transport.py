"""PeerTransport over real sockets on 127.0.0.1: delivery, auth refusal, frame limits, reconnect."""
from __future__ import annotations

import asyncio
import struct

import pytest

from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk
from dledger.rpc.transport import PeerTransport
from tools.procs import free_ports

pytestmark = pytest.mark.timeout(30)


def peers_for(ids: list[str]) -> dict[str, tuple[str, int]]:
    return {i: ("127.0.0.1", p) for i, p in zip(ids, free_ports(len(ids)))}


class Node:
    def __init__(self, self_id, peers, **kw):
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.states: list = []
        self.t = PeerTransport(
            "g", self_id, peers,
            on_peer_message=lambda src, m: self.inbox.put_nowait((src, m)),
            on_peer_state=lambda p, up: self.states.append((p, up)),
            **kw,
        )

    async def recv(self, timeout=5.0):
        return await asyncio.wait_for(self.inbox.get(), timeout)


async def wait_for(cond, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("secret", [None, "a-shared-secret-of-16+"])
async def test_three_nodes_exchange_messages_in_order(secret):
    peers = peers_for(["n0", "n1", "n2"])
    nodes = {i: Node(i, peers, secret=secret) for i in peers}
    for n in nodes.values():
        await n.t.start()
    try:
        for i in range(200):
            nodes["n0"].t.send("n1", {"i": i, "body": b"x" * 100})
        nodes["n2"].t.send("n0", {"hello": "from n2"})
        got = [await nodes["n1"].recv() for _ in range(200)]
        assert [m["i"] for _, m in got] == list(range(200))
        assert all(src == "n0" for src, _ in got)
        assert await nodes["n0"].recv() == ("n2", {"hello": "from n2"})
        st = nodes["n0"].t.stats()
        assert st["frames_sent"] == 200
        assert st["writes"] < 200  # coalesced
        await wait_for(lambda: all(n.t.stats()["peers"][p]["connected"] for n in nodes.values() for p in n.t.links))
    finally:
        for n in nodes.values():
            await n.t.stop()


async def test_messages_queued_before_the_peer_listens_are_delivered_after_reconnect():
    peers = peers_for(["n0", "n1"])
    a = Node("n0", peers, reconnect_min_s=0.01, reconnect_max_s=0.05)
    await a.t.start()
    b = Node("n1", peers)
    try:
        a.t.send("n1", {"early": 1})
        await asyncio.sleep(0.2)  # several failed connection attempts
        assert not a.t.is_connected("n1")
        await b.t.start()
        assert await b.recv() == ("n0", {"early": 1})
        # kill n1 and bring it back: the link reconnects by itself
        await b.t.stop()
        await wait_for(lambda: not a.t.is_connected("n1"))
        b2 = Node("n1", peers)
        await b2.t.start()
        try:
            await wait_for(lambda: a.t.is_connected("n1"))
            a.t.send("n1", {"late": 2})
            assert await b2.recv() == ("n0", {"late": 2})
            assert ("n1", True) in a.states and ("n1", False) in a.states
            assert a.t.stats()["connects"] >= 2
        finally:
            await b2.t.stop()
    finally:
        await a.t.stop()
        await b.t.stop()


async def test_queue_is_bounded_drop_oldest():
    peers = peers_for(["n0", "n1"])
    a = Node("n0", peers, max_queue_bytes=2000)
    await a.t.start()
    b = Node("n1", peers)
    try:
        for i in range(100):
            a.t.send("n1", {"i": i, "pad": b"p" * 80})
        st = a.t.stats()
        assert st["peers"]["n1"]["queued_bytes"] <= 2000
        assert st["dropped_full"] > 0
        await b.t.start()
        first = await b.recv()
        assert first[1]["i"] > 0  # the oldest were dropped
        last = first
        while not b.inbox.empty() or last[1]["i"] != 99:
            last = await b.recv()
        assert last[1]["i"] == 99  # the newest survived
    finally:
        await a.t.stop()
        await b.t.stop()


async def _raw_dial(port: int):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    dec = fr.FrameDecoder()

    async def read_frame():
        while True:
            frames = dec.feed(await asyncio.wait_for(reader.read(65536), 5))
            if frames:
                return frames[0]
            if reader.at_eof():
                return None

    return reader, writer, read_frame


async def _handshake_as(port, self_id, secret, role=hk.ROLE_PEER, with_session=False):
    reader, writer, read_frame = await _raw_dial(port)
    hs = hk.ConnectorHandshake("g", self_id, role, secret)
    writer.write(fr.encode_frame(hs.receive_challenge(await read_frame())))
    reply = await read_frame()
    if reply is not None and reply.get("t") == "welcome":
        hs.receive_welcome(reply)
    return (reader, writer, reply, hs.session) if with_session else (reader, writer, reply)


@pytest.mark.parametrize(
    "self_id, secret, code",
    [("intruder", "k", hk.UNKNOWN_MEMBER), ("n1", "wrong", hk.AUTH_FAILED), ("n1", None, hk.AUTH_FAILED)],
)
async def test_refuses_non_member_and_wrong_secret(self_id, secret, code):
    peers = peers_for(["n0", "n1"])
    n0 = Node("n0", peers, secret="k")
    await n0.t.start()
    try:
        reader, writer, reply = await _handshake_as(peers["n0"][1], self_id, secret)
        assert reply["t"] == "reject" and reply["code"] == code
        # the acceptor closes; any frame we try to inject is not delivered
        writer.write(fr.encode_frame({"evil": True}))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        assert n0.inbox.empty()
        assert n0.t.stats()["handshake_failures"] >= 1
    finally:
        await n0.t.stop()


async def test_nodes_with_different_secrets_never_talk():
    peers = peers_for(["n0", "n1"])
    a = Node("n0", peers, secret="alpha", reconnect_max_s=0.05)
    b = Node("n1", peers, secret="beta", reconnect_max_s=0.05)
    await a.t.start()
    await b.t.start()
    try:
        a.t.send("n1", {"x": 1})
        b.t.send("n0", {"y": 1})
        await asyncio.sleep(0.4)
        assert a.inbox.empty() and b.inbox.empty()
        assert not a.t.is_connected("n1") and not b.t.is_connected("n0")
        assert "rejected" in (a.t.stats()["peers"]["n1"]["last_error"] or "")
    finally:
        await a.t.stop()
        await b.t.stop()


async def test_oversize_frame_drops_the_connection_but_the_node_keeps_serving():
    peers = peers_for(["n0", "n1"])
    n0 = Node("n0", peers, max_frame_size=1024)
    await n0.t.start()
    try:
        reader, writer, reply = await _handshake_as(peers["n0"][1], "n1", None)
        assert reply["t"] == "welcome"
        writer.write(fr.encode_frame({"ok": 1}))
        assert await n0.recv() == ("n1", {"ok": 1})
        writer.write(struct.pack(">I", 1025) + b"\0" * 10)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # dropped
        writer.close()
        assert n0.t.stats()["oversize_frames"] == 1
        # a well-behaved peer still gets through
        n1 = Node("n1", peers)
        await n1.t.start()
        try:
            n1.t.send("n0", {"after": 1})
            assert await n0.recv() == ("n1", {"after": 1})
        finally:
            await n1.t.stop()
    finally:
        await n0.t.stop()


async def test_silent_connection_is_dropped_after_handshake_timeout():
    peers = peers_for(["n0", "n1"])
    n0 = Node("n0", peers, handshake_timeout_s=0.2)
    await n0.t.start()
    try:
        reader, writer, read_frame = await _raw_dial(peers["n0"][1])
        assert (await read_frame())["t"] == "challenge"
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
    finally:
        await n0.t.stop()


async def test_client_role_gets_request_handler_and_replies():
    peers = peers_for(["n0", "n1"])
    seen = []

    def handle(session, req):
        seen.append(session.client_id)
        session.reply({"t": "resp", "rid": req["rid"], "code": 200, "echo": req["data"]})

    n0 = PeerTransport("g", "n0", peers, on_peer_message=lambda *a: None, on_client_request=handle, secret="k")
    await n0.start()
    try:
        reader, writer, reply, session = await _handshake_as(peers["n0"][1], "cli", "k", role=hk.ROLE_CLIENT,
                                                             with_session=True)
        assert reply["t"] == "welcome"
        parts: list = []
        session.sealer.seal([fr.encode_payload({"t": "req", "rid": i, "op": "echo", "data": i}) for i in range(5)],
                            parts)
        writer.write(b"".join(parts))
        dec = fr.FrameDecoder()
        dec.opener = session.opener
        got = []
        for _ in range(50):
            if len(got) >= 5:
                break
            data = await asyncio.wait_for(reader.read(65536), 5)
            assert data, "connection dropped"
            got += dec.feed(data)
        assert [g["echo"] for g in got] == list(range(5))
        assert seen == ["cli"] * 5
        writer.close()
    finally:
        await n0.stop()


# ----------------------------------------------------------------- per-frame tags (issue 12)

SECRET = "a-shared-secret-of-16+"


async def _sealed_peer(port):
    reader, writer, reply, session = await _handshake_as(port, "n1", SECRET, with_session=True)
    assert reply["t"] == "welcome" and session is not None
    return reader, writer, session


@pytest.mark.parametrize("attack", ["untagged", "bad_tag", "replay", "reorder", "truncated"])
async def test_a_frame_that_fails_its_tag_drops_the_connection(attack):
    peers = peers_for(["n0", "n1"])
    n0 = Node("n0", peers, secret=SECRET)
    await n0.t.start()
    try:
        reader, writer, session = await _sealed_peer(peers["n0"][1])
        first = session.sealer.frame(fr.encode_payload({"i": 0}))
        writer.write(first)
        assert await n0.recv() == ("n1", {"i": 0})
        p1, p2 = fr.encode_payload({"i": 1}), fr.encode_payload({"i": 2})
        if attack == "untagged":
            bad = fr.encode_frame({"i": 1})
        elif attack == "bad_tag":
            good = bytearray(session.sealer.frame(p1))
            good[-1] ^= 1
            bad = bytes(good)
        elif attack == "replay":
            bad = first  # frame #0 again, where #1 is expected
        elif attack == "reorder":
            f1, f2 = session.sealer.frame(p1), session.sealer.frame(p2)
            bad = f2 + f1
        else:
            bad = struct.pack(">I", 3) + b"abc"  # shorter than a tag
        writer.write(bad)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # dropped
        writer.close()
        assert n0.inbox.empty()
        assert n0.t.stats()["auth_failures"] == 1
        # the real peer still gets through on a fresh connection
        n1 = Node("n1", peers, secret=SECRET)
        await n1.t.start()
        try:
            n1.t.send("n0", {"after": 1})
            assert await n0.recv() == ("n1", {"after": 1})
        finally:
            await n1.t.stop()
    finally:
        await n0.t.stop()


async def test_peers_only_port_refuses_the_client_role():
    peers = peers_for(["n0", "n1"])
    seen = []
    n0 = PeerTransport("g", "n0", peers, on_peer_message=lambda *a: None,
                       on_client_request=lambda s, r: seen.append(r), secret=SECRET, serve_clients=False)
    await n0.start()
    try:
        reader, writer, reply = await _handshake_as(peers["n0"][1], "cli", SECRET, role=hk.ROLE_CLIENT)
        assert reply["t"] == "reject" and reply["code"] == hk.CLIENTS_REFUSED
        assert "peers only" in reply["reason"]
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        assert seen == []
    finally:
        await n0.stop()


async def test_an_impostor_acceptor_cannot_make_a_connector_buffer_a_huge_welcome():
    """Issue 23.1, the dialling side: before the handshake completes a connector (a member's link
    or a client) also refuses a length prefix over 4 KiB, at the header."""
    from dledger.rpc.client import RpcConnection

    peers = peers_for(["n0", "n1"])
    sent: list[int] = []

    async def impostor(reader, writer):
        writer.write(fr.encode_frame({"t": "challenge", "v": hk.PROTOCOL_VERSION, "nonce": b"\0" * 16}))
        await reader.read(4096)  # the hello
        writer.write(struct.pack(">I", 10 * 1024 * 1024) + b"\0" * 100_000)
        try:
            await writer.drain()
            sent.append(1)
            await asyncio.wait_for(reader.read(), 5)
        finally:
            writer.close()

    server = await asyncio.start_server(impostor, "127.0.0.1", peers["n1"][1])
    n0 = Node("n0", peers, secret="a-shared-secret-of-16+")
    await n0.t.start()
    try:
        await wait_for(lambda: n0.t.stats()["oversize_frames"] >= 1)
        assert not n0.t.is_connected("n1")
        with pytest.raises((fr.FrameError, ConnectionError)):
            await RpcConnection.open("127.0.0.1", peers["n1"][1], "g", secret="a-shared-secret-of-16+", timeout=3)
    finally:
        await n0.t.stop()
        server.close()
        await server.wait_closed()

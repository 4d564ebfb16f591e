"""DLedgerServer: in-process 3-member groups on 127.0.0.1 (real sockets, real files, real clock)."""
from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Optional

import pytest

from dledger.config import DLedgerConfig
from dledger.core.codes import Code, Role
from dledger.errors import DLedgerError
from dledger.rpc.client import DLedgerClient
from dledger.server import DLedgerServer
from dledger.storelog import open_store
from tools.procs import free_ports

pytestmark = pytest.mark.timeout(60)
GROUP_SECRET = "test-group-secret-0123"  # members refuse to start without one (issue 12)


class Group:
    def __init__(self, root: Path, n: int = 3, barrier: bool = True, server_kw: Optional[dict] = None,
                 **cfg) -> None:
        self.root = root
        self.server_kw = server_kw or {}
        self.ids = [f"n{i}" for i in range(n)]
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(self.ids, free_ports(n)))
        self.cfg = {"mapped_file_size_for_entry_data": 1 << 20, "mapped_file_size_for_entry_index": 32 * 1024,
                    "auth_token": GROUP_SECRET, **cfg}
        self.barrier = barrier
        self.servers: dict[str, DLedgerServer] = {}

    def config(self, nid: str) -> DLedgerConfig:
        return DLedgerConfig(group="g", self_id=nid, peers=self.peers, store_base_dir=str(self.root), **self.cfg)

    async def start(self, nid: str) -> DLedgerServer:
        s = DLedgerServer(self.config(nid), leader_barrier_body=(lambda: b"") if self.barrier else None, seed=hash(nid),
                          **self.server_kw)
        await s.start()
        self.servers[nid] = s
        return s

    async def start_all(self) -> None:
        for nid in self.ids:
            await self.start(nid)

    async def stop(self, nid: str) -> None:
        await self.servers.pop(nid).shutdown()

    async def stop_all(self) -> None:
        for nid in list(self.servers):
            await self.stop(nid)

    async def leader(self, timeout: float = 10.0, exclude: Optional[str] = None) -> DLedgerServer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            leaders = [s for n, s in self.servers.items() if s.is_leader and n != exclude]
            if len(leaders) == 1:
                # ready to take appends (barrier appended)
                if leaders[0].core.barrier is None:
                    return leaders[0]
            await asyncio.sleep(0.01)
        raise AssertionError(f"no leader: {[(n, s.role) for n, s in self.servers.items()]}")

    async def converged(self, timeout: float = 10.0) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            sts = [s.status() for s in self.servers.values()]
            ends = {st["end_index"] for st in sts}
            commits = {st["committed_index"] for st in sts}
            if len(ends) == 1 and commits == ends:
                return ends.pop()
            await asyncio.sleep(0.02)
        raise AssertionError([(s["self_id"], s["end_index"], s["committed_index"]) for s in sts])


@pytest.fixture
async def group(tmp_path):
    groups: list[Group] = []

    def make(**kw) -> Group:
        g = Group(tmp_path / f"g{len(groups)}", **kw)
        groups.append(g)
        return g

    yield make
    for g in groups:
        await g.stop_all()


def raw_entries(server: DLedgerServer, lo: int, hi: int) -> list[bytes]:
    return [bytes(v) for v in server.log_view.store.get_raw(lo, hi + 1)]


async def test_three_members_elect_one_leader_and_replicate(group):
    g = group()
    await g.start_all()
    leader = await g.leader()
    followers = [s for s in g.servers.values() if s is not leader]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0  # followers learn the leader from its first heartbeat
    while not all(s.role is Role.FOLLOWER and s.leader_id == leader.config.self_id for s in followers):
        assert loop.time() < deadline, [(s.config.self_id, s.role, s.leader_id) for s in followers]
        await asyncio.sleep(0.01)
    assert len({s.term for s in g.servers.values()}) == 1
    futs = [leader.append(b"body-%d" % i) for i in range(200)]
    # index and pos are known synchronously, before the quorum ack
    assert all(f.index >= 0 and f.pos >= 0 and not f.done() for f in futs)
    assert [f.index for f in futs] == list(range(futs[0].index, futs[0].index + 200))
    results = await asyncio.gather(*futs)
    assert results == [(f.index, f.pos) for f in futs]
    end = await g.converged()
    copies = [raw_entries(s, 0, end) for s in g.servers.values()]
    assert copies[0] == copies[1] == copies[2]
    for f, i in zip(futs, range(200)):
        e = leader.log_view.store.get(f.index)
        assert (e.pos, bytes(e.body)) == (f.pos, b"body-%d" % i)
    # A follower learns the commit index from the leader and acks its own append only after its
    # flush, so the leader's match_index for it may trail a converged log for a moment: wait (bounded).
    deadline = loop.time() + 5.0
    st = leader.status()
    while not all(p["match_index"] == end for p in st["peers"].values()) and loop.time() < deadline:
        await asyncio.sleep(0.01)
        st = leader.status()
    assert st["role"] == "LEADER" and st["committed_index"] == end
    assert set(st["peers"]) == {s.config.self_id for s in followers}
    assert all(p["match_index"] == end for p in st["peers"].values())


async def test_hooks_run_on_leader_only_and_followers_receive_patched_bytes(group):
    g = group()
    calls: dict[str, int] = {}

    def make_hook(nid):
        def hook(entry, buffer, body_offset):
            calls[nid] = calls.get(nid, 0) + 1
            if len(buffer) >= body_offset + 8:
                buffer[body_offset:body_offset + 8] = struct.pack(">q", entry.pos + body_offset)  # like RocketMQ PHY_POS
        return hook

    await g.start_all()
    for nid, s in g.servers.items():
        s.add_append_hook(make_hook(nid))
    leader = await g.leader()
    calls.clear()
    futs = [leader.append(b"\0" * 8 + b"payload") for _ in range(20)]
    await asyncio.gather(*futs)
    await g.converged()
    assert calls == {leader.config.self_id: 20}
    for s in g.servers.values():
        for f in futs:
            e = s.log_view.store.get(f.index)
            assert struct.unpack(">q", bytes(e.body[:8]))[0] == f.pos + 48


async def test_batch_positions_are_contiguous(group):
    g = group()
    await g.start_all()
    leader = await g.leader()
    bodies = [b"x" * (128 * (1 + i)) for i in range(10)]
    fut = leader.append_batch(bodies)
    assert len(fut.positions) == 10
    base = fut.pos
    # DLedger AppendAndPushTest.testBatchAppend: pos_i = base + 48*i + 128*(1+i)*i/2
    assert fut.positions == [base + 48 * i + 128 * (1 + i) * i // 2 for i in range(10)]
    res = await fut
    assert res == [(fut.index + i, p) for i, p in enumerate(fut.positions)]


async def test_follower_refuses_with_leader_hint(group):
    g = group()
    await g.start_all()
    leader = await g.leader()
    follower = next(s for s in g.servers.values() if s is not leader)
    for _ in range(500):  # the follower learns the leader from its first push
        if follower.leader_id is not None:
            break
        await asyncio.sleep(0.01)
    fut = follower.append(b"x")
    assert fut.done() and fut.index == -1 and fut.code is Code.NOT_LEADER
    err = fut.exception()
    assert isinstance(err, DLedgerError) and err.leader_id == leader.config.self_id
    assert err.leader_addr == leader.config.address_of(leader.config.self_id)


async def test_ack_timeout_then_pending_full_then_leader_steps_down(group):
    # DLedger AppendAndPushTest.testPushNetworkOffline + LeaderElectorTest.testThreeServerAndShutdownFollowers
    g = group(max_wait_ack_ms=200, max_pending_requests=5, election_timeout_min_ms=1500,
              election_timeout_max_ms=2000, heartbeat_interval_ms=100)
    await g.start_all()
    leader = await g.leader()
    await asyncio.gather(leader.append(b"ok"))
    term = leader.term
    for nid in [n for n in g.servers if g.servers[n] is not leader]:
        await g.stop(nid)
    futs = [leader.append(b"lost-%d" % i) for i in range(5)]
    full = leader.append(b"one too many")
    assert full.done() and full.code is Code.LEADER_PENDING_FULL
    for f in futs:
        with pytest.raises(DLedgerError) as err:
            await f
        assert err.value.code == Code.WAIT_QUORUM_ACK_TIMEOUT
    # no quorum for an election timeout: the leader steps down, term unchanged
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while leader.is_leader and loop.time() < deadline:
        await asyncio.sleep(0.02)
    assert not leader.is_leader and leader.core.status().term == term


async def test_leadership_transfer(group):
    g = group()
    await g.start_all()
    leader = await g.leader()
    await asyncio.gather(*[leader.append(b"t%d" % i) for i in range(50)])
    target = next(n for n in g.ids if n != leader.config.self_id)
    old_term = leader.term
    code = await leader.transfer_leadership(target)
    assert code is Code.SUCCESS
    new = await g.leader()
    assert new.config.self_id == target and new.term > old_term
    assert not leader.is_leader
    await new.append(b"after transfer")
    await g.converged()


async def test_preferred_leader_takes_over(group):
    g = group(preferred_leader_ids="n2", preferred_leader_check_ms=100)
    await g.start_all()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    while loop.time() < deadline:
        leaders = [n for n, s in g.servers.items() if s.is_leader]
        if leaders == ["n2"]:
            break
        await asyncio.sleep(0.05)
    assert [n for n, s in g.servers.items() if s.is_leader] == ["n2"]


async def test_restarted_follower_catches_up_and_restart_keeps_term(group, tmp_path):
    g = group()
    await g.start_all()
    leader = await g.leader()
    await asyncio.gather(*[leader.append(b"a%d" % i) for i in range(50)])
    victim = next(n for n in g.ids if n != leader.config.self_id)
    await g.stop(victim)
    await asyncio.gather(*[leader.append(b"b%d" % i) for i in range(100)])
    s = await g.start(victim)
    assert s.term == leader.term  # currterm persisted and reloaded
    end = await g.converged()
    copies = [raw_entries(x, 0, end) for x in g.servers.values()]
    assert copies[0] == copies[1] == copies[2]


async def test_role_listeners_and_status_counters(group):
    g = group()
    seen: list[tuple[int, Role]] = []
    await g.start_all()
    for s in g.servers.values():
        s.add_role_change_listener(lambda term, role: seen.append((term, role)))
    leader = await g.leader()
    code = await leader.transfer_leadership(next(n for n in g.ids if n != leader.config.self_id))
    assert code is Code.SUCCESS
    await g.leader()
    assert any(r is Role.LEADER for _, r in seen) and any(r is Role.FOLLOWER for _, r in seen)
    st = leader.status()
    assert st["counters"]["role_changes"] >= 2 and st["transport"]["frames_sent"] > 0


async def test_client_channel_append_get_status_transfer_and_redirect(group):
    g = group(auth_token="s3cret-of-16-chars+")
    await g.start_all()
    leader = await g.leader()
    peers = {n: ("127.0.0.1", g.config(n).peer_map[n][1]) for n in g.ids}
    follower = next(n for n in g.ids if n != leader.config.self_id)
    client = DLedgerClient(peers, "g", secret="s3cret-of-16-chars+", timeout=5)
    client.leader_id = follower  # start at the wrong member: NOT_LEADER redirect
    try:
        res = await client.append_batch([b"one", b"two"])
        assert client.leader_id == leader.config.self_id
        assert [r.index for r in res] == [res[0].index, res[0].index + 1]
        e = await client.get(res[1].index)
        assert e["body"] == b"two" and e["pos"] == res[1].pos
        st = await client.status(follower)
        assert st["role"] == "FOLLOWER" and st["leader_id"] == leader.config.self_id
        with pytest.raises(DLedgerError) as err:
            await client.get(10_000)
        assert err.value.code == Code.INDEX_OUT_OF_RANGE
        assert await client.transfer(follower) == follower
        res2 = await client.append(b"three")  # follows the new leader
        assert client.leader_id == follower and res2.index > res[1].index
    finally:
        await client.close()
    bad = DLedgerClient(peers, "g", secret="wrong", timeout=2)
    try:
        with pytest.raises(DLedgerError) as err:
            await bad.append(b"x")
        assert err.value.code == Code.UNKNOWN_MEMBER
    finally:
        await bad.close()


async def test_store_reopens_with_identical_committed_entries(group, tmp_path):
    g = group()
    await g.start_all()
    leader = await g.leader()
    futs = [leader.append(b"persist-%d" % i) for i in range(30)]
    await asyncio.gather(*futs)
    end = await g.converged()
    configs = [s.config for s in g.servers.values()]
    await g.stop_all()
    stores = [open_store(c) for c in configs]
    try:
        assert all(s.committed_index == end for s in stores)  # checkpoint written at shutdown
        raws = [[bytes(v) for v in s.get_raw(0, end + 1)] for s in stores]
        assert raws[0] == raws[1] == raws[2] and len(raws[0]) == end + 1
        for f, i in zip(futs, range(30)):
            assert bytes(stores[0].get(f.index).body) == b"persist-%d" % i
    finally:
        for s in stores:
            s.shutdown()


async def test_concurrent_client_appends_are_coalesced(group):
    """64 clients' single-body requests on one connection: fewer store write batches than
    requests, hooks once per entry, every request gets its own (index, pos)."""
    g = group()
    await g.start_all()
    leader = await g.leader()
    hooked: list[int] = []
    leader.add_append_hook(lambda entry, buf, off: hooked.append(entry.index))
    peers = {n: ("127.0.0.1", g.config(n).peer_map[n][1]) for n in g.ids}
    client = DLedgerClient(peers, "g", secret=GROUP_SECRET, timeout=5)
    try:
        await client.append(b"warm")
        before = dict(leader.status()["counters"])
        hooked.clear()
        res = await asyncio.gather(*(client.append(b"c-%d" % i) for i in range(64)))
        after = leader.status()["counters"]
        idx = sorted(r.index for r in res)
        assert idx == list(range(idx[0], idx[0] + 64)) and sorted(hooked) == idx
        assert after["coalesced_requests"] - before["coalesced_requests"] == 64
        batches = after["append_batches"] - before["append_batches"]
        assert 1 <= batches < 64, batches
        for i in (0, 31, 63):
            e = await client.get(res[i].index)
            assert e["body"] == b"c-%d" % i and e["pos"] == res[i].pos
    finally:
        await client.close()


async def test_append_queued_bounds_window_and_refusals(group):
    g = group(server_kw={"coalesce_max_entries": 4, "coalesce_window_ms": 30})
    await g.start_all()
    leader = await g.leader()
    b0 = leader.status()["counters"]["append_batches"]
    futs = []
    for i in range(10):  # across loop iterations, inside one window
        futs.append(leader.append_queued([b"q-%d" % i]))
        await asyncio.sleep(0)
    big = leader.append_queued([b"big-%d" % i for i in range(6)])  # larger than the bound: whole
    assert big.index == -1 and not big.done()  # not written before the flush
    results = await asyncio.gather(*futs, big)
    assert leader.status()["counters"]["append_batches"] - b0 == 4  # 4 + 4 + 2, then the 6
    flat = [r for rs in results for r in rs]
    assert [i for i, _ in flat] == list(range(flat[0][0], flat[0][0] + 16))
    assert big.index == flat[10][0] and big.positions == [p for _, p in flat[10:]]
    follower = next(s for s in g.servers.values() if s is not leader)
    for _ in range(500):
        if follower.leader_id is not None:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(DLedgerError) as err:
        await follower.append_queued([b"x"])
    assert err.value.code == Code.NOT_LEADER and err.value.leader_id == leader.config.self_id
    empty = leader.append_queued([])
    assert empty.done() and empty.code is Code.REQUEST_WITH_EMPTY_BODYS


async def test_failed_store_write_releases_indexes(group):
    """A store write that fails (here: an injected OSError) fails only its requests; the core
    takes the indexes back and the member keeps serving."""
    g = group()
    await g.start_all()
    leader = await g.leader()
    await leader.append(b"before")
    real = leader.log_view.append_as_leader
    end = leader.log_view.ledger_end_index

    def broken(*a, **k):
        raise OSError(5, "injected I/O error")

    leader.log_view.append_as_leader = broken  # type: ignore[method-assign]
    sync = leader.append(b"lost")
    queued = leader.append_queued([b"lost-too"])
    with pytest.raises(DLedgerError) as err:
        await queued
    assert sync.done() and sync.code is Code.DISK_ERROR and err.value.code == Code.DISK_ERROR
    leader.log_view.append_as_leader = real  # type: ignore[method-assign]
    assert leader.fatal_error is None and leader.core.log.last_index == end
    index, _ = await leader.append(b"after")
    assert index == end + 1
    assert (await g.converged()) >= end + 1


async def test_cli_server_exits_when_the_member_stops_itself(tmp_path, monkeypatch):
    """``dledger server``: a fatal error (e.g. a failed flush) ends run_server with a UserError
    (exit status 1) instead of leaving a process that no longer serves."""
    from dledger import cli

    port = free_ports(1)[0]
    cfg = DLedgerConfig(group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}", store_base_dir=str(tmp_path),
                        mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=32 * 1024,
                        allow_insecure=True)
    real_start = DLedgerServer.start

    async def start_then_fail(self):
        await real_start(self)
        self._on_flush_error(OSError(5, "injected flush failure"))

    monkeypatch.setattr(DLedgerServer, "start", start_then_fail)
    with pytest.raises(cli.UserError, match="injected flush failure"):
        await asyncio.wait_for(cli.run_server(cfg, barrier=True), 10)


# ------------------------------------------------------------------ doors (issue 12)


async def _peer_session(port: int, claim_id: str, secret: str, ident: dict):
    """A raw authenticated peer connection claiming ``claim_id`` with a well-configured member's
    ``ident`` (same file sizes, issue 13.7; the challenge no longer tells it, issue 23.1)."""
    from dledger.rpc import framing as fr
    from dledger.rpc import handshake as hk

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    dec = fr.FrameDecoder()
    hs = hk.ConnectorHandshake("g", claim_id, hk.ROLE_PEER, secret)

    async def frame():
        for _ in range(100):
            got = dec.feed(await asyncio.wait_for(reader.read(65536), 5), 1)
            if got:
                return got[0]
        raise AssertionError("no handshake frame")

    challenge = await frame()
    hs.ident = ident
    writer.write(fr.encode_frame(hs.receive_challenge(challenge)))
    hs.receive_welcome(await frame())
    return writer, hs.session.sealer


async def test_out_of_range_or_spoofed_peer_messages_are_dropped_and_logged(group, caplog):
    from dledger.rpc import framing as fr

    g = group()
    await g.start_all()
    leader = await g.leader()
    lid = leader.config.self_id
    term = leader.term
    follower = next(n for n in g.ids if n != lid)
    third = next(n for n in g.ids if n not in (lid, follower))
    ident = {k: v for k, (v, _key) in leader.config.handshake_identity().items()}
    writer, sealer = await _peer_session(leader.peer_map[lid][1], follower, GROUP_SECRET, ident)
    huge = {"t": "vote", "src": follower, "dst": lid, "term": 2**64 - 1, "last_index": 2**63 - 1,
            "last_term": 2**63 - 1, "pre_vote": False, "transfer": True}
    spoofed = {"t": "vote", "src": third, "dst": lid, "term": term + 5, "last_index": 2**40,
               "last_term": term + 5, "pre_vote": False, "transfer": True}
    with caplog.at_level("WARNING", logger="dledger.server"):
        writer.write(sealer.frame(fr.encode_payload(huge)) + sealer.frame(fr.encode_payload(spoofed)))
        await writer.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while leader.counters["bad_peer_messages"] < 2 and loop.time() < deadline:
            await asyncio.sleep(0.01)
    writer.close()
    assert leader.counters["bad_peer_messages"] == 2
    text = caplog.text
    assert f"dropped a message from peer {follower}: field 'term'=18446744073709551615 is above" in text
    assert f"from peer {follower} claiming src='{third}'" in text
    assert leader.is_leader and leader.term == term and leader.fatal_error is None
    index, _ = await leader.append(b"still-serving")
    assert (await g.converged()) >= index


async def test_peers_only_member_refuses_clients(group):
    g = group(serve_clients=False)
    await g.start_all()
    leader = await g.leader()
    peers = {n: ("127.0.0.1", g.config(n).peer_map[n][1]) for n in g.ids}
    client = DLedgerClient(peers, "g", secret=GROUP_SECRET, timeout=2)
    try:
        with pytest.raises(DLedgerError, match="peers only"):
            await client.append(b"outsider")
    finally:
        await client.close()
    index, _ = await leader.append(b"in-process append still works")
    assert (await g.converged()) >= index


@pytest.mark.parametrize("cfg, message", [
    ({"auth_token": None}, "has no shared secret"),
    ({"auth_token": "short"}, "use at least 16"),
    ({"auth_token": None, "allow_insecure": True, "peers": "n0-127.0.0.1:1;n1-10.9.8.7:2"}, "not on loopback"),
])
async def test_start_refuses_an_unauthenticated_door(tmp_path, cfg, message):
    from dledger.config import InsecureConfigError

    port = free_ports(1)[0]
    base = dict(group="g", self_id="n0", peers=f"n0-127.0.0.1:{port}", store_base_dir=str(tmp_path),
                mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=32 * 1024)
    s = DLedgerServer(DLedgerConfig(**{**base, **cfg}))
    try:
        with pytest.raises(InsecureConfigError, match=message) as err:
            await s.start()
        assert "--auth-token / dLegerAuthToken" in str(err.value)
        assert not s.transport._server  # nothing listens
    finally:
        s.log_view.close()


async def test_commit_listeners_report_every_commit_on_every_member(group):
    """The commit listener is how a state machine (the broker's dispatch) learns of commits
    without polling: every member reports its own committed index as it moves, in order, and
    the last report is the index of the last entry."""
    g = group()
    await g.start_all()
    seen: dict[str, list[int]] = {nid: [] for nid in g.ids}
    for nid, s in g.servers.items():
        s.add_commit_listener(lambda index, nid=nid: seen[nid].append(index))
    leader = await g.leader()
    futs = [leader.append(b"x-%d" % i) for i in range(50)]
    await asyncio.gather(*futs)
    end = await g.converged()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while not all(v and v[-1] == end for v in seen.values()):
        assert loop.time() < deadline, {k: v[-3:] for k, v in seen.items()}
        await asyncio.sleep(0.01)
    for nid, v in seen.items():
        assert v == sorted(v) and len(set(v)) == len(v), (nid, v)  # moves forward, once per change
        assert all(i <= end for i in v)


async def test_append_batch_then_calls_the_sink_once_at_commit(group):
    """The sink form of append_batch: positions now, one call at commit with (index, pos) of
    every entry, never called for a refusal; a stop fails what is still pending."""
    g = group()
    await g.start_all()
    leader = await g.leader()
    calls: list[tuple] = []
    positions = leader.append_batch_then([b"a", b"bb", b"ccc"], lambda res, err: calls.append((res, err)))
    assert isinstance(positions, list) and len(positions) == 3 and not calls  # nothing before the commit
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5.0
    while not calls:
        assert loop.time() < deadline
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    assert len(calls) == 1
    results, err = calls[0]
    assert err is None and [p for _, p in results] == positions
    assert [i for i, _ in results] == list(range(results[0][0], results[0][0] + 3))
    assert [bytes(leader.log_view.store.get(i).body) for i, _ in results] == [b"a", b"bb", b"ccc"]
    follower = next(s for s in g.servers.values() if s is not leader)
    refused = follower.append_batch_then([b"x"], lambda res, err: calls.append((res, err)))
    assert isinstance(refused, DLedgerError) and refused.code == Code.NOT_LEADER and len(calls) == 1
    # entries still pending when the leader stops (its shutdown ignores acks from its first
    # step on, before anything is sent) fail: the sink hears it, once
    pending = leader.append_batch_then([b"late"], lambda res, err: calls.append((res, err)))
    assert isinstance(pending, list)
    await g.stop(leader.config.self_id)
    assert len(calls) == 2 and calls[1][0] is None and isinstance(calls[1][1], DLedgerError)
    assert calls[1][1].code == Code.INTERNAL_ERROR


async def test_a_stalled_loop_is_counted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 22.3: a loop that did not run for a while (a long GIL holder, a GC pause) is what
    starves heartbeats; the member counts and logs it, with how late the tick was."""
    import logging
    import time

    g = Group(tmp_path, n=1)
    await g.start_all()
    try:
        s = await g.leader()
        before = s.counters["loop_stalls"]
        with caplog.at_level(logging.WARNING, logger="dledger.server"):
            time.sleep(0.3)  # the loop (and every tick) stands still
            for _ in range(100):
                await asyncio.sleep(0.01)
                if s.counters["loop_stalls"] > before:
                    break
        assert s.counters["loop_stalls"] >= before + 1
        assert s.counters["loop_stall_max_ms"] >= 200
        assert any("late for a tick (role LEADER)" in r.getMessage() for r in caplog.records)
    finally:
        await g.stop_all()

"""Issue 12, item 1: the DLedger port, attacked with real processes on 127.0.0.1.

Before the fix the port accepted anyone who named a member: a forged ``vote`` with
``term = 2**64-1, transfer=True`` made every member persist that term and die with "Integer value
out of range" (and die again on restart); forged votes/appends from a spoofed id deposed the
leader; the broker-hosted member served the client ``append`` to outsiders. Now peers prove the
shared secret (``dLegerAuthToken``) in the handshake, every later frame carries a tag under
per-connection session keys, wire terms/indexes are range-checked as Java longs, a broker-hosted
member serves peers only, and a member without a secret refuses to start unless the group is
loopback-only and ``dLegerAllowInsecure`` / ``--allow-insecure`` says so.

Each test attacks a live group, then asserts the group still has a leader, still appends, and
serves every entry it acknowledged.
"""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.api.client import body_bytes
from tools.procs import free_ports, write_conf
from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk
from dledger.store.state_files import MemberStateFile
from tests.broker.test_dledger_group import CONF_DIR, DLedgerGroup
from tests.dledger.test_processes import REPO, SECRET, ProcGroup
from tests.security._dledger_support import (seeded_group, with_client, RawConn, append_acked, assert_nothing_lost, forged_append,
                                             forged_vote)

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(90)]
HUGE = 2**64 - 1
MAX_LONG = 2**63 - 1


@pytest.fixture(scope="module")
def dgroup(tmp_path_factory):
    """Three ``dledger server`` processes sharing SECRET, with a few acknowledged entries."""
    with seeded_group(tmp_path_factory.mktemp("dledger-doors")) as g:
        yield g


_with_client = with_client


def _log(g: ProcGroup, nid: str) -> str:
    return (g.root / f"{nid}.log").read_text(errors="replace")


def _wait_logs(g: ProcGroup, text: str, ids, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(text in _log(g, n) for n in ids):
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not logged by all of {list(ids)}:\n" + "\n".join(_log(g, n)[-1500:] for n in ids))


@pytest.mark.parametrize("secret", [None, "a-wrong-secret-of-24-chars"], ids=["no-secret", "wrong-secret"])
def test_unauthenticated_peer_is_refused_and_cannot_depose_the_leader(dgroup, secret):
    g = dgroup

    async def attack() -> None:
        leader = await g.leader()
        term0 = max(s["term"] for s in (await g.statuses()).values())
        for m in g.ids:
            claim = next(n for n in g.ids if n != m and n != leader) if m != leader else next(n for n in g.ids if n != m)
            # pipelined behind the hello, as an attacker would: huge-term and high-term transfer votes, an append
            forged = fr.encode_frames([forged_vote(claim, m, HUGE), forged_vote(claim, m, term0 + 100),
                                       forged_append(claim, m, term0 + 100)])
            conn = await RawConn.open(g.peers[m][1])
            reply = await conn.handshake("g", claim, secret, then=forged)
            assert reply["t"] == "reject" and reply["code"] == hk.AUTH_FAILED, reply
            assert "failed authentication" in reply["reason"]
            assert await conn.closed_by_remote()
            conn.close()
            conn = await RawConn.open(g.peers[m][1])  # the client role needs the secret as well
            reply = await conn.handshake("g", "outsider", secret, role=hk.ROLE_CLIENT,
                                         then=fr.encode_frame({"t": "req", "rid": 1, "op": "append",
                                                               "bodies": [b"\0" * 200]}))
            assert reply["t"] == "reject" and reply["code"] == hk.AUTH_FAILED, reply
            conn.close()
        await asyncio.sleep(1.0)  # > an election timeout: a deposed leader would show by now
        sts = await g.statuses()
        assert len(sts) == 3 and all(s["term"] < term0 + 50 for s in sts.values()), sts
        await _with_client(g, lambda c: assert_nothing_lost(c, g.acked, f"unauth-{secret}"))

    asyncio.run(attack())
    _wait_logs(g, "refused connection from 127.0.0.1:", g.ids)
    assert all(p.poll() is None for p in g.procs.values())


def test_replayed_or_injected_frames_drop_the_connection(dgroup):
    g = dgroup

    async def attack() -> None:
        leader = await g.leader()
        port = g.peers[leader][1]
        conn = await RawConn.open(port)
        assert (await conn.handshake("g", "app", SECRET, role=hk.ROLE_CLIENT))["t"] == "welcome"
        status_req = conn.session.sealer.frame(fr.encode_payload({"t": "req", "rid": 1, "op": "status"}))
        conn.write(status_req)
        resp = await conn.frame()
        assert resp["rid"] == 1 and resp["code"] == 200  # an honest sealed request is served
        conn.write(status_req)  # the same frame again: a replay
        assert await conn.closed_by_remote()
        recorded = bytes(conn.sent)
        conn.close()

        conn = await RawConn.open(port)  # an untagged frame injected after an honest handshake
        assert (await conn.handshake("g", "app", SECRET, role=hk.ROLE_CLIENT))["t"] == "welcome"
        conn.write(fr.encode_frame({"t": "req", "rid": 1, "op": "append", "bodies": [b"injected"]}))
        assert await conn.closed_by_remote()
        conn.close()

        conn = await RawConn.open(port)  # a whole recorded session replayed on a new connection
        assert (await conn.frame())["t"] == "challenge"
        conn.write(recorded)
        reply = await conn.frame()
        assert reply["t"] == "reject" and reply["code"] == hk.AUTH_FAILED, reply
        conn.close()

        await _with_client(g, lambda c: assert_nothing_lost(c, g.acked, "replay"))
        return leader

    leader = asyncio.run(attack())
    log = _log(g, leader)
    assert "dropping connection from app (127.0.0.1:" in log and "failed its tag check" in log


def test_forged_huge_term_vote_is_refused_and_the_group_restarts_cleanly(dgroup):
    """The issue's reproduction, sent by a sender holding the secret (a compromised or buggy
    member): every member refuses the term with one log line, keeps its term encodable, keeps a
    leader, and the whole group restarts cleanly."""
    g = dgroup

    async def attack() -> None:
        leader = await g.leader()
        for m in g.ids:
            claim = next(n for n in g.ids if n != m)
            conn = await RawConn.open(g.peers[m][1])
            assert (await conn.handshake("g", claim, SECRET))["t"] == "welcome"
            conn.write(conn.session.sealer.frame(fr.encode_payload(forged_vote(claim, m, HUGE))))
            await conn.writer.drain()
            conn.close()
        await _with_client(g, lambda c: append_acked(c, g.acked, "after-vote", 3))
        del leader

    asyncio.run(attack())
    _wait_logs(g, f"field 'term'={HUGE} is above {MAX_LONG}", g.ids)
    for n in g.ids:
        line = next(ln for ln in _log(g, n).splitlines() if f"'term'={HUGE}" in ln)
        assert "dropped a message from peer n" in line, line  # names the peer, the field and the value
        assert "fatal" not in _log(g, n)
    assert g.terminate_all() == {n: 0 for n in g.ids}  # clean shutdown of every member
    for n in g.ids:
        term, _ = MemberStateFile(g.root / f"dledger-{n}").load()
        assert 0 < term < 2**32, (n, term)
    for n in g.ids:
        g.start(n)
    asyncio.run(_with_client(g, lambda c: assert_nothing_lost(c, g.acked, "restart")))


def test_insecure_configs_refuse_to_start_with_a_clear_message(tmp_path):
    a, b = free_ports(2)

    def server(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dledger.cli", "server", "--group", "g", "--id", "n0",
                               "--store", str(tmp_path), *extra], cwd=REPO, capture_output=True, text=True,
                              timeout=30)

    cases = [
        (server("--peers", f"n0-127.0.0.1:{a};n1-127.0.0.1:{b}"), ["no shared secret", "--auth-token", "--allow-insecure"]),
        (server("--peers", f"n0-127.0.0.1:{a};n1-192.0.2.7:{b}", "--allow-insecure"),
         ["peer n1 at 192.0.2.7 is not on loopback", "--auth-token"]),
        (server("--peers", f"n0-127.0.0.1:{a}", "--auth-token", "short"), ["at least 16"]),
    ]
    for r, texts in cases:
        assert r.returncode == 1, (r.returncode, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("dledger: error:"), r.stderr
        assert all(t in lines[0] for t in texts), (texts, lines[0])
    # a broker-hosted member from the shipped template: no secret, a remote peer, dLegerAllowInsecure=true
    conf = write_conf(CONF_DIR / "broker-n0.conf", tmp_path / "insecure.conf",
                      {"listenPort": a, "storePathRootDir": tmp_path / "b", "storePathCommitLog": tmp_path / "b" / "cl",
                       "dLegerAuthToken": "", "dLegerAllowInsecure": "true",
                       "dLegerPeers": f"n0-127.0.0.1:{b};n1-192.0.2.7:{b};n2-192.0.2.8:{b}",
                       "dLegerPeersHttp": f"n0-127.0.0.1:{a};n1-192.0.2.7:{a};n2-192.0.2.8:{a}"})
    r = subprocess.run([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)], cwd=REPO,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "Traceback" not in r.stderr + r.stdout
    assert "192.0.2.7 is not on loopback" in r.stderr + r.stdout and "dLegerAuthToken" in r.stderr + r.stdout


def _raft_ports(conf: Path) -> dict[str, int]:
    line = next(ln for ln in conf.read_text().splitlines() if ln.startswith("dLegerPeers="))
    return {item.split("-", 1)[0]: int(item.rsplit(":", 1)[1]) for item in line.split("=", 1)[1].split(";")}


def test_broker_hosted_member_serves_peers_only(tmp_path):
    """Even with the right secret, a client-role connection to a broker's DLedger port is refused
    (before: 200 zero bytes appended through it stopped dispatch for good)."""
    g = DLedgerGroup(tmp_path)
    raft = _raft_ports(g.procs["n0"].conf)
    conf = dict(ln.split("=", 1) for ln in g.procs["n0"].conf.read_text().splitlines()
                if "=" in ln and not ln.startswith("#"))
    secret, group = conf["dLegerAuthToken"], conf["dLegerGroup"]
    acked = []
    try:
        g.start()
        master = g.wait_master()
        with g.procs[master].client() as c:
            for i in range(3):
                acked.append((c.send("TopicDoors", f"before-{i}", queue_id=0)["queueOffset"], f"before-{i}"))

        async def attack() -> None:
            for n in ("n0", "n1", "n2"):
                for sec in (secret, None):
                    conn = await RawConn.open(raft[n])
                    reply = await conn.handshake(group, "outsider", sec, role=hk.ROLE_CLIENT,
                                                 then=fr.encode_frame({"t": "req", "rid": 1, "op": "append",
                                                                       "bodies": [b"\0" * 200]}))
                    assert reply["t"] == "reject", reply
                    want = hk.CLIENTS_REFUSED if sec else hk.AUTH_FAILED
                    assert reply["code"] == want, reply
                    assert await conn.closed_by_remote()
                    conn.close()
                conn = await RawConn.open(raft[n])  # an unauthenticated peer claiming a member id
                claim = "n1" if n != "n1" else "n2"
                reply = await conn.handshake(group, claim, None,
                                             then=fr.encode_frame(forged_vote(claim, n, HUGE)))
                assert reply["t"] == "reject" and reply["code"] == hk.AUTH_FAILED, reply
                conn.close()

        asyncio.run(attack())
        assert g.wait_master() == master
        with g.procs[master].client() as c:
            for i in range(3):
                acked.append((c.send("TopicDoors", f"after-{i}", queue_id=0)["queueOffset"], f"after-{i}"))
            # an acknowledged send is committed; dispatch to the ConsumeQueue follows it (as in
            # Apache): wait for it, bounded, instead of racing it
            deadline = time.monotonic() + 10
            while True:
                got = {m["queueOffset"]: body_bytes(m).decode() for m in c.pull("TopicDoors", 0, 0, 64)["messages"]}
                if all(off in got for off, _ in acked) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        assert [got.get(off) for off, _ in acked] == [body for _, body in acked]
        assert len(got) == len(acked)  # nothing else was appended
        for n in ("n0", "n1", "n2"):
            assert "peers only" in g.procs[n].log_path.read_text(errors="replace")
        g.stop()  # every node shuts down cleanly (exit 0)
    finally:
        g.kill_all()

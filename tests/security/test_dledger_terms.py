"""Issue 23, item 2: terms no honest group reaches, with real processes on 127.0.0.1.

Before the fix a vote with term 2^63-1, sent with the secret, was persisted by every member and
no node could ever lead again (every write NOT_MASTER, ``/health`` 200). Now every member refuses
a term more than 2^32 ahead of its own, or at/above 2^62, with a rate-limited log line; a group
whose persisted term is exhausted reports it (``status.terms``, a broker's ``/health`` 503 "cannot
elect a leader ... term exhausted") and recovers with ``dledger reset-term`` run on every stopped
member, losing nothing it acknowledged.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from broker.api.client import body_bytes
from dledger.core.terms import MAX_TERM_JUMP
from dledger.rpc import framing as fr
from dledger.store.state_files import MemberStateFile
from tests.broker.test_dledger_group import IDS, DLedgerGroup
from tests.dledger.test_processes import REPO, SECRET, ProcGroup
from tests.security._dledger_support import RawConn, append_acked, assert_nothing_lost, forged_vote, with_client

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]
MAX_LONG = 2**63 - 1


_with_client = with_client


def _log(g: ProcGroup, nid: str) -> str:
    return (g.root / f"{nid}.log").read_text(errors="replace")


def _reset_term(g: ProcGroup, nid: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dledger.cli", "reset-term", "--store", str(g.root), "--id", nid,
                           "--peers", g.peers_s, *extra], cwd=REPO, capture_output=True, text=True, timeout=30)


def test_forged_far_ahead_terms_are_refused_and_logged(tmp_path):
    g = ProcGroup(tmp_path)
    acked: dict[int, bytes] = {}
    try:
        for n in g.ids:
            g.start(n)
        asyncio.run(_with_client(g, lambda c: append_acked(c, acked, "seed", 5)))

        async def attack() -> int:
            term0 = max(s["term"] for s in (await g.statuses()).values())
            for m in g.ids:
                claim = next(n for n in g.ids if n != m)
                conn = await RawConn.open(g.peers[m][1])
                assert (await conn.handshake("g", claim, SECRET))["t"] == "welcome"
                for term in [term0 + 2 * MAX_TERM_JUMP] + [MAX_LONG] * 50:  # a 2^33 jump, then a burst
                    conn.write(conn.session.sealer.frame(fr.encode_payload(forged_vote(claim, m, term))))
                await conn.writer.drain()
                conn.close()
            await _with_client(g, lambda c: append_acked(c, acked, "after-vote", 3))
            sts = await g.statuses()
            assert all(s["term"] < term0 + 50 and s["terms"]["refused"] >= 51 for s in sts.values()), sts
            await _with_client(g, lambda c: assert_nothing_lost(c, acked, "after"))
            return term0

        asyncio.run(attack())
        for n in g.ids:
            log = _log(g, n)
            assert "refused a VoteRequest from peer" in log and f"with term {MAX_LONG}" in log, log[-2000:]
            assert "at or above the limit 2^62" in log and "(more than 2^32)" in log
            assert log.count("refused a VoteRequest") <= 5  # 51 refusals, rate-limited lines
        assert g.terminate_all() == {n: 0 for n in g.ids}
        for n in g.ids:
            term, _ = MemberStateFile(g.root / f"dledger-{n}").load()
            assert 0 < term < 2**32, (n, term)
    finally:
        g.kill_all()


def test_exhausted_group_reports_it_and_recovers_with_reset_term(tmp_path):
    g = ProcGroup(tmp_path)
    acked: dict[int, bytes] = {}
    try:
        for n in g.ids:
            g.start(n)
        asyncio.run(_with_client(g, lambda c: append_acked(c, acked, "seed", 5)))
        assert g.terminate_all() == {n: 0 for n in g.ids}
        for n in g.ids:  # what the vote left behind on a build without the limit
            MemberStateFile(g.root / f"dledger-{n}").save(MAX_LONG, "n1")
        for n in g.ids:
            g.start(n)

        async def stuck() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                sts = await g.statuses()
                if len(sts) == 3:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # many election timeouts
            sts = await g.statuses()
            assert len(sts) == 3 and all(s["role"] != "LEADER" and s["term"] == MAX_LONG for s in sts.values()), sts
            for s in sts.values():
                assert s["terms"]["exhausted"] and "term exhausted" in s["terms"]["cannot_elect"], s["terms"]
                assert "dledger reset-term" in s["terms"]["cannot_elect"]

        asyncio.run(stuck())
        assert "term exhausted" in _log(g, "n0")

        refused = _reset_term(g, "n0", "--term", "100", "--yes")  # still running: refused
        assert refused.returncode == 1 and "stop every member first" in refused.stderr, refused
        assert g.terminate_all() == {n: 0 for n in g.ids}

        infos = {}
        for n in g.ids:
            r = _reset_term(g, n)
            assert r.returncode == 0, r.stderr
            infos[n] = json.loads(r.stdout)
            assert infos[n]["term"] == MAX_LONG and infos[n]["exhausted"] and infos[n]["last_log_term"] >= 1
        new_term = max(i["last_log_term"] for i in infos.values()) + 1
        low = _reset_term(g, "n0", "--term", str(infos["n0"]["last_log_term"]), "--yes")
        assert low.returncode == 1 and "not above this member's last log term" in low.stderr, low
        no_yes = _reset_term(g, "n0", "--term", str(new_term))
        assert no_yes.returncode == 1 and "--yes" in no_yes.stderr, no_yes
        for n in g.ids:
            r = _reset_term(g, n, "--term", str(new_term), "--yes")
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["previous_term"] == MAX_LONG
            assert MemberStateFile(g.root / f"dledger-{n}").load() == (new_term, None)
        for n in g.ids:
            g.start(n)

        async def recovered() -> None:
            await g.leader(30)
            await _with_client(g, lambda c: assert_nothing_lost(c, acked, "recovered"))
            sts = await g.statuses()
            assert all(new_term <= s["term"] < new_term + 50 and not s["terms"]["exhausted"] for s in sts.values())

        asyncio.run(recovered())
    finally:
        g.kill_all()


def _health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_broker_health_says_the_group_cannot_elect_until_reset_term(tmp_path):
    g = DLedgerGroup(tmp_path)
    try:
        g.start()
        master = g.wait_master()
        assert all(_health(g.http[n]) == (200, {"ok": True}) for n in IDS)
        with g.procs[master].client() as c:
            assert c.send("TopicTerms", "before", queue_id=0)["queueOffset"] == 0
        g.wait_in_sync()
        g.stop()
        for n in IDS:
            MemberStateFile(g.roots[n] / f"dledger-{n}").save(MAX_LONG, "n1")
        g.start()
        deadline = time.monotonic() + 20
        got = {}
        while time.monotonic() < deadline:
            got = {n: _health(g.http[n]) for n in IDS}
            if all(code == 503 for code, _ in got.values()):
                break
            time.sleep(0.1)
        for n, (code, body) in got.items():
            assert code == 503 and not body["ok"], (n, code, body)
            assert "cannot elect a leader" in body["error"] and "term exhausted" in body["error"], body
            assert "dledger reset-term" in body["error"], body
        assert all(p.alive() for p in g.procs.values())  # reported, not stopped: reads keep working
        g.stop()  # exits 0: the report is not a failure of the process

        conf = dict(ln.split("=", 1) for ln in g.procs["n0"].conf.read_text().splitlines()
                    if "=" in ln and not ln.startswith("#"))
        peers = conf["dLegerPeers"].strip()

        def reset_term(n: str, *extra: str) -> dict:
            r = subprocess.run([sys.executable, "-m", "dledger.cli", "reset-term", "--store", str(g.roots[n]),
                                "--id", n, "--peers", peers, *extra], cwd=REPO, capture_output=True, text=True,
                               timeout=30)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        new_term = max(reset_term(n)["last_log_term"] for n in IDS) + 1
        for n in IDS:
            assert reset_term(n, "--term", str(new_term), "--yes")["term"] == new_term
        g.start()
        master = g.wait_master()
        assert all(_health(g.http[n]) == (200, {"ok": True}) for n in IDS)
        with g.procs[master].client() as c:
            assert c.send("TopicTerms", "after-reset", queue_id=0)["queueOffset"] == 1
            deadline = time.monotonic() + 10
            while True:  # dispatch follows the commit: wait for it, bounded
                got = [body_bytes(m).decode() for m in c.pull("TopicTerms", 0, 0, 16)["messages"]]
                if len(got) >= 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert got == ["before", "after-reset"]
        g.stop()
    finally:
        g.kill_all()

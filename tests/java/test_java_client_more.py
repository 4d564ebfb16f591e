"""Apache RocketMQ 4.9.8's Java client against our brokers, both modes: what test_java_client does
not cover (issue 25). ``tests/java/ClientMore.java`` is compiled with ``javac`` against Apache's
jars and run with its ``bin/jrun``, as there.

Rules checked, for our classic SYNC_MASTER + SLAVE pair and our three-node DLedger group:
- Offsets across a consumer restart: a push consumer (CLUSTERING, CONSUME_FROM_FIRST_OFFSET)
  consumes 20 keyed messages and shuts down cleanly (``RemoteBrokerOffsetStore.persistAll`` sends
  its offsets to the broker); 20 more are sent; the same group in a new JVM gets the 20 new ones
  and none of the first 20 again (what Apache's broker gives: the committed offset is where the
  restarted consumer starts).
- ACL (``aclEnable=true``, plain_acl.yml; the slave / followers sign with ``innerAccessKey``): a
  producer and a consumer with ``AclClientRPCHook`` and a good account send and consume; the same
  access key with a wrong secret is refused (the broker's remark names the signature), and an
  account without PUB on the topic is refused (the remark names the permission).
DLedger only (classic mode has no automatic failover): a Java producer sends sync, keyed messages
one after another while the test kill -9s the leader; a new leader is elected and the producer
goes on. Then a consumer reads the topic: every acknowledged key is consumed (0 lost), and the new
leader's store (our HTTP API pulls) holds every acknowledged key exactly once and no key twice
(the broker dedups a producer's retries by UNIQ_KEY, issue 24). The longest time without a
successful send is printed.
Skipped only where Apache's tools or java/javac are absent (as test_java_client).
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from broker.api.client import BrokerClientError, SyncBrokerClient
from tools.procs import REPO, wait_until
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all
from tests.broker.test_dledger_group import DLedgerGroup
from tests.java.lines import ProcessLines
from tests.java.test_java_client import APACHE, FAST, HAVE_JAVA
from tools.nodes import NamesrvProc

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(170),
              pytest.mark.skipif(not HAVE_JAVA, reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ), java and javac")]

MODES = ["classic", "dledger"]
CONF: dict[str, Any] = dict(FAST)  # typed for ** into the helpers
INNER = ("java-inner", "inner-secret-0123456789")  # admin: the slave / followers sign with it
GOOD = ("java-good", "good-secret-0123456789")
NOPUB = ("java-nopub", "nopub-secret-0123456789")
ACL_TOPIC, ACL_GROUP = "TopicJavaAcl", "JavaAclGroup"
ACL_YAML = f"""
accounts:
  - accessKey: {INNER[0]}
    secretKey: {INNER[1]}
    admin: true
  - accessKey: {GOOD[0]}
    secretKey: {GOOD[1]}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {ACL_TOPIC}=PUB|SUB
    groupPerms:
      - {ACL_GROUP}=SUB
  - accessKey: {NOPUB[0]}
    secretKey: {NOPUB[1]}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - {ACL_TOPIC}=SUB
    groupPerms:
      - {ACL_GROUP}=SUB
"""


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("java-more-classes")
    cp = ":".join(str(j) for j in sorted((APACHE / "lib").glob("*.jar")))
    r = subprocess.run(["javac", "-d", str(out), "-cp", cp, str(REPO / "tests" / "java" / "ClientMore.java")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def java_env(classes: Path, home: Path) -> dict[str, str]:
    return dict(os.environ, EXTRA_CP=str(classes), JAVA_OPT=f"-Xms64m -Xmx192m -Duser.home={home}")


def run_more(classes: Path, home: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    r = subprocess.run([str(APACHE / "bin" / "jrun"), "ClientMore", *args], capture_output=True, text=True,
                       env=java_env(classes, home), timeout=timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith('{"result"')]
    assert r.returncode == 0 and lines, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    out: dict[str, Any] = json.loads(lines[-1])
    return out


@contextmanager
def cluster(tmp: Path, mode: str, **extra: Any) -> Iterator[tuple[NamesrvProc, BrokerProc]]:
    """A name server and a broker group of ``mode``; yields (name server, master / leader).
    Everything is killed on the way out."""
    ns = NamesrvProc(tmp).start()
    procs: list[BrokerProc] = []
    try:
        if mode == "classic":
            mconf, mport = master_conf(tmp, role="SYNC_MASTER", namesrvAddr=ns.address, **CONF, **extra)
            sconf, sport = slave_conf(tmp, mport, namesrvAddr=ns.address, **CONF, **extra)
            procs += [BrokerProc(mconf, mport, "m", tmp), BrokerProc(sconf, sport, "s", tmp)]
            for p in procs:
                p.start(timeout=60)
            yield ns, procs[0]
        else:
            g = DLedgerGroup(tmp, namesrvAddr=ns.address, **CONF, **extra)
            procs += g.procs.values()
            g.start()
            yield ns, g.procs[wait_master_quietly(g, 60)]
    finally:
        kill_all(procs)
        ns.kill9()


def wait_master_quietly(g: DLedgerGroup, timeout: float, skip: tuple[str, ...] = ()) -> str:
    """``g.wait_master`` where /status may need a signature (ACL): asked with the inner (admin) account."""
    def master() -> str | None:
        found = []
        for n, p in g.procs.items():
            if n in skip or not p.alive():
                continue
            try:
                with SyncBrokerClient(p.address, timeout=3.0, access_key=INNER[0], secret_key=INNER[1]) as c:
                    st = c.status()
            except BrokerClientError:
                continue
            if st.get("isMaster") and st.get("brokerId") == 0:
                found.append(n)
        return found[0] if len(found) == 1 else None
    return wait_until(master, timeout, "exactly one DLedger master", interval=0.1)


# ---------------------------------------------------------------------------- 1. offsets
@pytest.mark.parametrize("mode", MODES)
def test_offsets_survive_a_clean_consumer_restart(tmp_path: Path, classes: Path, mode: str) -> None:
    topic, group, home = "TopicJavaRestart", "JavaRestartGroup", tmp_path / "java"
    with cluster(tmp_path, mode) as (ns, master):
        first = run_more(classes, home, "round", ns.address, topic, group, "first", "20")
        with master.client() as c:
            committed = c.query_offsets(group, topic)["offsets"].get(f"{topic}@{group}", {})
        second = run_more(classes, home, "round", ns.address, topic, group, "second", "20")
    again = [k for k in second["others"] if k.startswith("first-")]
    print(json.dumps({"mode": mode, "first": first, "committedAfterFirst": committed, "second": second,
                      "firstDeliveredAgain": len(again)}))
    assert first["errors"] == [] and second["errors"] == [], (first, second)
    assert first["all"] and first["got"] == 20, first
    assert sum(committed.values()) == 20, f"offsets on the broker after the clean shutdown: {committed}"
    assert second["all"] and second["got"] == 20, second
    assert again == [], f"{len(again)} of the first 20 delivered again after a clean restart: {again}; {committed}"
    assert second["others"] == [], second


# ---------------------------------------------------------------------------- 2. ACL
@pytest.mark.parametrize("mode", MODES)
def test_acl_signed_clients(tmp_path: Path, classes: Path, mode: str) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    with cluster(tmp_path, mode, aclEnable="true", plainAclFile=acl, innerAccessKey=INNER[0],
                 innerSecretKey=INNER[1]) as (ns, _):
        seen = run_more(classes, tmp_path / "java", "acl", ns.address, ACL_TOPIC, ACL_GROUP, *GOOD,
                        "not-the-secret-0123", *NOPUB)
    print(json.dumps({"mode": mode, **seen}))
    assert seen["errors"] == [], seen
    assert seen["consumed"] == {f"acl-{i}": 1 for i in range(5)}, seen
    assert not seen["wrongSecret"].startswith("SENT"), seen
    assert f"Check signature failed for accessKey={GOOD[0]}" in seen["wrongSecret"], seen
    assert "CODE: 16" in seen["wrongSecret"], seen  # NO_PERMISSION, as Apache's broker answers
    assert not seen["noPub"].startswith("SENT"), seen
    assert "CODE: 16" in seen["noPub"] and "permission" in seen["noPub"].lower() and ACL_TOPIC in seen["noPub"], seen


# ---------------------------------------------------------------------------- 3. leader kill
def stored_keys(b: BrokerProc, topic: str) -> tuple[dict[str, list[tuple[int, int]]], dict[str, int]]:
    """Every message of ``topic`` on ``b`` (HTTP pulls): key -> [(queue, offset)], UNIQ_KEY -> count."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    by_uniq: dict[str, int] = {}
    with b.client() as c:
        for q in range(8):
            offset = 0
            while True:
                try:
                    r = c.pull(topic, q, offset, 256)
                except BrokerClientError:
                    break
                msgs = r.get("messages", [])
                if not msgs:
                    break
                for m in msgs:
                    by_key.setdefault(str(m.get("keys")), []).append((q, m["queueOffset"]))
                    by_uniq[str(m.get("uniqKey"))] = by_uniq.get(str(m.get("uniqKey")), 0) + 1
                offset = r.get("nextBeginOffset", msgs[-1]["queueOffset"] + 1)
    return by_key, by_uniq


def test_leader_kill_with_a_java_producer_sending(tmp_path: Path, classes: Path) -> None:
    topic, group = "TopicJavaFailover", "JavaFailoverGroup"
    ns = NamesrvProc(tmp_path).start()
    g = DLedgerGroup(tmp_path, namesrvAddr=ns.address, **CONF)
    p: subprocess.Popen[str] | None = None
    try:
        g.start()
        old = g.wait_master(60)
        p = subprocess.Popen([str(APACHE / "bin" / "jrun"), "ClientMore", "failover", ns.address, topic, group],
                             env=java_env(classes, tmp_path / "java"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        assert p.stdout is not None
        out = ProcessLines(p.stdout)

        def progress_at_least(n: int, timeout: float) -> int:
            ln = out.wait_for(lambda ln: ln.startswith('{"progress"') and json.loads(ln)["progress"] >= n, timeout)
            if ln is None:
                raise AssertionError(f"the Java producer did not reach {n} acknowledged sends in {timeout} s: "
                                     f"{out.seen[-20:]}")
            return int(json.loads(ln)["progress"])

        before = progress_at_least(100, 90)
        t_kill = time.monotonic()
        g.procs[old].kill9()
        new = g.wait_master(30, skip=(old,))
        elected_s = time.monotonic() - t_kill
        progress_at_least(before + 1, 45)  # sends succeed again
        resumed_s = time.monotonic() - t_kill
        after = progress_at_least(before + 150, 45)
        assert p.stdin is not None
        p.stdin.close()  # the producer stops; its consumer reads the topic
        ln = out.wait_for(lambda ln: ln.startswith('{"result"'), 100)
        assert ln is not None, f"no result from the Java failover client: {out.seen[-20:]}"
        result: dict[str, Any] = json.loads(ln)
        by_key, by_uniq = stored_keys(g.procs[new], topic)
    finally:
        if p is not None:
            if p.stdin is not None and not p.stdin.closed:
                p.stdin.close()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        kill_all(g.procs.values())
        ns.kill9()
    acked, acked_ids = result["acked"], result["ackedIds"]
    dup_keys = {k: v for k, v in by_key.items() if len(v) > 1}
    dup_uniq = {u: n for u, n in by_uniq.items() if n > 1}
    print(json.dumps({"old": old, "new": new, "electedS": round(elected_s, 2), "resumedS": round(resumed_s, 2),
                      "ackedBeforeKill": before, "ackedAtStop": after, "acked": len(acked), "failed": result["failed"],
                      "failures": result["failures"], "maxGapMs": result["maxGapMs"], "gapAfterAcked": result["gapAfterAcked"],
                      "consumed": result["consumed"], "consumedTwice": result["consumedTwice"],
                      "missing": result["missing"], "stored": sum(len(v) for v in by_key.values()),
                      "dupKeys": dup_keys, "dupUniq": dup_uniq}))
    assert result["missing"] == [] and result["all"], result["missing"]  # 0 lost
    not_stored = [k for k in acked if k not in by_key]
    assert not_stored == [], f"acknowledged but not in the new leader's store: {not_stored}"
    assert dup_keys == {}, f"stored more than once (key -> [(queue, offset)]): {dup_keys}"
    assert all(by_uniq.get(u) == 1 for u in acked_ids), {u: by_uniq.get(u) for u in acked_ids if by_uniq.get(u) != 1}
    assert dup_uniq == {}, dup_uniq

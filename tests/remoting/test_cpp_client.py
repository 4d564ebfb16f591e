"""The Apache C++ client (PyPI ``rocketmq`` 0.4.4, librocketmq) against both modes (issue 14.5).

An independent implementation of the remoting protocol, through mqnamesrv:
- sync sends with tags and keys, a push consumer subscribed with ``"TagA || TagB"`` gets exactly
  those, once each (redeliveries aside);
- its callback answers RECONSUME_LATER to each message's first delivery (0.4.4's "raise to retry"
  leaves the status undefined: see cpp_client.py): the client sends it back and it comes again
  with reconsumeTimes 1, after the retry delay (level 3 + reconsumeTimes; the brokers run
  with ``messageDelayLevel`` "1s 2s 1s ..." so that level is 1 s), not at once;
- a message sent with delay level 1 arrives 1 s after it was acknowledged (+-1 s).
Classic: one master. DLedger: three brokers, the client finds the leader through the routes.
The 0.4.4 wrapper has no transactional producer or query API: transactions and lookups are
tested with ali-ons and the remoting tests instead.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tools.procs import REPO
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.remoting.node_client import NodeProc, acked, delivered
from tools.nodes import NamesrvProc
from tests.remoting.procs import request
from tests.remoting.test_ali_ons import DLEDGER_IDS, _dledger_confs, route

pytestmark = pytest.mark.multiprocess

LEVELS = "1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"  # level 3 (first retry) = 1 s
CMD = [sys.executable, "-m", "tests.remoting.cpp_client"]


def cpp(args: list[str], log: Path) -> NodeProc:
    return NodeProc(args, log, cmd=CMD, cwd=REPO)


def scenario(ns: NamesrvProc, tmp: Path, nodes: list[NodeProc], tag_topic: str, delay_topic: str) -> None:
    consumer = cpp(["consume", ns.address, tag_topic, "GID_cpp_tags", "TagA || TagB", "fail_first"], tmp / "c1.log")
    nodes.append(consumer)
    delayed = cpp(["consume", ns.address, delay_topic, "GID_cpp_delay", "*"], tmp / "c2.log")
    nodes.append(delayed)
    consumer.wait_for(lambda ls: any("ready" in x for x in ls), 30, "tag consumer ready")
    delayed.wait_for(lambda ls: any("ready" in x for x in ls), 30, "delay consumer ready")
    time.sleep(3.0)  # rebalance: the consumers own their queues before the first send

    n = 30
    producer = cpp(["produce", ns.address, tag_topic, str(n)], tmp / "p1.log")
    nodes.append(producer)
    acks = acked(producer.wait_for(lambda ls: any("done" in x for x in ls), 120, "producer done"))
    assert len(acks) == n and all(a["status"] == 0 for a in acks), acks[:3]
    want = {f"body-{i}" for i in range(n) if i % 3 != 2}  # TagA, TagB; never TagC

    def retried(ls: list) -> bool:  # every message came back after the delivery that failed
        again = {m["body"] for m in delivered(ls) if not m["failed"] and m["reconsumeTimes"] >= 1}
        return want <= again

    lines = consumer.wait_for(retried, 90, "every TagA/TagB message delivered, failed once and redelivered")
    msgs = delivered(lines)
    assert {m["body"] for m in msgs} == want, "a TagC message was delivered or one is missing"
    assert all(m["tags"] in ("TagA", "TagB") for m in msgs)
    for body in want:
        seen = [m for m in msgs if m["body"] == body]
        failed = seen[0]
        assert failed["failed"], json.dumps(seen)
        again = next(m for m in seen if not m["failed"])
        # the retry waited its delay level (not immediate) and counts one more consumption
        assert again["t"] - failed["t"] >= 900 and again["reconsumeTimes"] > failed["reconsumeTimes"], json.dumps(seen)
    # a message the client sent back as part of a failed batch, before the callback saw it, comes
    # back with reconsumeTimes 1 at its first sight: the client's batch semantics, not a broker's

    p2 = cpp(["produce", ns.address, delay_topic, "3", "1"], tmp / "p2.log")
    nodes.append(p2)
    acks2 = acked(p2.wait_for(lambda ls: any("done" in x for x in ls), 60, "delayed producer done"))
    assert len(acks2) == 3
    got = delivered(delayed.wait_for(lambda ls: len(delivered(ls)) >= 3, 30, "delayed messages"))
    sent_at = {f"body-{a['ack']}": a["t"] for a in acks2}
    for m in got:
        late = m["t"] - sent_at[m["body"]]
        assert 0 <= late <= 2000 + 500 and m["t"] - m["bornTimestamp"] >= 900, (m["body"], late)
    for nd in (consumer, delayed):
        nd.send("close\n")
        nd.wait_for(lambda ls: any("closed" in x for x in ls), 30, "consumer closed")


def create_topics(port: int, *topics: str) -> None:
    for t in topics:
        r = request(port, RC.UPDATE_AND_CREATE_TOPIC, {"topic": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
        assert r.code == R.SUCCESS, r.remark


@pytest.mark.timeout(300)
def test_cpp_client_classic(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path)
    procs: list[BrokerProc] = []
    nodes: list[NodeProc] = []
    try:
        ns.start()
        conf, port = master_conf(tmp_path, role="ASYNC_MASTER", namesrvAddr=ns.address, messageDelayLevel=LEVELS)
        procs.append(BrokerProc(conf, port, "master", tmp_path).start())
        create_topics(port, "CppTags", "CppDelay")
        wait_until(lambda: route(ns, "CppDelay").get("brokerDatas"), 20, "topics routed")
        scenario(ns, tmp_path, nodes, "CppTags", "CppDelay")
    finally:
        for nd in nodes:
            nd.kill()
        kill_all(procs)
        ns.kill9()


@pytest.mark.timeout(300)
def test_cpp_client_dledger(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path)
    procs: dict[str, BrokerProc] = {}
    nodes: list[NodeProc] = []
    try:
        ns.start()
        confs = _dledger_confs(tmp_path, ns.address)
        for n, (conf, port) in confs.items():
            text = conf.read_text() + f"messageDelayLevel={LEVELS}\n"
            conf.write_text(text)
            procs[n] = BrokerProc(conf, port, n, tmp_path)
            procs[n].start(wait=False)
        for p in procs.values():
            p.wait_ready(60)

        def leader_port() -> int | None:
            for n in DLEDGER_IDS:
                try:
                    with procs[n].client(timeout=3) as c:
                        if c.status()["isMaster"]:
                            return confs[n][1]
                except Exception:  # noqa: BLE001 - not up yet
                    pass
            return None

        port = wait_until(leader_port, 30, "a DLedger master")
        create_topics(port, "CppTagsRaft", "CppDelayRaft")
        wait_until(lambda: (route(ns, "CppDelayRaft").get("brokerDatas") or [{}])[0].get("brokerAddrs", {}).get("0"),
                   30, "the master in the routes")
        scenario(ns, tmp_path, nodes, "CppTagsRaft", "CppDelayRaft")
        # the redelivered retries went through SCHEDULE_TOPIC_XXXX on the leader and were replicated
        with next(p for n, p in procs.items() if confs[n][1] == port).client() as c:
            st = c.status()
        assert st["schedule"]["running"] and any(lv["delivered"] for lv in st["schedule"]["levels"].values())
    finally:
        for nd in nodes:
            nd.kill()
        kill_all(procs.values())
        ns.kill9()

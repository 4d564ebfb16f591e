"""ali-ons (npm, a real third-party RocketMQ client) produces and consumes through mqnamesrv.

(a) classic SYNC_MASTER/SLAVE pair: messages with tags and keys, a cluster-mode consumer gets
every acknowledged message exactly once and its offsets are committed on the master.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tests.broker.api.broker_procs import BrokerProc, kill_all, master_conf, slave_conf, wait_until
from tests.remoting.node_client import NodeProc, acked, check_exactly_once, delivered, ensure_ali_ons
from tests.remoting.procs import NamesrvProc, request

pytestmark = pytest.mark.multiprocess
TOPIC, GROUP = "TopicE2E", "GID_e2e"


def route(ns: NamesrvProc, topic: str) -> dict:
    r = request(ns.port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return json.loads(r.body) if r.code == R.SUCCESS else {}


@pytest.mark.timeout(240)
def test_ali_ons_classic_pair(tmp_path: Path) -> None:
    ensure_ali_ons()
    ns = NamesrvProc(tmp_path)
    procs: list[BrokerProc] = []
    nodes: list[NodeProc] = []
    try:
        ns.start()
        mconf, mport = master_conf(tmp_path, role="SYNC_MASTER", namesrvAddr=ns.address, slaveSyncIntervalMs=500)
        sconf, sport = slave_conf(tmp_path, mport, namesrvAddr=ns.address, slaveSyncIntervalMs=500)
        master = BrokerProc(mconf, mport, "master", tmp_path).start()
        procs.append(master)
        slave = BrokerProc(sconf, sport, "slave", tmp_path).start()
        procs.append(slave)
        r = request(mport, RC.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
        assert r.code == R.SUCCESS, r.remark
        wait_until(lambda: {"0", "1"} <= set((route(ns, TOPIC).get("brokerDatas") or [{}])[0].get("brokerAddrs", {})),
                   20, "master and slave in the topic route")

        consumer = NodeProc(["consume", ns.address, TOPIC, GROUP], tmp_path / "consumer.log")
        nodes.append(consumer)
        consumer.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        n = 150
        producer = NodeProc(["produce", ns.address, TOPIC, str(n)], tmp_path / "producer.log")
        nodes.append(producer)
        lines = producer.wait_for(lambda ls: any("done" in x for x in ls), 120, "producer done")
        acks = acked(lines)
        assert len(acks) == n and len({a["msgId"] for a in acks}) == n
        assert {str(a["queueId"]) for a in acks} == {"0", "1", "2", "3"}  # the client spread sends over the 4 queues

        want = {a["msgId"] for a in acks}
        consumer.wait_for(lambda ls: want <= {m["msgId"] for m in delivered(ls)}, 60, "every acked message consumed")
        time.sleep(1.5)  # let a redelivery show up if there were one
        consumer.send("close\n")
        consumer.wait_for(lambda ls: any("closed" in x for x in ls), 30, "consumer closed")
        problem = check_exactly_once(acks, delivered(consumer.snapshot()), TOPIC)
        assert problem is None, problem

        # offsets committed on the master = the end of each queue
        for q in range(4):
            mx = request(mport, RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q})
            off = request(mport, RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q})
            assert off.code == R.SUCCESS and int(off.ext_fields["offset"]) == int(mx.ext_fields["offset"]), (q, off, mx)
        # the slave has every message too (SYNC_MASTER acknowledged only after the slave had them)
        for q in range(4):
            ms = request(sport, RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q})
            mm = request(mport, RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q})
            assert ms.ext_fields["offset"] == mm.ext_fields["offset"]
        # query by key through the protocol: the message with key-7 is found
        r = request(mport, RC.QUERY_MESSAGE, {"topic": TOPIC, "key": "key-7", "maxNum": 4, "beginTimestamp": 0,
                                              "endTimestamp": int(time.time() * 1000) + 1000})
        assert r.code == R.SUCCESS and b"body-7" in r.body
    finally:
        for nd in nodes:
            nd.kill()
        kill_all(procs)
        ns.kill9()

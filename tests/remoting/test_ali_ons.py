"""ali-ons (npm, a real third-party RocketMQ client) produces and consumes through mqnamesrv.

(a) classic SYNC_MASTER/SLAVE pair: messages with tags and keys, a cluster-mode consumer gets
every acknowledged message exactly once and its offsets are committed on the master.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tools.procs import REPO, free_port, write_conf
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.remoting.node_client import NodeProc, acked, check_exactly_once, delivered, ensure_ali_ons
from tools.nodes import NamesrvProc
from tests.remoting.procs import request

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


# ---------------------------------------------------------------------------------- (b) DLedger
DLEDGER_IDS = ("n0", "n1", "n2")


def _dledger_confs(tmp: Path, namesrv: str) -> dict[str, tuple[Path, int]]:
    http = {n: free_port() for n in DLEDGER_IDS}
    raft = {n: free_port() for n in DLEDGER_IDS}
    peers = ";".join(f"{n}-127.0.0.1:{raft[n]}" for n in DLEDGER_IDS)
    http_peers = ";".join(f"{n}-127.0.0.1:{http[n]}" for n in DLEDGER_IDS)
    out = {}
    for n in DLEDGER_IDS:
        root = tmp / f"dledger-{n}"
        overrides = {"listenPort": http[n], "haListenPort": free_port(), "dLegerPeers": peers,
                     "dLegerPeersHttp": http_peers, "storePathRootDir": root, "storePathCommitLog": root / "commitlog",
                     "mappedFileSizeCommitLog": 1 << 20, "slaveSyncIntervalMs": 500, "namesrvAddr": namesrv}
        conf = write_conf(REPO / "conf" / "dledger" / f"broker-{n}.conf", tmp / f"broker-{n}.conf", overrides)
        out[n] = (conf, http[n])
    return out


def _master_of(ns: NamesrvProc, topic: str) -> str | None:
    bds = route(ns, topic).get("brokerDatas") or [{}]
    return bds[0].get("brokerAddrs", {}).get("0")


@pytest.mark.timeout(300)
def test_ali_ons_dledger_group_leader_killed(tmp_path: Path) -> None:
    """Three DLedger nodes behind mqnamesrv; SIGKILL of the leader mid-stream: the client re-routes
    to the new leader (registered at once as brokerId 0), every acknowledged send is consumed
    exactly once (sends that failed and were retried may be stored twice, as in RocketMQ)."""
    ensure_ali_ons()
    ns = NamesrvProc(tmp_path)
    procs: dict[str, BrokerProc] = {}
    nodes: list[NodeProc] = []
    try:
        ns.start()
        for n, (conf, port) in _dledger_confs(tmp_path, ns.address).items():
            procs[n] = BrokerProc(conf, port, n, tmp_path).start(wait=False)
        for p in procs.values():
            p.wait_ready(60)
        by_port = {f"127.0.0.1:{p.api_port}": n for n, p in procs.items()}
        master_addr = wait_until(lambda: _master_of(ns, "RaftNode00") or _master_cluster(ns), 30, "a master registered")
        mport = int(master_addr.rpartition(":")[2])
        r = request(mport, RC.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6})
        assert r.code == R.SUCCESS, r.remark
        wait_until(lambda: len((route(ns, TOPIC).get("brokerDatas") or [{}])[0].get("brokerAddrs", {})) == 3, 20,
                   "all three nodes in the topic route")

        consumer = NodeProc(["consume", ns.address, TOPIC, GROUP], tmp_path / "consumer.log")
        nodes.append(consumer)
        consumer.wait_for(lambda ls: any("ready" in x for x in ls), 30, "consumer ready")
        n_msgs = 300
        producer = NodeProc(["produce", ns.address, TOPIC, str(n_msgs)], tmp_path / "producer.log")
        nodes.append(producer)
        producer.wait_for(lambda ls: len(acked(ls)) >= 100, 60, "100 acknowledged sends")
        old_leader = by_port[_master_of(ns, TOPIC)]
        procs[old_leader].kill9()
        killed_at = time.monotonic()
        new_master = wait_until(lambda: (a := _master_of(ns, TOPIC)) and by_port.get(a) != old_leader and a, 30,
                                "a new master in the route")
        failover_s = time.monotonic() - killed_at
        lines = producer.wait_for(lambda ls: any("done" in x for x in ls), 150, "producer done")
        acks = acked(lines)
        assert len(acks) == n_msgs
        assert any(a["ack"] > 100 and by_port.get(_addr_of(a["msgId"])) == by_port[new_master] for a in acks), \
            "no send was acknowledged by the new leader"
        want = {a["msgId"] for a in acks}
        consumer.wait_for(lambda ls: want <= {m["msgId"] for m in delivered(ls)}, 90, "every acked message consumed")
        time.sleep(2.0)
        consumer.send("close\n")
        consumer.wait_for(lambda ls: any("closed" in x for x in ls), 30, "consumer closed")
        problem = check_exactly_once(acks, delivered(consumer.snapshot()), TOPIC)
        assert problem is None, problem
        fails = [x for x in lines if "fail" in x]
        print(json.dumps({"failoverToNewMasterInRouteS": round(failover_s, 2), "failedAttempts": len(fails),
                          "acked": len(acks)}))
    finally:
        for nd in nodes:
            nd.kill()
        kill_all(procs.values())
        ns.kill9()


def _master_cluster(ns: NamesrvProc) -> str | None:
    r = request(ns.port, RC.GET_BROKER_CLUSTER_INFO)
    for bd in json.loads(r.body).get("brokerAddrTable", {}).values():
        if "0" in bd.get("brokerAddrs", {}):
            return bd["brokerAddrs"]["0"]
    return None


def _addr_of(msg_id: str) -> str:
    """host:port of an offset msgId (IPv4: 8 hex chars of address, 8 of port)."""
    ip = ".".join(str(int(msg_id[i:i + 2], 16)) for i in range(0, 8, 2))
    return f"{ip}:{int(msg_id[8:16], 16)}"

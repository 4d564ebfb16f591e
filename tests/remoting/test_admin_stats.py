"""What mqadmin reads (issue 14.4): codes 26, 28, 202, 203, 208 and 300 on a real classic broker.

The Java mqadmin cannot run here (no Maven Central), so the answers are checked against the
fields the 4.9.8 tools read (ClusterListSubCommand, TopicStatusSubCommand,
ConsumerProgressSubCommand, ConsumerConnectionSubCommand, GetBrokerConfigCommand): before,
26/202/203/208/300 answered REQUEST_CODE_NOT_SUPPORTED and 28 lacked putTps (clusterList's NPE).
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess

CLUSTER_LIST_KEYS = ("putTps", "getTransferedTps", "sendThreadPoolQueueSize", "pullThreadPoolQueueSize",
                     "sendThreadPoolQueueHeadWaitTimeMills", "pullThreadPoolQueueHeadWaitTimeMills",
                     "pageCacheLockTimeMills", "earliestMessageTimeStamp", "commitLogDiskRatio", "brokerVersionDesc",
                     "msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgPutTotalTodayNow",
                     "msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning", "msgGetTotalTodayNow")


def mq_entries(body: bytes) -> dict[tuple[str, int], dict]:
    """fastjson's map with MessageQueue keys: ``{<mq json>:<value json>,...}``."""
    out = {}
    for mq, value in re.findall(rb'(\{"brokerName":[^}]*\}):(\{[^}]*\})', body):
        m = json.loads(mq)
        out[(m["topic"], m["queueId"])] = json.loads(value)
    return out


def test_mqadmin_reads(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", haAuthToken="s3cret-token-0123456789")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        with b.client() as c:
            for i in range(5):
                c.send("StatsTopic", f"m{i}", queue_id=1)
            wait_until(lambda: c.topic_status("StatsTopic")["queues"][1]["maxOffset"] == 5, 10.0, "5 dispatched")
            assert len(c.pull("StatsTopic", 1, 0, 32)["messages"]) == 5
        time.sleep(1.3)  # one runtime-stats sample after the sends

        async def talk() -> dict:
            cl = await RemotingClient.connect("127.0.0.1", port)
            try:
                r = {}
                r["offline"] = await cl.request(203, {"consumerGroup": "G1"})
                hb = {"clientID": "10.0.0.9@42", "producerDataSet": [], "consumerDataSet": [{
                    "groupName": "G1", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                    "subscriptionDataSet": [{"topic": "StatsTopic", "subString": "*", "tagsSet": [], "codeSet": [],
                                             "subVersion": 1, "expressionType": "TAG", "classFilterMode": False}]}]}
                r["hb"] = await cl.request(34, {}, json.dumps(hb).encode())
                r["commit"] = await cl.request(15, {"consumerGroup": "G1", "topic": "StatsTopic", "queueId": 1,
                                                    "commitOffset": 3})
                for code, fields in ((26, {}), (28, {}), (202, {"topic": "StatsTopic"}), (202, {"topic": "Nope"}),
                                     (203, {"consumerGroup": "G1"}), (208, {"consumerGroup": "G1"}),
                                     (300, {"topic": "StatsTopic"})):
                    r[(code, fields.get("topic"))] = await cl.request(code, fields)
                return r
            finally:
                await cl.close()

        r = asyncio.run(talk())
        assert r["offline"].code == 206 and "not online" in r["offline"].remark
        assert r["hb"].code == 0 and r["commit"].code == 0

        cfg = r[(26, None)]
        assert cfg.code == 0 and "counter" in json.loads(cfg.ext_fields["version"])
        props = dict(line.split("=", 1) for line in cfg.body.decode().splitlines() if "=" in line)
        assert props["brokerName"] == "broker-a" and props["listenPort"] == str(port)
        assert props["haAuthToken"] == "******" and "s3cret-token-0123456789" not in cfg.body.decode()

        table = json.loads(r[(28, None)].body)["table"]
        missing = [k for k in CLUSTER_LIST_KEYS if k not in table]
        assert not missing, missing
        assert float(table["putTps"].split(" ")[0]) > 0 and len(table["putTps"].split(" ")) == 3
        assert int(table["msgPutTotalTodayNow"]) == 5 and int(table["msgGetTotalTodayNow"]) == 5
        assert 0 <= float(table["commitLogDiskRatio"]) <= 1 and int(table["earliestMessageTimeStamp"]) > 0

        stats = r[(202, "StatsTopic")]
        assert stats.code == 0
        entries = mq_entries(stats.body)
        assert entries[("StatsTopic", 1)]["maxOffset"] == 5 and entries[("StatsTopic", 1)]["minOffset"] == 0
        assert entries[("StatsTopic", 1)]["lastUpdateTimestamp"] > 0 and entries[("StatsTopic", 0)]["maxOffset"] == 0
        assert r[(202, "Nope")].code == 17  # TOPIC_NOT_EXIST

        conn = json.loads(r[(203, None)].body)
        assert [x["clientId"] for x in conn["connectionSet"]] == ["10.0.0.9@42"]
        assert conn["subscriptionTable"]["StatsTopic"]["subString"] == "*"
        assert conn["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET" and conn["messageModel"] == "CLUSTERING"

        cs = r[(208, None)]
        assert cs.code == 0 and b'"consumeTps"' in cs.body
        q1 = mq_entries(cs.body)[("StatsTopic", 1)]
        assert q1["brokerOffset"] == 5 and q1["consumerOffset"] == 3 and q1["lastTimestamp"] > 0

        assert json.loads(r[(300, "StatsTopic")].body)["groupList"] == ["G1"]  # GroupList.groupList (issue 25.2)
    finally:
        kill_all([b])


def test_stats_all_reads_topic_puts_and_group_gets(tmp_path: Path) -> None:
    """VIEW_BROKER_STATS_DATA (315), what ``statsAll`` reads: TOPIC_PUT_NUMS and GROUP_GET_NUMS."""
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        with b.client() as c:
            for i in range(7):
                c.send("StatsAll", f"m{i}", queue_id=0)
            wait_until(lambda: c.topic_status("StatsAll")["queues"][0]["maxOffset"] == 7, 10.0, "dispatched")

        async def talk() -> dict:
            cl = await RemotingClient.connect("127.0.0.1", port)
            try:
                pulled = await cl.request(11, {"consumerGroup": "GS", "topic": "StatsAll", "queueId": 0,
                                               "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0,
                                               "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0})
                await asyncio.sleep(1.2)  # one sample
                return {"pull": pulled,
                        "put": await cl.request(315, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "StatsAll"}),
                        "get": await cl.request(315, {"statsName": "GROUP_GET_NUMS", "statsKey": "StatsAll@GS"}),
                        "none": await cl.request(315, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "Nope"})}
            finally:
                await cl.close()

        r = asyncio.run(talk())
        assert r["pull"].code == 0, r["pull"].remark
        put, get = json.loads(r["put"].body), json.loads(r["get"].body)
        assert put["statsMinute"]["sum"] == 7 and put["statsDay"]["sum"] == 7 and put["statsMinute"]["tps"] > 0
        assert get["statsMinute"]["sum"] == 7 and get["statsDay"]["sum"] == 7
        assert r["none"].code == 1 and "not exist" in r["none"].remark
    finally:
        kill_all([b])

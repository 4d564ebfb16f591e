"""The HTTP API of one real broker process (ASYNC_MASTER, no slave): every route, client and CLI."""
from __future__ import annotations

import asyncio
import base64
import json
from typing import Iterator

import pytest

from broker.api.client import BrokerClient, BrokerClientError, body_bytes
from broker.cli import mqadmin
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    tmp = tmp_path_factory.mktemp("api")
    conf, port = master_conf(tmp, "ASYNC_MASTER", maxMessageSize=64 * 1024, autoCreateTopicEnable="true",
                             defaultTopicQueueNums=4)
    proc = BrokerProc(conf, port, "api-master", tmp)
    try:
        proc.start()
        yield proc
    finally:
        kill_all([proc])


@pytest.mark.timeout(60)
def test_produce_pull_and_lookups(broker: BrokerProc) -> None:
    with broker.client() as c:
        r = c.send("TopicApi", "hello", tags="TagA", keys="order-1 order-2", properties={"color": "red"}, queue_id=1)
        assert r["status"] == "SEND_OK" and r["queueId"] == 1 and r["queueOffset"] == 0
        assert len(r["msgId"]) == 32 and len(r["uniqKey"]) == 32
        raw = bytes(range(256))
        r2 = c.send("TopicApi", raw, queue_id=1)
        assert r2["queueOffset"] == 1 and r2["commitLogOffset"] == r["commitLogOffset"] + r["storeSize"]

        res = wait_until(lambda: (p := c.pull("TopicApi", 1, 0, 10)) and len(p["messages"]) == 2 and p, 10, "dispatch")
        assert res["status"] == "FOUND" and res["nextBeginOffset"] == 2 and res["maxOffset"] == 2
        m0, m1 = res["messages"]
        assert m0["bodyText"] == "hello" and m0["tags"] == "TagA" and m0["keys"] == "order-1 order-2"
        assert m0["properties"]["color"] == "red" and m0["properties"]["UNIQ_KEY"] == r["uniqKey"]
        assert body_bytes(m1) == raw and "bodyText" not in m1
        assert c.pull("TopicApi", 1, 2)["status"] in ("NO_NEW_MSG", "OFFSET_OVERFLOW_ONE")
        assert c.pull("TopicApi", 1, 9)["status"] == "OFFSET_OVERFLOW_BADLY"

        assert c.by_id(r["msgId"])["bodyText"] == "hello"
        assert c.by_id(r["uniqKey"], topic="TopicApi")["msgId"] == r["msgId"]
        assert body_bytes(c.by_offset(r2["commitLogOffset"])) == raw
        keyed = wait_until(lambda: c.by_key("TopicApi", "order-2")["messages"], 10, "index")
        assert keyed[0]["msgId"] == r["msgId"]
        with pytest.raises(BrokerClientError) as exc:
            c.by_offset(r2["commitLogOffset"] + 1)
        assert exc.value.code == "MESSAGE_NOT_FOUND"


@pytest.mark.timeout(60)
def test_batch_round_robin_topics_offsets(broker: BrokerProc) -> None:
    with broker.client() as c:
        b = c.send_batch("TopicBatch", [b"a", "b", {"body": "c", "tags": "T", "keys": ["kc"]}])
        assert b["count"] == 3 and b["queueOffsets"] == [0, 1, 2] and len(set(b["msgIds"])) == 3
        qids = {c.send("TopicRR", "x")["queueId"] for _ in range(8)}
        assert qids == {0, 1, 2, 3}  # defaultTopicQueueNums=4, round robin

        created = c.create_topic("TopicNew", read_queue_nums=2, write_queue_nums=2)
        assert created["topicConfig"]["writeQueueNums"] == 2
        names = {t["topicName"] for t in c.topics()["topics"]}
        assert {"TopicBatch", "TopicRR", "TopicNew"} <= names
        with pytest.raises(BrokerClientError) as exc:
            c.send("TopicNew", "x", queue_id=2)
        assert exc.value.code == "MESSAGE_ILLEGAL"
        st = c.topic_status("TopicBatch")
        assert any(q["maxOffset"] == 3 for q in st["queues"])

        c.commit_offset("GroupA", "TopicBatch", b["queueId"], 2)
        assert c.query_offsets("GroupA")["offsets"] == {"TopicBatch@GroupA": {str(b["queueId"]): 2}}
        cf = c.config_file("consumerOffset")
        assert "TopicBatch@GroupA" in cf["content"]
        topics = c.config_file("topics")
        assert topics["dataVersion"]["counter"] >= 1 and "TopicNew" in json.loads(topics["content"])["topicConfigTable"]


@pytest.mark.timeout(60)
def test_status_and_metrics(broker: BrokerProc) -> None:
    with broker.client() as c:
        c.send("TopicMetrics", "m")
        st = c.status()
        assert st["brokerRole"] == "ASYNC_MASTER" and st["brokerId"] == 0 and st["isMaster"] is True
        assert st["commitLog"]["maxOffset"] > 0 and "dispatchBehindBytes" in st
        assert st["ha"]["mode"] == "master" and st["ha"]["connections"] == 0
        assert st["storePathRootDir"].endswith("broker-a")
        text = c.metrics()
        assert 'rocketmq_broker_put_messages_total{topic="TopicMetrics",status="PUT_OK"} 1' in text
        assert "rocketmq_broker_put_latency_seconds_bucket" in text
        assert 'rocketmq_broker_role{role="ASYNC_MASTER",broker_id="0"} 1' in text
        assert "rocketmq_broker_commitlog_max_offset " in text


@pytest.mark.timeout(60)
def test_async_client_concurrent_sends(broker: BrokerProc) -> None:
    async def run() -> list[dict]:
        async with BrokerClient(broker.address) as c:
            return await asyncio.gather(*(c.send("TopicAsync", f"m{i}", queue_id=0) for i in range(50)))

    results = asyncio.run(run())
    assert sorted(r["queueOffset"] for r in results) == list(range(50))


@pytest.mark.timeout(60)
def test_mqadmin_commands(broker: BrokerProc, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["-b", broker.address]
    assert mqadmin.main(["sendMessage", *b, "-t", "TopicCli", "-p", "from-cli", "-c", "TagC", "-k", "cli-key", "-i", "0"]) == 0
    assert "SEND_OK" in capsys.readouterr().out
    assert mqadmin.main(["clusterList", *b]) == 0
    assert "ASYNC_MASTER" in capsys.readouterr().out
    assert mqadmin.main(["updateTopic", *b, "-t", "TopicCli2", "-w", "2", "-r", "2"]) == 0
    assert mqadmin.main(["topicList", *b]) == 0
    assert "TopicCli2" in capsys.readouterr().out
    wait_until(lambda: mqadmin.main(["queryMsgByOffset", *b, "-t", "TopicCli", "-i", "0", "-o", "0"]) == 0, 10, "dispatch")
    out = capsys.readouterr().out
    assert "from-cli" in out
    msg_id = [l.split()[-1] for l in out.splitlines() if l.startswith("OffsetID:")][0]
    assert mqadmin.main(["queryMsgById", *b, "-i", msg_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bodyText"] == "from-cli"
    assert mqadmin.main(["consumeMessage", *b, "-t", "TopicCli", "-i", "0", "-g", "CliGroup"]) == 0
    assert "consumed 1 message(s)" in capsys.readouterr().out
    assert mqadmin.main(["consumeMessage", *b, "-t", "TopicCli", "-i", "0", "-g", "CliGroup"]) == 0
    assert "consumed 0 message(s)" in capsys.readouterr().out  # committed offset moved on
    assert mqadmin.main(["queryMsgByKey", *b, "-t", "TopicCli", "-k", "cli-key"]) == 0
    assert msg_id in capsys.readouterr().out
    assert mqadmin.main(["sendMessage", *b, "-t", "bad topic!", "-p", "x"]) == 1
    assert "MESSAGE_ILLEGAL" in capsys.readouterr().err
    assert mqadmin.main(["clusterList", "-b", "127.0.0.1:1"]) == 3


def test_base64_body_roundtrip_via_raw_json(broker: BrokerProc) -> None:
    with broker.client() as c:
        payload = json.dumps({"topic": "TopicB64", "body": base64.b64encode(b"\x00\xff").decode(), "bodyEncoding": "base64",
                              "queueId": 0}).encode()
        status, text = c.request("POST", "/messages", payload, {"Content-Type": "application/json"})
        assert status == 200, text
        off = json.loads(text)["commitLogOffset"]
        assert body_bytes(c.by_offset(off)) == b"\x00\xff"

"""Topic and group administration (issue 25.1, 25.2) with Apache 4.9.8's own mqadmin and our client.

- ``mqadmin deleteTopic -n <our namesrv>``: the broker drops the topic config, its ConsumeQueues
  and its offsets; the name server drops its route (DELETE_TOPIC_IN_NAMESRV); ``topicRoute``
  then finds none. Before: "request type 215 not supported".
- ``mqadmin updateSubGroup`` / ``deleteSubGroup -r true``: subscriptionGroup.json has the group
  with the sent fields, persisted, then neither it nor its offsets.
- ``mqadmin resetOffsetByTime`` with no consumer online: the offsets move to the first message
  stored at or after the time (the broker commits them; mqadmin's fallback agrees). With a client
  online (our remoting client), INVOKE_BROKER_TO_RESET_OFFSET answers the ResetOffsetBody and the
  client receives RESET_CONSUMER_CLIENT_OFFSET with it.
- QUERY_TOPIC_CONSUME_BY_WHO answers ``groupList`` (GroupList's field): ``statsAll`` prints the
  group, not NO_CONSUMER.
- A slave refuses the writes with Apache's slave remark.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.remoting import mqadmin_jvm
from tests.remoting.mqadmin_jvm import mqadmin_jvms  # noqa: F401 - autouse: the JVMs stop after each test
from tools.nodes import NamesrvProc
from tools.procs import REPO

APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))
HAVE_MQADMIN = (APACHE / "bin" / "mqadmin").exists() and shutil.which("java") is not None
SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, please execute it from master broker."

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(240)]


def mqadmin(home: Path, *args: str) -> str:
    """``bin/mqadmin ARGS`` (stdout then stderr), run in the test's one warm JVM (tests/remoting/mqadmin_jvm.py)."""
    return mqadmin_jvm.run(home, *args, rocketmq_home=APACHE, timeout=90)


def call(port: int, code: int, fields: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    async def run() -> RemotingCommand:
        cl = await RemotingClient.connect("127.0.0.1", port)
        try:
            return await cl.request(code, fields, body, timeout=10.0)
        finally:
            await cl.close()
    return asyncio.run(run())


def dump(port: int, code: int) -> dict[str, Any]:
    r = call(port, code)
    assert r.code == 0, r.remark
    return json.loads(r.body)


def offsets(port: int, group: str, topic: str, queues: int) -> list[int]:
    return [int(call(port, 14, {"consumerGroup": group, "topic": topic, "queueId": q}).ext_fields.get("offset", -1))
            for q in range(queues)]


def commit(port: int, group: str, topic: str, queue: int, offset: int) -> None:
    assert call(port, 15, {"consumerGroup": group, "topic": topic, "queueId": queue, "commitOffset": offset}).code == 0


def heartbeat(group: str, topic: str) -> bytes:
    return json.dumps({"clientID": "127.0.0.1@reset", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                 "expressionType": "TAG", "classFilterMode": False}]}]}).encode()


@pytest.mark.skipif(not HAVE_MQADMIN, reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ) and java")
def test_mqadmin_delete_topic_sub_groups_reset_offset_stats_all(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", namesrvAddr=ns.address)
    b = BrokerProc(conf, port, "m", tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    addr = f"127.0.0.1:{port}"
    try:
        mqadmin_jvm.start(home, APACHE)  # boots while the broker starts
        b.start()
        # ---- a topic with messages, committed offsets and a route
        out = mqadmin(home, "updateTopic", "-b", addr, "-t", "DelMe", "-r", "2", "-w", "2")
        assert "success" in out, out
        stamps = []
        with b.client() as c:
            for i in range(6):
                r = c.send("DelMe", f"m{i}", queue_id=i % 2)
                stamps.append(c.by_offset(r["commitLogOffset"])["storeTimestamp"])
                time.sleep(0.02)
            wait_until(lambda: [q["maxOffset"] for q in c.topic_status("DelMe")["queues"]] == [3, 3], 10.0, "dispatched")
        for q in (0, 1):
            commit(port, "G1", "DelMe", q, 3)
        wait_until(lambda: "DelMe" in mqadmin(home, "topicList", "-n", ns.address), 30.0, "the route registered")

        # ---- statsAll reads the consumer group (QUERY_TOPIC_CONSUME_BY_WHO's groupList)
        assert json.loads(call(port, 300, {"topic": "DelMe"}).body) == {"groupList": ["G1"]}
        stats = mqadmin(home, "statsAll", "-n", ns.address, "-t", "DelMe")
        assert re.search(r"DelMe\s+G1\s", stats), stats
        assert "NO_CONSUMER" not in stats, stats
        track = mqadmin(home, "queryMsgByOffset", "-n", ns.address, "-t", "DelMe", "-b", "broker-a", "-i", "0", "-o", "0")
        assert "No Consumer" not in track and "G1" in track, track

        # ---- resetOffsetByTime with no consumer online: to the first message at or after stamps[3]
        out = mqadmin(home, "resetOffsetByTime", "-n", ns.address, "-g", "G1", "-t", "DelMe", "-s", str(stamps[3]))
        assert "not supported" not in out, out
        assert offsets(port, "G1", "DelMe", 2) == [2, 1], out  # m3 is queue 1 offset 1, m4 queue 0 offset 2
        table = dump(port, 43)["offsetTable"]  # GET_ALL_CONSUMER_OFFSET: committed on the broker
        assert table["DelMe@G1"] == {"0": 2, "1": 1}

        # ---- with a consumer online: the ResetOffsetBody, and the client is told
        async def online() -> tuple[RemotingCommand, list[RemotingCommand]]:
            pushed: list[RemotingCommand] = []
            cl = await RemotingClient.connect("127.0.0.1", port, on_request=pushed.append)
            try:
                assert (await cl.request(34, {}, heartbeat("G1", "DelMe"))).code == 0
                resp = await cl.request(222, {"topic": "DelMe", "group": "G1", "timestamp": 0, "isForce": "true"})
                for _ in range(100):
                    if any(c.code == 220 for c in pushed):
                        break
                    await asyncio.sleep(0.02)
                return resp, [c for c in pushed if c.code != 40]  # 40: NOTIFY_CONSUMER_IDS_CHANGED on join
            finally:
                await cl.close()

        resp, pushed = asyncio.run(online())
        assert resp.code == 0, resp.remark
        want = (b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"DelMe"}:0,'
                b'{"brokerName":"broker-a","queueId":1,"topic":"DelMe"}:0}}')
        assert resp.body == want
        assert len(pushed) == 1 and pushed[0].code == 220 and pushed[0].body == want
        assert pushed[0].ext_fields["group"] == "G1" and pushed[0].ext_fields["topic"] == "DelMe"
        assert offsets(port, "G1", "DelMe", 2) == [0, 0]
        nope = call(port, 222, {"topic": "DelMe", "group": "Nobody", "timestamp": 0, "isForce": "true"})
        assert nope.code == 1 and nope.remark == "THe consumer group <Nobody> not exist"

        # ---- deleteTopic: config, consume queues, offsets and route gone
        cq_dir = tmp_path / "broker-a" / "consumequeue" / "DelMe"
        assert cq_dir.is_dir()
        out = mqadmin(home, "deleteTopic", "-n", ns.address, "-c", "DefaultCluster", "-t", "DelMe")
        assert "delete topic [DelMe] from cluster [DefaultCluster] success" in out, out
        assert "delete topic [DelMe] from NameServer success" in out, out
        assert "DelMe" not in dump(port, 21)["topicConfigTable"]
        assert "DelMe@G1" not in dump(port, 43)["offsetTable"]
        assert not cq_dir.exists()
        assert "DelMe" not in json.loads((tmp_path / "broker-a" / "config" / "topics.json").read_text())["topicConfigTable"]
        route = mqadmin(home, "topicRoute", "-n", ns.address, "-t", "DelMe")
        assert "No topic route info" in route, route
        system = call(port, 215, {"topic": "SCHEDULE_TOPIC_XXXX"})
        assert system.code == 1 and system.remark == "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic."
        with b.client() as c:  # re-created, it starts again at 0
            c.send("DelMe", "again", queue_id=0)
            wait_until(lambda: c.topic_status("DelMe")["queues"][0]["maxOffset"] == 1, 10.0, "a fresh queue")

        # ---- updateSubGroup / deleteSubGroup -r true
        out = mqadmin(home, "updateSubGroup", "-b", addr, "-g", "SubG", "-r", "3", "-q", "2", "-s", "false")
        assert "success" in out, out
        groups_file = tmp_path / "broker-a" / "config" / "subscriptionGroup.json"
        sg = json.loads(groups_file.read_text())["subscriptionGroupTable"]["SubG"]
        assert (sg["retryMaxTimes"], sg["retryQueueNums"], sg["consumeEnable"], sg["groupName"]) == (3, 2, False, "SubG")
        commit(port, "SubG", "DelMe", 0, 1)
        out = mqadmin(home, "deleteSubGroup", "-b", addr, "-g", "SubG", "-r", "true")
        assert "success" in out, out
        assert "SubG" not in dump(port, 201)["subscriptionGroupTable"]
        assert "SubG" not in json.loads(groups_file.read_text())["subscriptionGroupTable"]
        assert "DelMe@SubG" not in dump(port, 43)["offsetTable"]
        assert b.stop() == 0
    finally:
        kill_all([b])
        ns.kill9()


def test_slave_refuses_admin_writes_and_syncs_groups(tmp_path: Path) -> None:
    mconf, mport = master_conf(tmp_path, role="ASYNC_MASTER")
    sconf, sport = slave_conf(tmp_path, mport)
    m, s = BrokerProc(mconf, mport, "m", tmp_path), BrokerProc(sconf, sport, "s", tmp_path)
    try:
        m.start()
        s.start()
        for code, fields, body in ((215, {"topic": "T1"}, b""), (207, {"groupName": "G"}, b""),
                                   (200, {}, b'{"groupName":"G"}')):
            r = call(sport, code, fields, body)
            assert (r.code, r.remark) == (1, SLAVE_REMARK), (code, r.code, r.remark)
        body = json.dumps({"groupName": "SyncG", "retryMaxTimes": 5, "consumeEnable": True}).encode()
        assert call(mport, 200, {}, body).code == 0
        wait_until(lambda: dump(sport, 201)["subscriptionGroupTable"].get("SyncG", {}).get("retryMaxTimes") == 5,
                   30.0, "the slave synced the group")
        bad = call(mport, 200, {}, b'{"groupName":"bad name!"}')
        assert bad.code == 1 and "SubscriptionGroupConfig" in bad.remark
    finally:
        kill_all([m, s])


def test_dledger_leader_admin_writes_followers_refuse_and_sync(tmp_path: Path) -> None:
    """Three DLedger members: the leader serves 215/200/207/222, a follower refuses them as a
    slave and copies the group and the topic deletion at its metadata sync."""
    from tests.broker.test_dledger_group import IDS, DLedgerGroup

    g = DLedgerGroup(tmp_path)
    try:
        g.start()
        leader = g.wait_master()
        lp = g.http[leader]
        follower = next(n for n in IDS if n != leader)
        fp = g.http[follower]
        assert call(lp, 17, {"topic": "DT", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}).code == 0
        with g.procs[leader].client() as c:
            stamps = [c.by_offset(c.send("DT", f"m{i}", queue_id=0)["commitLogOffset"])["storeTimestamp"]
                      for i in range(3)]
            wait_until(lambda: c.topic_status("DT")["queues"][0]["maxOffset"] == 3, 10.0, "dispatched")
        commit(lp, "DG", "DT", 0, 3)
        r = call(lp, 222, {"topic": "DT", "group": "DG", "timestamp": stamps[1], "isForce": "true"})
        assert r.code == 206 and r.remark.startswith("Consumer not online, so can not reset offset, Group: DG Topic: DT")
        assert offsets(lp, "DG", "DT", 1) == [1]  # committed by the broker all the same
        assert call(lp, 200, {}, json.dumps({"groupName": "DG", "retryMaxTimes": 7}).encode()).code == 0
        for code, fields, body in ((215, {"topic": "DT"}, b""), (207, {"groupName": "DG"}, b""),
                                   (200, {}, b'{"groupName":"X"}')):
            r = call(fp, code, fields, body)
            assert (r.code, r.remark) == (1, SLAVE_REMARK), (code, r.code, r.remark)
        wait_until(lambda: dump(fp, 201)["subscriptionGroupTable"].get("DG", {}).get("retryMaxTimes") == 7,
                   30.0, "the follower synced the group")
        assert call(lp, 215, {"topic": "DT"}).code == 0
        assert "DT" not in dump(lp, 21)["topicConfigTable"] and "DT@DG" not in dump(lp, 43)["offsetTable"]
        wait_until(lambda: "DT" not in dump(fp, 21)["topicConfigTable"], 30.0, "the follower synced the deletion")
        assert call(lp, 207, {"groupName": "DG", "removeOffset": "true"}).code == 0
        assert "DG" not in dump(lp, 201)["subscriptionGroupTable"]
    finally:
        g.kill_all()


@pytest.mark.skipif(not HAVE_MQADMIN, reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ) and java")
def test_mqadmin_reset_offset_with_a_java_consumer_online(tmp_path: Path) -> None:
    """Apache's benchmark consumer (Java 4.9.8 push consumer) online: mqadmin takes the broker's
    ResetOffsetBody (its "#offset" table, not the offline fallback's "#resetOffset") and the
    consumer, told by RESET_CONSUMER_CLIENT_OFFSET, consumes the reset messages again."""
    ns = NamesrvProc(tmp_path).start()
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", namesrvAddr=ns.address)
    b = BrokerProc(conf, port, "m", tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    consumer = None
    try:
        mqadmin_jvm.start(home, APACHE)  # boots while the broker starts
        b.start()
        assert call(port, 17, {"topic": "RT", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}).code == 0
        wait_until(lambda: "RT" in mqadmin(home, "topicList", "-n", ns.address), 30.0, "the route registered")
        env = dict(os.environ, JAVA_OPT=f"-Xms64m -Xmx256m -Duser.home={home}")
        log = open(tmp_path / "consumer.log", "wb")
        consumer = subprocess.Popen([str(APACHE / "bin" / "bench-consumer"), "-n", ns.address, "-t", "RT", "-g", "RG",
                                     "-w", "2"], stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_until(lambda: call(port, 203, {"consumerGroup": "RG"}).code == 0, 60.0, "the Java consumer online")
        stamps = []
        with b.client() as c:
            for i in range(6):
                stamps.append(c.by_offset(c.send("RT", f"m{i}", queue_id=i % 2)["commitLogOffset"])["storeTimestamp"])
                time.sleep(0.02)
        wait_until(lambda: offsets(port, "RG", "RT", 2) == [3, 3], 60.0, "the consumer consumed and committed")
        gets_before = dump(port, 43)["offsetTable"]["RT@RG"]
        out = mqadmin(home, "resetOffsetByTime", "-n", ns.address, "-g", "RG", "-t", "RT", "-s", str(stamps[3]))
        assert "#resetOffset" not in out and re.search(r"broker-a\s+0\s+2\s", out) and re.search(r"broker-a\s+1\s+1\s", out), out
        assert gets_before == {"0": 3, "1": 3}

        def pulled_again() -> bool:  # the client pulls from the reset offsets: the broker's get counts grow
            r = call(port, 315, {"statsName": "GROUP_GET_NUMS", "statsKey": "RT@RG"})
            return r.code == 0 and json.loads(r.body)["statsDay"]["sum"] >= 9
        wait_until(pulled_again, 60.0, "the 3 reset messages consumed again (6 + 3 gets)")
        wait_until(lambda: offsets(port, "RG", "RT", 2) == [3, 3], 60.0, "committed at the end again")
    finally:
        if consumer is not None:
            consumer.kill()
            consumer.wait(10)
        kill_all([b])
        ns.kill9()

"""Topics of 128-255 characters and the client's version (issue 25.5).

Their records are in RocketMQ 5's format, which a 4.x client cannot read, so a client that
announces a version below V5_0_0 (ordinal 413) in its request header is refused such a topic as
Apache 4.9.8 refuses it (``TopicValidator.validateTopic``: SYSTEM_ERROR "The specified topic is
longer than topic max length."), on send (SEND_MESSAGE_V2) and on UPDATE_AND_CREATE_TOPIC; a 5.x
client sends to and creates them. Before, every client was accepted.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all

pytestmark = pytest.mark.multiprocess

V4_9_8, V5_0_0 = 409, 413
REMARK = "The specified topic is longer than topic max length."


def test_long_topics_refused_to_4x_clients_kept_for_5x(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)
    long_topic, created = "L" * 200, "C" * 128

    async def talk() -> dict[str, RemotingCommand]:
        cl = await RemotingClient.connect("127.0.0.1", port)
        try:
            out = {}
            for version in (V4_9_8, V5_0_0):
                send = RemotingCommand.request(310, {"a": "PG", "b": long_topic, "c": "TBW102", "d": 4, "e": 0,
                                                     "f": 0, "g": 1, "h": 0, "i": "", "j": 0, "k": "false"}, b"x")
                send.version = version
                out[f"send{version}"] = await cl.invoke(send, 10.0)
                create = RemotingCommand.request(17, {"topic": created, "readQueueNums": 2, "writeQueueNums": 2,
                                                      "perm": 6, "topicFilterType": "SINGLE_TAG"})
                create.version = version
                out[f"create{version}"] = await cl.invoke(create, 10.0)
            short = RemotingCommand.request(310, {"a": "PG", "b": "S" * 127, "c": "TBW102", "d": 4, "e": 0, "f": 0,
                                                  "g": 1, "h": 0, "i": "", "j": 0, "k": "false"}, b"x")
            short.version = V4_9_8
            out["short"] = await cl.invoke(short, 10.0)
            return out
        finally:
            await cl.close()

    try:
        b.start()
        r = asyncio.run(talk())
        for key in (f"send{V4_9_8}", f"create{V4_9_8}"):
            assert (r[key].code, r[key].remark) == (1, REMARK), (key, r[key].code, r[key].remark)
        for key in (f"send{V5_0_0}", f"create{V5_0_0}", "short"):
            assert r[key].code == 0, (key, r[key].code, r[key].remark)
        with b.client() as c:
            assert c.topic_status(created)["topicConfig"]["readQueueNums"] == 2
            assert c.topic_status(long_topic)["queues"]
    finally:
        kill_all([b])

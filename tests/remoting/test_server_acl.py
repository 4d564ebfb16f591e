"""A real broker process on listenPort: bad input and plain ACL.

Wrong signatures, unknown codes, oversize frames and garbage get RocketMQ's codes or a closed
connection while another client keeps being served; HTTP still works on the same port; the
secret key never shows up in a remark or the broker's log; ali-ons signs its requests the same way.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path

import pytest

from broker.api.client import SyncBrokerClient
from broker.remoting.acl import sign_request, signer
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tests.remoting.node_client import NodeProc, acked, ensure_ali_ons
from tools.nodes import NamesrvProc

pytestmark = pytest.mark.multiprocess
SECRET = "s3cr3t-Value-42"
ACL = f"""
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: {SECRET}
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicAcl=PUB|SUB
      - TopicDeny=DENY
  - accessKey: rocketmq2
    secretKey: 12345678-admin
    admin: true
"""


def send_fields(topic: str, i: int = 0) -> dict:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
            "i": f"TAGS\x01t\x02KEYS\x01k{i}\x02", "j": 0, "k": False}


@pytest.fixture
def acl_broker(tmp_path: Path):
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", aclEnable="true", plainAclFile=acl)
    b = BrokerProc(conf, port, "acl-broker", tmp_path)
    try:
        b.start()
        yield b
    finally:
        kill_all([b])


@pytest.mark.timeout(90)
def test_acl_and_bad_input(acl_broker: BrokerProc) -> None:
    port = acl_broker.api_port

    async def run() -> None:
        admin = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("rocketmq2", "12345678-admin"))
        r = await admin.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "TopicAcl", "readQueueNums": 2,
                                                             "writeQueueNums": 2, "perm": 6})
        assert r.code == R.SUCCESS, r.remark
        good = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("RocketMQ", SECRET))
        plain = await RemotingClient.connect("127.0.0.1", port)
        wrong = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("RocketMQ", "not-the-secret"))
        stranger = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("Nobody", "whatever-123"))

        r = await good.request(RC.SEND_MESSAGE_V2, send_fields("TopicAcl"), b"hello")
        assert r.code == R.SUCCESS and r.ext_fields["queueOffset"] == "0", r.remark
        r = await plain.request(RC.SEND_MESSAGE_V2, send_fields("TopicAcl"), b"hello")
        assert (r.code, r.remark) == (R.NO_PERMISSION, "No accessKey is configured")
        r = await stranger.request(RC.SEND_MESSAGE_V2, send_fields("TopicAcl"), b"hello")
        assert (r.code, r.remark) == (R.NO_PERMISSION, "No acl config for Nobody")
        r = await wrong.request(RC.SEND_MESSAGE_V2, send_fields("TopicAcl"), b"hello")
        assert (r.code, r.remark) == (R.NO_PERMISSION, "Check signature failed for accessKey=RocketMQ")
        r = await good.request(RC.SEND_MESSAGE_V2, send_fields("TopicDeny"), b"hello")
        assert r.code == R.NO_PERMISSION and "TopicDeny" in r.remark
        r = await good.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "X1", "readQueueNums": 1, "writeQueueNums": 1,
                                                            "perm": 6})
        assert r.code == R.NO_PERMISSION and "admin" in r.remark
        # a body changed after signing: the signature covers the body
        tampered = RemotingCommand.request(RC.SEND_MESSAGE_V2, send_fields("TopicAcl"), b"hello")
        sign_request(tampered, "RocketMQ", SECRET)
        tampered.body = b"HELLO"
        r = await plain.invoke(tampered)
        assert r.code == R.NO_PERMISSION and "signature" in r.remark
        # unknown request code
        r = await good.request(9999, {"x": "y"})
        assert (r.code, r.remark) == (R.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported")
        # a header field that is not a number
        bad = send_fields("TopicAcl")
        bad["e"] = "zero"
        r = await good.request(RC.SEND_MESSAGE_V2, bad, b"x")
        assert r.code == R.SYSTEM_ERROR and "queueId" in r.remark

        # the one accepted send is dispatched asynchronously into its ConsumeQueue: wait for it
        for _ in range(100):
            r = await good.request(RC.GET_MAX_OFFSET, {"topic": "TopicAcl", "queueId": 0})
            if r.ext_fields.get("offset") == "1":
                break
            await asyncio.sleep(0.05)
        # garbage, oversize frames and undecodable headers close only their own connection
        for junk in (b"\xff\xfe\xfd\xfc" * 8, struct.pack(">i", 16 * 1024 * 1024 + 1) + b"\0" * 64,
                     struct.pack(">ii", 9, 5) + b"{{{{{"):
            victim = await RemotingClient.connect("127.0.0.1", port)
            victim.send_raw(junk)
            await asyncio.wait_for(victim.closed.wait(), 10)
            r = await good.request(RC.GET_MAX_OFFSET, {"topic": "TopicAcl", "queueId": 0})
            assert r.code == R.SUCCESS and r.ext_fields["offset"] == "1"
        # pipelining: many requests in flight on one connection, answers matched by opaque
        rs = await asyncio.gather(*(good.request(RC.SEND_MESSAGE_V2, send_fields("TopicAcl", i), b"p%d" % i)
                                    for i in range(50)))
        assert all(x.code == R.SUCCESS for x in rs) and len({x.ext_fields["msgId"] for x in rs}) == 50
        for cl in (admin, good, plain, wrong, stranger):
            await cl.close()

    asyncio.run(run())
    # HTTP on the same port still works, under the same accounts (issue 12: no open HTTP door)
    with SyncBrokerClient(acl_broker.address, timeout=5, access_key="RocketMQ", secret_key=SECRET) as c:
        assert c.status()["isMaster"]
    with SyncBrokerClient(acl_broker.address, timeout=5) as c:
        assert c.request("GET", "/status")[0] == 401
    with socket.create_connection(("127.0.0.1", port), 5) as s:  # text garbage goes to HTTP: 400 and closed
        s.sendall(b"HELLO THERE\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.")
    assert SECRET not in acl_broker.log()


@pytest.mark.timeout(120)
def test_ali_ons_signs_requests_as_the_broker_checks_them(acl_broker: BrokerProc, tmp_path: Path) -> None:
    ensure_ali_ons()
    ns = NamesrvProc(tmp_path)
    nodes = []
    try:
        ns.start()
        # a second broker process is not needed: register this one by hand through the admin account
        port = acl_broker.api_port

        async def setup() -> None:
            admin = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("rocketmq2", "12345678-admin"))
            r = await admin.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "TopicAcl", "readQueueNums": 2,
                                                                 "writeQueueNums": 2, "perm": 6})
            assert r.code == R.SUCCESS
            await admin.close()
            nsc = await RemotingClient.connect("127.0.0.1", ns.port)
            body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1},"topicConfigTable":'
                    b'{"TopicAcl":{"topicName":"TopicAcl","readQueueNums":2,"writeQueueNums":2,"perm":6}}}}')
            r = await nsc.request(RC.REGISTER_BROKER, {"brokerAddr": f"127.0.0.1:{port}", "brokerId": 0,
                                                       "brokerName": "broker-acl", "clusterName": "C",
                                                       "bodyCrc32": 0}, body)
            assert r.code == R.SUCCESS
            return nsc

        loop = asyncio.new_event_loop()
        nsc = loop.run_until_complete(setup())
        ok = NodeProc(["produce", ns.address, "TopicAcl", "5", "RocketMQ", SECRET], tmp_path / "p-ok.log")
        nodes.append(ok)
        lines = ok.wait_for(lambda ls: any("done" in x for x in ls), 60, "signed producer done")
        assert len(acked(lines)) == 5
        bad = NodeProc(["produce", ns.address, "TopicAcl", "1", "RocketMQ", "wrong-secret"], tmp_path / "p-bad.log")
        nodes.append(bad)
        lines = bad.wait_for(lambda ls: sum("fail" in x for x in ls) >= 2, 60, "refused sends")
        assert not acked(lines)  # ali-ons retries NO_PERMISSION and reports "Send [3] times, still failed"
        bad.kill()

        async def stored() -> int:
            admin = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("rocketmq2", "12345678-admin"))
            rs = [await admin.request(RC.GET_MAX_OFFSET, {"topic": "TopicAcl", "queueId": q}) for q in (0, 1)]
            await admin.close()
            return sum(int(r.ext_fields["offset"]) for r in rs)

        assert loop.run_until_complete(stored()) == 5  # nothing of the wrongly signed producer was stored
        assert "Check signature failed for accessKey=RocketMQ" in acl_broker.log()
        assert SECRET not in acl_broker.log()
        loop.run_until_complete(nsc.close())
        loop.close()
    finally:
        for nd in nodes:
            nd.kill()
        ns.kill9()

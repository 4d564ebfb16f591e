"""The broker's calls to its clients (issue 25): pending requests by opaque, and what uses them.

In process: :meth:`RemotingConnection.call` against a real socket (answered, not answered in
time, a forged response, a closed connection, the per-connection cap). On a real broker: the
admin requests that ask a consumer (GET_CONSUMER_RUNNING_INFO 307 for mqadmin consumerStatus,
CONSUME_MESSAGE_DIRECTLY 309 for queryMsgById -g -d, INVOKE_BROKER_TO_GET_CONSUMER_STATUS 223)
and NOTIFY_CONSUMER_IDS_CHANGED (40) when a consumer joins or leaves. Before, 307/309/223 were
answered "this broker cannot call a client" and no client was ever told of a group change.
Apache's mqadmin against a live Java consumer runs in ``tests/java``.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.server import MAX_CALLS_PER_CONNECTION, ClientCallError, RemotingServer
from broker.store.message import decode_message
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all

TOPIC, GROUP = "CallTopic", "CallGroup"


class FakeConsumer:
    """A consumer connection that answers the broker's requests as a Java client would (or not)."""

    def __init__(self, client_id: str, answer: bool = True) -> None:
        self.client_id, self.answer = client_id, answer
        self.cl: Optional[RemotingClient] = None
        self.seen: list[RemotingCommand] = []

    def on_request(self, cmd: RemotingCommand) -> None:
        self.seen.append(cmd)
        if not self.answer or cmd.is_oneway or self.cl is None or self.cl.transport is None:
            return
        if cmd.code == RC.GET_CONSUMER_STATUS_FROM_CLIENT:
            body = b'{"messageQueueTable":{{"brokerName":"b","queueId":0,"topic":"' + TOPIC.encode() + b'"}:7}}'
        else:
            body = json.dumps({"answeredBy": self.client_id, "code": cmd.code, "bodyLen": len(cmd.body or b"")}).encode()
        resp = cmd.response(R.SUCCESS, None, {"echo": cmd.ext_fields.get("brokerName", "")})
        resp.body = body
        self.cl.send_raw(_encode(resp))

    async def connect(self, port: int) -> "FakeConsumer":
        self.cl = await RemotingClient.connect("127.0.0.1", port, on_request=self.on_request)
        hb = {"clientID": self.client_id, "producerDataSet": [], "consumerDataSet": [{
            "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}
        r = await self.cl.invoke(RemotingCommand.request(RC.HEART_BEAT, {}, json.dumps(hb).encode()))
        assert r.code == R.SUCCESS, r.remark
        return self

    def notified(self) -> int:
        return sum(1 for c in self.seen if c.code == RC.NOTIFY_CONSUMER_IDS_CHANGED
                   and c.ext_fields.get("consumerGroup") == GROUP)


async def poll(cond: Any, timeout: float, what: str) -> None:
    """Wait on the event loop (a blocking wait would starve the sockets) until ``cond()``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _encode(cmd: RemotingCommand) -> bytes:
    from broker.remoting.codec import encode  # noqa: WPS433

    return encode(cmd)


# ---------------------------------------------------------------------- the call itself, in process
def test_a_call_is_answered_by_opaque_and_bounded() -> None:
    async def run() -> None:
        server = RemotingServer(name="t")
        await server.start("127.0.0.1", 0)
        answering = FakeConsumer("A")
        silent = FakeConsumer("S", answer=False)
        try:
            answering.cl = await RemotingClient.connect("127.0.0.1", server.port, on_request=answering.on_request)
            silent.cl = await RemotingClient.connect("127.0.0.1", server.port, on_request=silent.on_request)
            await poll(lambda: len(server.connections) == 2, 5, "two connections")
            by_port = {c.remote_addr.rsplit(":", 1)[1]: c for c in server.connections}
            conn_a = by_port[str(answering.cl.transport.get_extra_info("sockname")[1])]
            conn_s = by_port[str(silent.cl.transport.get_extra_info("sockname")[1])]

            r = await conn_a.call(RemotingCommand.request(RC.GET_CONSUMER_RUNNING_INFO, {"x": "1"}), 5.0)
            assert r.code == R.SUCCESS and json.loads(r.body)["answeredBy"] == "A"

            # a response nobody asked for is dropped; the call still gets its own answer
            forged = RemotingCommand.request(0).response(R.SUCCESS, "forged")
            forged.opaque = 999_999
            answering.cl.send_raw(_encode(forged))
            r = await conn_a.call(RemotingCommand.request(RC.GET_CONSUMER_RUNNING_INFO), 5.0)
            assert r.remark != "forged"

            with pytest.raises(ClientCallError, match="did not answer in 0.2 s"):
                await conn_s.call(RemotingCommand.request(RC.GET_CONSUMER_RUNNING_INFO), 0.2)
            assert conn_s._calls == {}  # noqa: SLF001 - nothing left waiting

            waiting = [asyncio.ensure_future(conn_s.call(RemotingCommand.request(RC.GET_CONSUMER_RUNNING_INFO), 30))
                       for _ in range(MAX_CALLS_PER_CONNECTION)]
            await asyncio.sleep(0.05)
            with pytest.raises(ClientCallError, match="calls already wait"):
                await conn_s.call(RemotingCommand.request(RC.GET_CONSUMER_RUNNING_INFO), 1.0)
            await silent.cl.close()  # the connection closes: every waiting call fails at once
            done = await asyncio.gather(*waiting, return_exceptions=True)
            assert all(isinstance(e, ClientCallError) and "closed" in str(e) for e in done), done[:2]
        finally:
            for f in (answering, silent):
                if f.cl is not None:
                    await f.cl.close()
            await server.stop()

    asyncio.run(run())


# ---------------------------------------------------------------------- on a real broker
@pytest.mark.multiprocess
def test_admin_requests_ask_the_consumer_and_group_changes_are_notified(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)

    async def talk() -> dict[str, Any]:
        a = await FakeConsumer("10.0.0.1@A").connect(port)
        out: dict[str, Any] = {}
        admin = await RemotingClient.connect("127.0.0.1", port)
        try:
            bc = await FakeConsumer("10.0.0.2@B").connect(port)
            await poll(lambda: a.notified() >= 1, 5, "notified on join")
            await bc.cl.close()  # type: ignore[union-attr]
            await poll(lambda: a.notified() >= 2, 5, "notified on leave")
            out["307"] = await admin.request(RC.GET_CONSUMER_RUNNING_INFO,
                                             {"consumerGroup": GROUP, "clientId": a.client_id, "jstackEnable": "false"})
            out["307 offline"] = await admin.request(RC.GET_CONSUMER_RUNNING_INFO,
                                                     {"consumerGroup": GROUP, "clientId": "nobody"})
            out["309"] = await admin.request(RC.CONSUME_MESSAGE_DIRECTLY, {
                "consumerGroup": GROUP, "clientId": a.client_id, "msgId": out_msg_id["id"]})
            out["309 record"] = next(c for c in a.seen if c.code == RC.CONSUME_MESSAGE_DIRECTLY)
            out["223"] = await admin.request(RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": GROUP})
            out["223 empty"] = await admin.request(RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                                                   {"topic": TOPIC, "group": "NoGroup"})
        finally:
            await admin.close()
            await a.cl.close()  # type: ignore[union-attr]
        return out

    out_msg_id: dict[str, str] = {}
    try:
        b.start()
        with b.client() as c:
            out_msg_id["id"] = c.send(TOPIC, "directly", queue_id=0)["msgId"]
        r = asyncio.run(talk())
    finally:
        kill_all([b])
    assert r["307"].code == R.SUCCESS and json.loads(r["307"].body) == {
        "answeredBy": "10.0.0.1@A", "code": RC.GET_CONSUMER_RUNNING_INFO, "bodyLen": 0}
    assert (r["307 offline"].code, r["307 offline"].remark) == (R.SYSTEM_ERROR, f"The Consumer <{GROUP}> <nobody> not online")
    assert r["309"].code == R.SUCCESS and r["309"].ext_fields.get("echo") == "broker-a"
    record = r["309 record"]
    assert record.ext_fields["brokerName"] == "broker-a" and decode_message(record.body).body == b"directly"
    assert r["223"].code == R.SUCCESS
    assert r["223"].body == (b'{"consumerTable":{"10.0.0.1@A":{{"brokerName":"b","queueId":0,"topic":"CallTopic"}:7}},'
                             b'"messageQueueTable":{}}')
    assert r["223 empty"].code == R.SYSTEM_ERROR and "No Any Consumer online" in r["223 empty"].remark

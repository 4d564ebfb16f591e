"""Broker2Client: the broker's requests to its clients, and the admin requests that need them.

Rules (apache/rocketmq 4.9.8 ``Broker2Client`` and ``AdminBrokerProcessor.callConsumer``):
- GET_CONSUMER_RUNNING_INFO (307, mqadmin ``consumerStatus``; header ``consumerGroup, clientId,
  jstackEnable``) and CONSUME_MESSAGE_DIRECTLY (309, mqadmin ``queryMsgById -g -d`` /
  ``consumeMessage``; header ``consumerGroup, clientId, msgId``): the request goes to that
  client's connection with the same header and body and its response is the answer, as the
  client wrote it. For 309 the broker adds ``brokerName`` to the header and sends the stored
  record (the message at the msgId's offset) as the body. A client not connected is
  ``SYSTEM_ERROR`` "The Consumer <group> <clientId> not online"; a client older than V3_1_8
  (version ordinal 77) is refused with Apache's remark; no answer within 10 s is
  ``CONSUME_MSG_TIMEOUT`` "consumer <group> <clientId> Timeout: ..."; a failed call is
  ``SYSTEM_ERROR`` "invoke consumer <group> <clientId> Exception: ...".
- INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223; header ``topic, group, clientAddr``): each client of
  the group (or only ``clientAddr``, a client id) is sent GET_CONSUMER_STATUS_FROM_CLIENT (221)
  ``{topic, group}`` with a 5 s timeout; the answer is GetConsumerStatusBody ``{"consumerTable":
  {clientId: <the client's messageQueueTable>}, "messageQueueTable": {}}``. No client online is
  ``SYSTEM_ERROR`` "No Any Consumer online in the consumer group: [group]". A client that fails
  or does not answer is left out, as Apache.
- NOTIFY_CONSUMER_IDS_CHANGED (40, oneway, header ``consumerGroup``) goes to every client of a
  group when a consumer joins or leaves it (``notifyConsumerIdsChangedEnable``, default true), so
  the clients rebalance at once instead of on their 20 s timer.
- Bounded: the calls on one connection are capped by the server (``MAX_CALLS_PER_CONNECTION``);
  a client's messageQueueTable is relayed only when it is a JSON object of at most
  :data:`MAX_STATUS_BYTES`.

Theory of operation: the connection of a client comes from the :class:`ConsumerManager`; the
call itself is :meth:`broker.remoting.server.RemotingConnection.call` (pending requests by
opaque). The client's bodies are relayed verbatim: they are fastjson maps with MessageQueue
keys that JSON cannot parse, so 223's table is assembled from their raw text.
"""
from __future__ import annotations

import json
import logging
from typing import Optional

from broker.remoting.acl import SUB, require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.client_manage import RETRY_PREFIX
from broker.remoting.processors.consumer_manager import ClientInfo
from broker.remoting.processors.common import HandlerRegistry, Processor, raw_message_at
from broker.remoting.server import ClientCallError, RemotingConnection
from broker.store.message import decode_message
from broker.store.message_id import decode_message_id

log = logging.getLogger("broker.remoting")

CALL_TIMEOUT_S = 10.0  # Broker2Client.callClient
STATUS_TIMEOUT_S = 5.0  # Broker2Client.getConsumeStatus
V3_0_7_SNAPSHOT, V3_1_8_SNAPSHOT = 28, 77  # MQVersion.Version ordinals
MAX_STATUS_BYTES = 4 * 1024 * 1024


def raw_json_field(body: bytes, name: str) -> Optional[bytes]:
    """The raw text of a top-level object field of a fastjson body (its keys may be objects)."""
    key = b'"' + name.encode() + b'":'
    start = body.find(key)
    if start < 0:
        return None
    i = start + len(key)
    if i >= len(body) or body[i:i + 1] != b"{":
        return None
    depth, in_str, esc = 0, False, False
    for j in range(i, len(body)):
        ch = body[j]
        if in_str:
            if esc:
                esc = False
            elif ch == 0x5C:  # backslash
                esc = True
            elif ch == 0x22:
                in_str = False
        elif ch == 0x22:
            in_str = True
        elif ch == 0x7B:
            depth += 1
        elif ch == 0x7D:
            depth -= 1
            if depth == 0:
                return body[i:j + 1]
    return None


class Broker2ClientProcessor(Processor):
    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.GET_CONSUMER_RUNNING_INFO, self.get_consumer_running_info)
        server.register(RC.CONSUME_MESSAGE_DIRECTLY, self.consume_message_directly)
        server.register(RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, self.get_consumer_status)

    # ------------------------------------------------------------------ callConsumer
    async def _call_consumer(self, cmd: RemotingCommand, group: str, client_id: str,
                             fields: dict[str, str], body: Optional[bytes]) -> RemotingCommand:
        info = self.ctx.consumers.groups.get(group, {}).get(client_id)
        if info is None:
            return cmd.response(R.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if info.version < V3_1_8_SNAPSHOT:
            return cmd.response(R.SYSTEM_ERROR, f"The Consumer <{client_id}> Version <{info.version}> too low to "
                                                "finish, please upgrade it to V3_1_8_SNAPSHOT")
        request = RemotingCommand.request(cmd.code, fields, body or b"")
        try:
            answer = await info.conn.call(request, CALL_TIMEOUT_S)
        except ClientCallError as exc:
            if "did not answer" in str(exc):
                return cmd.response(R.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}> Timeout: {exc}")
            return cmd.response(R.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
        out = cmd.response(answer.code, answer.remark, answer.ext_fields)
        out.body = answer.body
        return out

    async def get_consumer_running_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        group, client_id = cmd.ext_fields.get("consumerGroup", ""), cmd.ext_fields.get("clientId", "")
        return await self._call_consumer(cmd, group, client_id, dict(cmd.ext_fields), cmd.body)

    async def consume_message_directly(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        group, client_id = cmd.ext_fields.get("consumerGroup", ""), cmd.ext_fields.get("clientId", "")
        fields = dict(cmd.ext_fields, brokerName=self.c.broker_name)
        try:
            _host, offset = decode_message_id(cmd.ext_fields.get("msgId", ""))
        except ValueError as exc:
            return cmd.response(R.SYSTEM_ERROR, f"the msgId is not an offset message id: {exc}")
        raw = raw_message_at(self.c, offset)
        if raw is None:
            return cmd.response(R.SYSTEM_ERROR, f"no message at offset {offset} (msgId {fields.get('msgId')})")
        # the permission table: re-consuming needs SUB on the message's topic and the group
        require_found({decode_message(raw).topic: SUB, RETRY_PREFIX + group: SUB})
        return await self._call_consumer(cmd, group, client_id, fields, raw)

    # ------------------------------------------------------------------ getConsumeStatus
    async def get_consumer_status(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        topic, group = cmd.ext_fields.get("topic", ""), cmd.ext_fields.get("group", "")
        only = cmd.ext_fields.get("clientAddr") or ""
        clients: dict[str, ClientInfo] = dict(self.ctx.consumers.groups.get(group, {}))
        if not clients:
            return cmd.response(R.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]")
        tables: list[bytes] = []
        for client_id, info in clients.items():
            if info.version < V3_0_7_SNAPSHOT:
                return cmd.response(R.SYSTEM_ERROR, f"the client does not support this feature. version={info.version}")
            if only and only != client_id:
                continue
            try:
                answer = await info.conn.call(RemotingCommand.request(RC.GET_CONSUMER_STATUS_FROM_CLIENT,
                                                                      {"topic": topic, "group": group}), STATUS_TIMEOUT_S)
            except ClientCallError as exc:
                log.warning("[get-consumer-status] topic=%s group=%s client=%s: %s", topic, group, client_id, exc)
                continue
            raw = raw_json_field(answer.body or b"", "messageQueueTable") if answer.code == R.SUCCESS else None
            if raw is not None and len(raw) <= MAX_STATUS_BYTES:
                tables.append(_json_str(client_id) + b":" + raw)
        body = b'{"consumerTable":{' + b",".join(tables) + b'},"messageQueueTable":{}}'
        return cmd.response(R.SUCCESS, None, body=body)


def _json_str(s: str) -> bytes:
    return json.dumps(s).encode()


def notify_consumer_ids_changed(clients: list[ClientInfo], group: str) -> None:
    """NOTIFY_CONSUMER_IDS_CHANGED, oneway, to each client of ``group`` (Broker2Client)."""
    for info in clients:
        cmd = RemotingCommand.request(RC.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True)
        try:
            info.conn.send(cmd)
        except Exception as exc:  # noqa: BLE001 - one dead client must not stop the others
            log.warning("notifyConsumerIdsChanged to %s of %s failed: %s", info.client_id, group, exc)

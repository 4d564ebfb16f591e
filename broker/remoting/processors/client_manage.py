"""ClientManageProcessor + ConsumerManageProcessor: heartbeats, client registry, consumer offsets.

Rules (apache/rocketmq 4.9.x):
- HEART_BEAT body ``{clientID, producerDataSet:[{groupName}], consumerDataSet:[{groupName,
  consumeType, messageModel, consumeFromWhere, subscriptionDataSet:[{topic, subString, ...}],
  unitMode}]}``: each consumer group gets its subscription group config (auto-created) and its
  ``%RETRY%<group>`` topic (``retryQueueNums`` queues, created on the master), and the client
  is recorded under the group with the connection it came on. Answer SUCCESS; when the heartbeat
  created a retry topic, only after registering it with the name servers (bounded: 3 s), as
  Apache's ``registerBrokerAll`` inline, so a client's next route lookup finds it.
- A client leaves its groups on UNREGISTER_CLIENT (``clientID, producerGroup, consumerGroup``),
  when its connection closes, or after ``channel_expired_ms`` (120 s) without a heartbeat.
- GET_CONSUMER_LIST_BY_GROUP: body ``{"consumerIdList":[...]}`` (sorted); no live consumer is
  ``SYSTEM_ERROR`` "no consumer for this group, <group>".
- QUERY_CONSUMER_OFFSET (``consumerGroup, topic, queueId``): the committed offset; with none, 0
  when the queue still starts at 0 (a new group reads from the beginning), else
  ``QUERY_NOT_FOUND`` "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first".
- UPDATE_CONSUMER_OFFSET (``consumerGroup, topic, queueId, commitOffset``, usually oneway) stores
  the offset on any role, as RocketMQ does (a slave's copy is replaced by its sync).
- GET_PRODUCER_CONNECTION_LIST (204) ``producerGroup``: ProducerConnection ``{"connectionSet":
  [{clientId, clientAddr, language, version}]}`` of the group's live producers, none is
  ``SYSTEM_ERROR`` "the producer group[G] not exist" (mqadmin producerConnection).
  GET_ALL_PRODUCER_INFO (328): ProducerTableInfo ``{"data": {group: [{clientId, remoteIP
  ("/ip:port", Netty's address text), language, version, lastUpdateTimestamp}]}}`` (mqadmin producer);
  under ACL an admin account (every group's clients), checked here.

Theory of operation: the client tables are ``processors.consumer_manager.ConsumerManager``
(``group -> clientId -> ClientInfo``; re-exported here), reached through the context's
``consumers``; the server's close listener calls its ``on_close``.
"""
from __future__ import annotations

import json
import time
from typing import Any

from broker.remoting.acl import SUB, require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.refusals import Refusal
from broker.remoting.processors.consumer_manager import ClientInfo as ClientInfo
from broker.remoting.processors.consumer_manager import ConsumerManager as ConsumerManager
from broker.remoting.processors.common import (HandlerRegistry, HeaderError, Processor, field_int, field_str,
                                               refusal_response)
from broker.remoting.server import RemotingConnection

RETRY_PREFIX = "%RETRY%"
#: how long a heartbeat that created a retry topic waits for its registration with the name servers
REGISTER_ON_NEW_RETRY_TOPIC_S = 3.0
MAX_SUBSCRIPTIONS = 1024  # per consumer heartbeat: bounded memory


def _dicts(v: Any) -> list[dict[str, Any]]:
    """The JSON objects of a heartbeat's list field (anything else a client sent is skipped)."""
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


class ClientManageProcessor(Processor):
    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.HEART_BEAT, self.heart_beat)
        server.register(RC.UNREGISTER_CLIENT, self.unregister_client)
        server.register(RC.GET_CONSUMER_LIST_BY_GROUP, self.get_consumer_list)
        server.register(RC.QUERY_CONSUMER_OFFSET, self.query_consumer_offset)
        server.register(RC.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset)
        server.register(RC.GET_PRODUCER_CONNECTION_LIST, self.get_producer_connection_list)
        server.register(RC.GET_ALL_PRODUCER_INFO, self.get_all_producer_info)

    async def heart_beat(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            hb = json.loads(cmd.body or b"{}")
            client_id = str(hb.get("clientID") or conn.remote_addr)
        except (ValueError, AttributeError) as exc:
            return cmd.response(R.SYSTEM_ERROR, f"HeartbeatData body is not valid JSON: {exc}")
        now = int(time.time() * 1000)
        groups_mgr = self.c.metadata.managers["subscriptionGroup"]
        created = False
        for cd in _dicts(hb.get("consumerDataSet")):
            group = str(cd.get("groupName") or "")
            if not group:
                continue
            sgc = groups_mgr.find_subscription_group_config(group)
            if sgc is not None and self.c.is_master() and self.c.metadata.topic(RETRY_PREFIX + group) is None:
                n = max(1, sgc.retry_queue_nums)
                self.c.metadata.create_topic(RETRY_PREFIX + group, n, n, 6)
                created = True
            sub_set = [sd for sd in _dicts(cd.get("subscriptionDataSet"))[:MAX_SUBSCRIPTIONS] if sd.get("topic")]
            subs = {str(sd.get("topic")): str(sd.get("subString") or "*") for sd in sub_set}
            self.ctx.consumers.register(group, ClientInfo(
                client_id, conn, now, subs, str(cd.get("messageModel") or "CLUSTERING"),
                client_addr=conn.remote_addr, language=str(cmd.language), version=int(cmd.version or 0),
                consume_type=str(cd.get("consumeType") or "CONSUME_PASSIVELY"),
                consume_from_where=str(cd.get("consumeFromWhere") or "CONSUME_FROM_LAST_OFFSET"),
                subscription_data={str(sd["topic"]): sd for sd in sub_set}))
        for pd in _dicts(hb.get("producerDataSet")):
            group = str(pd.get("groupName") or "")
            if group:
                self.ctx.consumers.producers.setdefault(group, {})[client_id] = ClientInfo(
                    client_id, conn, now, client_addr=conn.remote_addr, language=str(cmd.language),
                    version=int(cmd.version or 0))
        conn.attrs["clientID"] = client_id
        if created:  # as Apache: the new retry topic is registered before the heartbeat is answered
            await self.ctx.register_now(REGISTER_ON_NEW_RETRY_TOPIC_S)
        return cmd.response(R.SUCCESS)

    async def unregister_client(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        client_id = cmd.ext_fields.get("clientID", "")
        for key in ("producerGroup", "consumerGroup"):
            group = cmd.ext_fields.get(key)
            if group:
                self.ctx.consumers.unregister(group, client_id)
        return cmd.response(R.SUCCESS)

    async def get_consumer_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        ids = self.ctx.consumers.consumer_ids(group)
        if not ids:
            return cmd.response(R.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.response(R.SUCCESS, None, body=json.dumps({"consumerIdList": ids}).encode())

    async def query_consumer_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            group = field_str(cmd, "consumerGroup", required=True) or ""
            topic = field_str(cmd, "topic", required=True) or ""
            queue_id = field_int(cmd, "queueId")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        offset = self.c.metadata.managers["consumerOffset"].query_offset(group, topic, queue_id)
        if offset >= 0:
            return cmd.response(R.SUCCESS, None, {"offset": offset})
        if self.store.min_offset_in_queue(topic, queue_id) <= 0:
            return cmd.response(R.SUCCESS, None, {"offset": 0})
        return cmd.response(R.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    async def update_consumer_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            group = field_str(cmd, "consumerGroup", required=True) or ""
            topic = field_str(cmd, "topic", required=True) or ""
            queue_id = field_int(cmd, "queueId")
            offset = field_int(cmd, "commitOffset")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        if offset >= 0:
            try:
                reset = self.ctx.broker_processor.is_offset_reset(group, topic, queue_id, offset)
            except Refusal as exc:  # no such queue, or past its end (broker.offset_commit)
                return refusal_response(cmd, exc)
            if reset:  # the permission table: a reset needs admin, as on the HTTP door
                require_found({RETRY_PREFIX + group: SUB, topic: SUB}, admin_for="resetting a consumer offset backwards")
            self.c.metadata.commit_offset(group, topic, queue_id, offset)
        return cmd.response(R.SUCCESS)

    async def get_producer_connection_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        group = cmd.ext_fields.get("producerGroup", "")
        clients = self.ctx.consumers.producers.get(group)
        if not clients:
            return cmd.response(R.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [{"clientAddr": i.client_addr, "clientId": i.client_id, "language": i.language,
                                   "version": i.version} for i in clients.values()]}
        return cmd.response(R.SUCCESS, None, body=json.dumps(body, separators=(",", ":")).encode())

    async def get_all_producer_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="every producer group's clients")
        data = {group: [{"clientId": i.client_id, "remoteIP": f"/{i.client_addr}", "language": i.language,
                         "version": i.version, "lastUpdateTimestamp": i.last_update_ms} for i in clients.values()]
                for group, clients in sorted(self.ctx.consumers.producers.items())}
        return cmd.response(R.SUCCESS, None, body=json.dumps({"data": data}, separators=(",", ":")).encode())

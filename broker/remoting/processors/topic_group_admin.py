"""Topic and group administration: what ``mqadmin deleteTopic / updateSubGroup / deleteSubGroup /
resetOffsetByTime`` and ``statsAll`` / ``queryMsgById`` ask a broker (issue 25).

Rules (apache/rocketmq 4.9.8 ``AdminBrokerProcessor``, ``Broker2Client.resetOffset``,
``TopicValidator``; field names from the request headers and body classes):
- Writes are for the master. A slave (or a DLedger follower) answers ``SYSTEM_ERROR`` "Can't
  modify topic or subscription group from slave broker, please execute it from master broker."
  (``validateSlave``). The metadata managers bump their dataVersion and persist, so slaves copy
  the change at their next metadata sync.
- DELETE_TOPIC_IN_BROKER (215) ``topic``: the name is validated as ``TopicValidator.validateTopic``
  (blank / illegal characters / over 127 characters for a client below 5.0, see
  :func:`refuse_long_topic`) and a system topic (TBW102, SCHEDULE_TOPIC_XXXX, BenchmarkTest,
  SELF_TEST_TOPIC, OFFSET_MOVED_EVENT, the transaction topics, ``rmq_sys_*``) is refused
  "The topic[T] is conflict with system topic.". The topic config is deleted, the topic's
  ConsumeQueues are destroyed and its queue offsets forgotten (``cleanUnusedTopic``; only this
  topic, where Java sweeps every topic without a config), and every group's committed offsets
  on it are dropped (as RocketMQ 5 does; 4.9.8 keeps them, so a re-created topic would start
  its consumers past its end). The registrar re-registers at once; the name server forgets the
  route on DELETE_TOPIC_IN_NAMESRV (216), which mqadmin sends next.
- UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): body = SubscriptionGroupConfig JSON (``groupName,
  consumeEnable, consumeFromMinEnable, consumeBroadcastEnable, retryQueueNums, retryMaxTimes,
  brokerId, whichBrokerWhenConsumeSlowly, notifyConsumerIdsChangedEnable``; other keys kept);
  no body is SUCCESS with no change, as Java. A bad name or body is ``SYSTEM_ERROR``.
- DELETE_SUBSCRIPTIONGROUP (207) ``groupName, removeOffset``: the config is deleted; with
  ``removeOffset=true`` every topic's offsets of the group too.
- INVOKE_BROKER_TO_RESET_OFFSET (222) ``topic, group, timestamp, isForce``: per write queue of
  the topic (unknown topic: ``SYSTEM_ERROR`` "[reset-offset] reset offset failed, no topic in
  this broker. topic=T"), the group's committed offset (none on a queue: ``SYSTEM_ERROR``
  "THe consumer group <G> not exist") and the first offset stored at or after ``timestamp``
  (-1: the queue's max); the new offset is that one when ``isForce`` or when it lies before the
  committed one, else the committed one. Unlike Java the broker also commits the new offsets
  itself (persisted at once), so a consumer started later begins there. Then, as Java: the
  group's online clients get RESET_CONSUMER_CLIENT_OFFSET (220, oneway, same header, body
  ResetOffsetBody ``{"offsetTable":{<MessageQueue>:offset}}``, or ResetOffsetBodyForC
  ``{"offsetTable":[{topic,brokerName,queueId,offset}]}`` when the request came from a CPP
  client), a client older than V3_0_7_SNAPSHOT (ordinal 28) is ``SYSTEM_ERROR`` "the client does
  not support this feature. version=...", and no client online is ``CONSUMER_NOT_ONLINE``
  "Consumer not online, so can not reset offset, Group: G Topic: T Timestamp: N" (mqadmin then
  falls back to committing through UPDATE_CONSUMER_OFFSET). Success answers the ResetOffsetBody.
- QUERY_TOPIC_CONSUME_BY_WHO (300) ``topic``: GroupList ``{"groupList":[...]}`` (the Java field;
  ``groupSet`` made statsAll print NO_CONSUMER): groups online subscribing the topic and groups
  with committed offsets on it. Registered after ``admin_stats``, whose handler it replaces.
- CLONE_GROUP_OFFSET (314) ``srcGroup, destGroup, topic, offline``: the source group's committed
  offsets of the topic (every topic it has offsets on when blank) are copied to the destination
  group; a topic without config here is skipped, and so, unless ``offline``, is a topic an online
  source group does not subscribe (Java's checks). SUCCESS.
- CLEAN_UNUSED_TOPIC (316): the ConsumeQueues of topics without a topic config are destroyed (not
  SCHEDULE_TOPIC_XXXX nor RMQ_SYS_TRANS_OP_HALF_TOPIC), as ``DefaultMessageStore.cleanUnusedTopic``.
- CLEAN_EXPIRED_CONSUMEQUEUE (306): ConsumeQueue files wholly below the commitlog's min offset are
  deleted. (Java destroys a whole queue whose last unit is below it, which restarts its queue
  offsets at 0; we keep the offsets.) DELETE_EXPIRED_COMMITLOG (329): the retention service's next
  rounds delete expired files whatever the hour (``executeDeleteFilesManually``).
- QUERY_CONSUME_QUEUE (321) ``topic, queueId, index, count, consumerGroup``: QueryConsumeQueueResponseBody
  ``{maxQueueIndex, minQueueIndex, queueData:[{physicOffset, physicSize, tagsCode, eval}],
  subscriptionData, filterData}``; no such queue is ``SYSTEM_ERROR`` "Q@T is not exist!", an index
  outside the queue SUCCESS with remark "Index I of Q@T is not exist!" and no rows (as Java).
- GET_SYSTEM_TOPIC_LIST_FROM_BROKER (305, ``exportMetrics``): TopicList ``{"topicList": [...]}`` of
  the system topics this broker has (:func:`is_system_topic`, the cluster's and the broker's own
  name topics, ``<cluster>_REPLY_TOPIC``), as Java's ``TopicConfigManager.getSystemTopic``.
- Under ACL, whatever ``broker.remoting.permissions`` says of the codes: cloning offsets and deleting
  queues or files need an admin account, QUERY_CONSUME_QUEUE SUB on the topic (checked here).

Theory of operation: handlers over the controller's metadata managers, store and the remoting
ConsumerManager; the MessageQueue map keys are written as fastjson writes them (objects as keys).
"""
from __future__ import annotations

import json
import logging
import re
import shutil
from typing import Any

from broker.metadata.subscription_group import SubscriptionGroupConfig
from broker.metadata.config_manager import bean_from_json
from broker.metadata.topic_config import TOPIC_MAX_LENGTH, TopicValidationError
from broker.remoting.acl import SUB, require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.common import HandlerRegistry, HeaderError, Processor, field_bool, field_int, field_str
from broker.remoting.server import RemotingConnection

log = logging.getLogger("broker.remoting.admin")

SLAVE_REMARK = "Can't modify topic or subscription group from slave broker, please execute it from master broker."
SYSTEM_TOPICS = frozenset({"TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC",
                           "RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                           "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
V3_0_7_SNAPSHOT = 28  # MQVersion.Version ordinals of 4.9.8
V5_0_0 = 413
JAVA_TOPIC_MAX_LENGTH = 127  # TopicValidator.TOPIC_MAX_LENGTH of 4.9.8
LONG_TOPIC_REMARK = "The specified topic is longer than topic max length."
_TOPIC_CHARS = re.compile(r"[%|a-zA-Z0-9_-]+")
_ILLEGAL_REMARK = "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"


def refuse_long_topic(cmd: RemotingCommand, topic: str) -> RemotingCommand | None:
    """4.9.8's answer to a topic over 127 characters from a client below 5.0 (its records of such
    topics are in RocketMQ 5's format, which 4.x clients cannot read); None when allowed."""
    if len(topic) > JAVA_TOPIC_MAX_LENGTH and int(cmd.version or 0) < V5_0_0:
        return cmd.response(R.SYSTEM_ERROR, LONG_TOPIC_REMARK)
    return None


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def mq_json(broker: str, topic: str, queue_id: int) -> str:
    """A MessageQueue as fastjson writes it (sorted keys, compact): also its form as a map key."""
    return json.dumps({"brokerName": broker, "queueId": queue_id, "topic": topic}, separators=(",", ":"))


def reset_offset_body(broker: str, topic: str, table: dict[int, int]) -> bytes:
    """ResetOffsetBody: ``{"offsetTable":{<MessageQueue>:offset,...}}``."""
    items = ",".join(f"{mq_json(broker, topic, q)}:{off}" for q, off in sorted(table.items()))
    return ('{"offsetTable":{' + items + "}}").encode()


def reset_offset_body_for_c(broker: str, topic: str, table: dict[int, int]) -> bytes:
    """ResetOffsetBodyForC: ``{"offsetTable":[{"brokerName","offset","queueId","topic"}]}``."""
    rows = [{"brokerName": broker, "offset": off, "queueId": q, "topic": topic} for q, off in sorted(table.items())]
    return json.dumps({"offsetTable": rows}, separators=(",", ":")).encode()


def drop_topic_queues(store: Any, topic: str) -> int:
    """``cleanUnusedTopic`` for one topic: destroy its ConsumeQueues, forget its queue offsets."""
    cqs = store.consume_queue_store
    with cqs._lock:  # noqa: SLF001 - the store has no per-topic removal of its own
        queues = cqs._table.pop(topic, {})  # noqa: SLF001
    for cq in queues.values():
        cq.destroy()
        store.commitlog.remove_queue_from_topic_queue_table(topic, cq.queue_id)
    shutil.rmtree(cqs.store_path / topic, ignore_errors=True)
    return len(queues)


class TopicGroupAdminProcessor(Processor):
    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        server.register(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_subscription_group)
        server.register(RC.DELETE_SUBSCRIPTIONGROUP, self.delete_subscription_group)
        server.register(RC.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)
        server.register(RC.QUERY_TOPIC_CONSUME_BY_WHO, self.query_topic_consume_by_who)
        server.register(RC.CLONE_GROUP_OFFSET, self.clone_group_offset)
        server.register(RC.CLEAN_UNUSED_TOPIC, self.clean_unused_topic)
        server.register(RC.CLEAN_EXPIRED_CONSUMEQUEUE, self.clean_expired_consume_queue)
        server.register(RC.DELETE_EXPIRED_COMMITLOG, self.delete_expired_commitlog)
        server.register(RC.QUERY_CONSUME_QUEUE, self.query_consume_queue)
        server.register(RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, self.system_topic_list)

    def _slave(self, cmd: RemotingCommand) -> RemotingCommand | None:
        return None if self.c.is_master() else cmd.response(R.SYSTEM_ERROR, SLAVE_REMARK)

    # ------------------------------------------------------------------ topics
    async def delete_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        refused = self._slave(cmd)
        if refused is not None:
            return refused
        topic = (cmd.ext_fields.get("topic") or "").strip()
        if not topic:
            return cmd.response(R.SYSTEM_ERROR, "The specified topic is blank.")
        if not _TOPIC_CHARS.fullmatch(topic):
            return cmd.response(R.SYSTEM_ERROR, _ILLEGAL_REMARK)
        refused = refuse_long_topic(cmd, topic) or (
            cmd.response(R.SYSTEM_ERROR, LONG_TOPIC_REMARK) if len(topic) > TOPIC_MAX_LENGTH else None)
        if refused is not None:
            return refused
        if is_system_topic(topic):
            return cmd.response(R.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        md = self.c.metadata
        md.managers["topics"].delete_topic_config(topic)
        queues = drop_topic_queues(self.store.store, topic)
        offsets = md.managers["consumerOffset"]
        if offsets.remove_topic(topic):
            offsets.persist()
        log.info("deleteTopic %s called by %s: %d consume queues destroyed", topic, conn.remote_addr, queues)
        self.ctx.registrar_wakeup()
        return cmd.response(R.SUCCESS)

    # ------------------------------------------------------------------ subscription groups
    async def update_subscription_group(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        refused = self._slave(cmd)
        if refused is not None:
            return refused
        if not cmd.body:
            return cmd.response(R.SUCCESS)
        try:
            obj = json.loads(cmd.body)
            config = bean_from_json(SubscriptionGroupConfig, obj, "SubscriptionGroupConfig")
            self.c.metadata.managers["subscriptionGroup"].update_subscription_group_config(config)
        except (ValueError, TopicValidationError) as exc:  # JSON, field types, group name
            return cmd.response(R.SYSTEM_ERROR, f"bad SubscriptionGroupConfig: {exc}")
        log.info("updateAndCreateSubscriptionGroup %s called by %s", config.group_name, conn.remote_addr)
        return cmd.response(R.SUCCESS)

    async def delete_subscription_group(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        refused = self._slave(cmd)
        if refused is not None:
            return refused
        try:
            group = field_str(cmd, "groupName", required=True) or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        md = self.c.metadata
        md.managers["subscriptionGroup"].delete_subscription_group_config(group)
        if field_bool(cmd, "removeOffset"):
            offsets = md.managers["consumerOffset"]
            offsets.remove_offset(group)
            offsets.persist()
        log.info("deleteSubscriptionGroup %s called by %s", group, conn.remote_addr)
        return cmd.response(R.SUCCESS)

    # ------------------------------------------------------------------ reset offsets
    def _reset_table(self, topic: str, group: str, timestamp: int, force: bool) -> tuple[dict[int, int], str | None]:
        """(queueId -> new offset, None) or ({}, Java's remark of the refusal)."""
        tc = self.c.metadata.topic(topic)
        if tc is None:
            return {}, f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
        sa = self.store
        offsets = self.c.metadata.managers["consumerOffset"]
        table: dict[int, int] = {}
        for q in range(tc.write_queue_nums):
            committed = offsets.query_offset(group, topic, q)
            if committed == -1:
                return {}, f"THe consumer group <{group}> not exist"
            if timestamp == -1:
                target = sa.max_offset_in_queue(topic, q)
            else:
                target = self.ctx.admin.offset_by_time(topic, q, timestamp)
            target = max(0, target)
            table[q] = target if force or target < committed else committed
        return table, None

    async def reset_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            group = field_str(cmd, "group", required=True) or ""
            timestamp = field_int(cmd, "timestamp")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        force = field_bool(cmd, "isForce")
        log.info("[reset-offset] reset offset started by %s. topic=%s, group=%s, timestamp=%d, isForce=%s",
                 conn.remote_addr, topic, group, timestamp, force)
        table, refusal = self._reset_table(topic, group, timestamp, force)
        if refusal is not None:
            return cmd.response(R.SYSTEM_ERROR, refusal)
        clients = list(self.ctx.consumers.groups.get(group, {}).values())
        old = [c for c in clients if c.version < V3_0_7_SNAPSHOT]
        if old:
            return cmd.response(R.SYSTEM_ERROR, f"the client does not support this feature. version={old[0].version}")
        if self.c.is_master():  # a slave's offsets are replaced by its sync: the master's commit counts
            md = self.c.metadata
            for q, off in table.items():
                md.commit_offset(group, topic, q, off)
            md.managers["consumerOffset"].persist()
        broker = self.c.broker_name
        if not clients:
            return cmd.response(R.CONSUMER_NOT_ONLINE, "Consumer not online, so can not reset offset, "
                                f"Group: {group} Topic: {topic} Timestamp: {timestamp}")
        body = reset_offset_body(broker, topic, table)
        wire = reset_offset_body_for_c(broker, topic, table) if str(cmd.language) == "CPP" else body
        header = {"topic": topic, "group": group, "timestamp": timestamp, "isForce": str(force).lower()}
        for info in clients:
            info.conn.send(RemotingCommand.request(RC.RESET_CONSUMER_CLIENT_OFFSET, header, wire, oneway=True))
            log.info("[reset-offset] reset offset success. topic=%s, group=%s, clientId=%s", topic, group, info.client_id)
        return cmd.response(R.SUCCESS, None, body=body)

    # ------------------------------------------------------------------ who consumes a topic
    async def query_topic_consume_by_who(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        groups = {g for g, clients in self.ctx.consumers.groups.items()
                  if any(topic in i.subscriptions for i in clients.values())}
        groups |= self.c.metadata.managers["consumerOffset"].which_group_by_topic(topic)
        return cmd.response(R.SUCCESS, None, body=json.dumps({"groupList": sorted(groups)}).encode())

    # ------------------------------------------------------------------ offsets, queues and files
    async def clone_group_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="cloning a group's offsets")
        try:
            src = field_str(cmd, "srcGroup", required=True) or ""
            dest = field_str(cmd, "destGroup", required=True) or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        topic = (cmd.ext_fields.get("topic") or "").strip()
        offline = field_bool(cmd, "offline")
        md = self.c.metadata
        offsets = md.managers["consumerOffset"]
        online = self.ctx.consumers.groups.get(src, {})
        cloned = 0
        for t in ([topic] if topic else sorted(offsets.which_topic_by_consumer(src))):
            if md.topic(t) is None:
                continue
            if not offline and online and not any(t in i.subscriptions for i in online.values()):
                continue
            for q, off in offsets.query_offsets(src, t).items():
                md.commit_offset(dest, t, q, off)
                cloned += 1
        if cloned:
            offsets.persist()
        log.info("cloneGroupOffset %s -> %s topic %s by %s: %d queues", src, dest, topic or "*", conn.remote_addr, cloned)
        return cmd.response(R.SUCCESS)

    async def clean_unused_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="deleting consume queues")
        store = self.store.store
        keep = {"SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_OP_HALF_TOPIC"}
        for topic in self.store.consume_queues.topics:
            if topic not in keep and self.c.metadata.topic(topic) is None:
                n = drop_topic_queues(store, topic)
                log.info("cleanUnusedTopic: %s, %d consume queues destroyed", topic, n)
        return cmd.response(R.SUCCESS)

    async def clean_expired_consume_queue(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="deleting consume queue files")
        min_phy = self.store.commitlog.min_offset
        deleted = self.store.consume_queues.delete_expired_files(min_phy) if min_phy > 0 else 0
        log.info("cleanExpiredConsumeQueue by %s: %d files below commitlog offset %d deleted", conn.remote_addr,
                 deleted, min_phy)
        return cmd.response(R.SUCCESS)

    async def delete_expired_commitlog(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="deleting commitlog files")
        cleaner = getattr(self.store.store, "cleaner", None)
        if cleaner is None:
            return cmd.response(R.SYSTEM_ERROR, "retention is not running on this store")
        cleaner.trigger_manual()
        return cmd.response(R.SUCCESS)

    async def query_consume_queue(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            queue_id = field_int(cmd, "queueId")
            index = field_int(cmd, "index")
            count = max(0, min(field_int(cmd, "count", 10), 1000))
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        require_found({topic: SUB})
        cq = self.store.consume_queues.find_consume_queue(topic, queue_id, create=False)
        if cq is None:
            return cmd.response(R.SYSTEM_ERROR, f"{queue_id}@{topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": cq.max_offset_in_queue, "minQueueIndex": cq.min_offset_in_queue}
        group = cmd.ext_fields.get("consumerGroup")
        if group:
            online = self.ctx.consumers.groups.get(group, {})
            sub = next((i.subscription_data[topic] for i in online.values() if topic in i.subscription_data), None)
            if sub is None:
                body["filterData"] = f"{group}@{topic} is not online!"
            else:
                body["subscriptionData"] = sub
                body["filterData"] = "null"
        units = cq.get_units(index, count)
        if not units:
            return cmd.response(R.SUCCESS, f"Index {index} of {queue_id}@{topic} is not exist!")
        body["queueData"] = [{"eval": False, "physicOffset": off, "physicSize": size, "tagsCode": tags}
                             for off, size, tags in units]
        return cmd.response(R.SUCCESS, None, body=json.dumps(body, separators=(",", ":")).encode())

    async def system_topic_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        c = self.c
        own = {c.cluster_name, c.broker_name, f"{c.cluster_name}_REPLY_TOPIC"}
        topics = sorted(t.topic_name for t in c.metadata.topics()
                        if is_system_topic(t.topic_name) or t.topic_name in own)
        return cmd.response(R.SUCCESS, None, body=json.dumps({"topicList": topics}, separators=(",", ":")).encode())

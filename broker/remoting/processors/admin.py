"""AdminBrokerProcessor + QueryMessageProcessor: offsets, lookups, topic admin, metadata dumps.

Rules (apache/rocketmq 4.9.x):
- GET_MAX_OFFSET / GET_MIN_OFFSET (``topic, queueId``) -> header ``offset``.
- SEARCH_OFFSET_BY_TIMESTAMP (``topic, queueId, timestamp``) -> the first queue offset whose
  store timestamp is >= timestamp (the max offset when none is), by binary search over the
  ConsumeQueue. (RocketMQ picks the nearer neighbour when there is no exact hit; for a
  consumer that wants "from this time on" the first later message is the useful answer.)
- VIEW_MESSAGE_BY_ID (``offset`` = commitlog offset) -> the stored record as body, else
  ``SYSTEM_ERROR`` "can not find message by the offset, N".
- QUERY_MESSAGE (``topic, key, maxNum, beginTimestamp, endTimestamp``) -> records indexed under
  the key (a KEYS token or the UNIQ_KEY) as body, header ``indexLastUpdateTimestamp``,
  ``indexLastUpdatePhyoffset``; none -> ``QUERY_NOT_FOUND`` "can not find message, maybe time
  range not correct".
- GET_ALL_TOPIC_CONFIG / GET_ALL_CONSUMER_OFFSET / GET_ALL_DELAY_OFFSET /
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG -> the JSON of topics.json / consumerOffset.json /
  delayOffset.json / subscriptionGroup.json (with their ``dataVersion``), what a classic slave
  syncs (``SlaveSynchronize``).
- UPDATE_AND_CREATE_TOPIC (``topic, readQueueNums, writeQueueNums, perm``) -> create/update on
  the master (a slave answers SERVICE_NOT_AVAILABLE); a topic named like the cluster is
  ``SYSTEM_ERROR``, and so is a name over 127 characters from a client below 5.0 (4.9.8's "The
  specified topic is longer than topic max length."; ``topic_group_admin.refuse_long_topic``). The name server learns it at the next registration, which the registrar
  sends at once when the topic table's dataVersion changes.
- GET_BROKER_RUNTIME_INFO -> ``{"table": {...}}`` with a few of RocketMQ's keys.
"""
from __future__ import annotations

import json
import time
from typing import Any

from broker.api.errors import BrokerApiError
from broker.metadata.topic_config import TopicValidationError, validate_topic
from broker.remoting.acl import SUB, require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.common import (HeaderError, Processor, api_error_response, field_int, field_str,
                                               raw_message_at)
from broker.remoting.processors.topic_group_admin import refuse_long_topic
from broker.remoting.server import RemotingConnection
from broker.store.message import decode_message, record_store_timestamp

_DUMPS = {RC.GET_ALL_TOPIC_CONFIG: "topics", RC.GET_ALL_CONSUMER_OFFSET: "consumerOffset",
          RC.GET_ALL_DELAY_OFFSET: "delayOffset", RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "subscriptionGroup"}


def _record_topic(raw: bytes) -> str:
    return decode_message(raw, 0, read_body=False).topic


class AdminBrokerProcessor(Processor):
    def register(self, server: Any) -> None:
        server.register(RC.GET_MAX_OFFSET, self.get_max_offset)
        server.register(RC.GET_MIN_OFFSET, self.get_min_offset)
        server.register(RC.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset_by_timestamp)
        server.register(RC.VIEW_MESSAGE_BY_ID, self.view_message_by_id)
        server.register(RC.QUERY_MESSAGE, self.query_message)
        for code in _DUMPS:
            server.register(code, self.get_all)
        server.register(RC.UPDATE_AND_CREATE_TOPIC, self.update_and_create_topic)

    def _tq(self, cmd: RemotingCommand) -> tuple[str, int]:
        return field_str(cmd, "topic", required=True) or "", field_int(cmd, "queueId")

    async def get_max_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return self._queue_offset(cmd, "max_offset_in_queue")

    async def get_min_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return self._queue_offset(cmd, "min_offset_in_queue")

    def _queue_offset(self, cmd: RemotingCommand, which: str) -> RemotingCommand:
        """GET_MAX_OFFSET / GET_MIN_OFFSET: ``which`` is the StoreAccess method answering it."""
        try:
            topic, q = self._tq(cmd)
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        return cmd.response(R.SUCCESS, None, {"offset": getattr(self.c.store_access, which)(topic, q)})

    def offset_by_time(self, topic: str, q: int, timestamp: int) -> int:
        sa = self.c.store_access
        store = sa.store
        lo, hi = sa.min_offset_in_queue(topic, q), sa.max_offset_in_queue(topic, q)
        left, right = lo, hi  # answer in [lo, hi]
        while left < right:
            mid = (left + right) // 2
            r = store.get_message(topic, q, mid, 1)
            ts = record_store_timestamp(r.buffers[0], 0) if r.buffers else None
            if ts is None:  # removed or unreadable: look later
                left = mid + 1
            elif ts >= timestamp:
                right = mid
            else:
                left = mid + 1
        return left

    async def search_offset_by_timestamp(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic, q = self._tq(cmd)
            ts = field_int(cmd, "timestamp")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        return cmd.response(R.SUCCESS, None, {"offset": self.offset_by_time(topic, q, ts)})

    async def view_message_by_id(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            offset = field_int(cmd, "offset")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        raw = raw_message_at(self.c, offset)
        if raw is None:
            return cmd.response(R.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        require_found({_record_topic(raw): SUB})  # the permission table's "read-by-offset"
        return cmd.response(R.SUCCESS, None, body=raw)

    async def query_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            key = field_str(cmd, "key", required=True) or ""
            max_num = max(1, min(field_int(cmd, "maxNum", 32), 64))
            begin = field_int(cmd, "beginTimestamp", 0)
            end = field_int(cmd, "endTimestamp", int(time.time() * 1000) + 1)
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        store = self.c.store_access.store
        index = getattr(store, "index_service", None)
        offsets = list(index.query_offset(topic, key, max_num, begin, end)) if index is not None else []
        bodies = []
        for phy in offsets:
            raw = raw_message_at(self.c, phy)
            # the index is keyed by a hash of topic#key: a collision may name another topic's
            # record, which this request has no permission to read
            if raw is not None and _record_topic(raw) == topic:
                bodies.append(raw)
        if not bodies:
            return cmd.response(R.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        header = {"indexLastUpdateTimestamp": int(time.time() * 1000), "indexLastUpdatePhyoffset": max(offsets)}
        return cmd.response(R.SUCCESS, None, header, b"".join(bodies))

    async def get_all(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        content, _version = self.c.metadata.file_content(_DUMPS[cmd.code])
        return cmd.response(R.SUCCESS, None, body=content.encode("utf-8"))

    async def update_and_create_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            validate_topic(topic)
            read_q = field_int(cmd, "readQueueNums", 8)
            write_q = field_int(cmd, "writeQueueNums", 8)
            perm = field_int(cmd, "perm", 6)
        except (HeaderError, TopicValidationError) as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        refused = refuse_long_topic(cmd, topic)  # over 127 characters from a client below 5.0
        if refused is not None:
            return refused
        if topic == self.c.cluster_name:
            return cmd.response(R.SYSTEM_ERROR, f"the topic[{topic}] is conflict with system reserved words.")
        try:
            self.ctx.broker_processor.create_topic(topic, read_q, write_q, perm)
        except BrokerApiError as exc:
            return api_error_response(cmd, exc)
        self.ctx.registrar_wakeup()
        return cmd.response(R.SUCCESS)

"""SendMessageProcessor: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK.

Rules (apache/rocketmq 4.9.x ``SendMessageProcessor``, ``AbstractSendMessageProcessor``):
- V1 header names (``producerGroup, topic, defaultTopic, defaultTopicQueueNums, queueId, sysFlag,
  bornTimestamp, flag, properties, reconsumeTimes, unitMode, batch, maxReconsumeTimes``); V2
  uses the one-letter aliases ``a``..``m`` in that order. The body is the message body; for a
  batch it is ``MessageDecoder.encodeMessages``: ``[totalSize:4][magic:4][bodyCrc:4][flag:4]
  [bodyLen:4][body][propertiesLength:2][properties]`` per message.
- The write gate is the controller's ``check_writable`` (through ``broker.processor``): a slave or
  DLedger follower answers ``SERVICE_NOT_AVAILABLE``, as a RocketMQ slave's store does. Topic
  checks (exists / auto-create, PERM_WRITE, queueId < writeQueueNums) are the HTTP API's.
  A negative queueId lets the broker pick one (round robin).
- ``%RETRY%<group>`` topics: the subscription group must exist (auto-created); when
  ``reconsumeTimes >= maxReconsumeTimes`` (header, else the group's ``retryMaxTimes``) the
  message goes to ``%DLQ%<group>`` instead.
- A topic over 127 characters from a client that announces a version below 5.0 (header
  ``version`` < 413, MQVersion V5_0_0) is 4.9.8's ``SYSTEM_ERROR`` "The specified topic is longer
  than topic max length." (its records are in RocketMQ 5's format); 5.x clients keep them.
- Stored as 4.9.8 stores it: ``CLUSTER=<brokerClusterName>`` added to every message; a single
  message's ``WAIT`` is not stored (it only says whether to wait for SYNC_FLUSH, kept beside the
  message as ``wait_store_msg_ok``); a batch's own properties (``WAIT``) and ``CLUSTER`` are
  appended to each of its records.
- A send whose UNIQ_KEYs the broker stored in the last minute is answered from the dedup window
  (``broker.put_dedup``), except from producer group ``ReSendMsgById``: Apache's ``mqadmin
  queryMsgById -s true`` resends a stored message with its UNIQ_KEY to have it stored again.
- Response header ``msgId`` (offset msgId; comma-joined for a batch), ``queueId``,
  ``queueOffset``. FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE are answered
  with those codes and the full header: the message is stored.
- CONSUMER_SEND_MSG_BACK (``offset, group, delayLevel, originMsgId, originTopic,
  maxReconsumeTimes``): the stored message is re-put on ``%RETRY%<group>`` with
  ``reconsumeTimes+1``, ``RETRY_TOPIC`` and ``ORIGIN_MESSAGE_ID`` set; to ``%DLQ%<group>`` past
  the max or when ``delayLevel < 0``. The retry is delayed as RocketMQ's: level ``delayLevel``,
  or ``3 + reconsumeTimes`` when 0 (``DELAY`` set; the store moves it to SCHEDULE_TOPIC_XXXX
  and ``broker.store.schedule`` delivers it to the retry topic when due).
"""
from __future__ import annotations

import random
import struct
import time
from typing import Any, Final, Optional

from broker.metadata.topic_config import TopicValidationError, validate_topic
from broker.transaction import half_message, is_half_send
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.refusals import Refusal
from broker.remoting.header_fields import HeaderError, field_bool, field_int, field_str
from broker.remoting.processors.common import FAQ, Processor, refusal_response
from broker.remoting.processors.topic_group_admin import refuse_long_topic
from broker.remoting.server import RemotingConnection
from broker.store.message import MessageExt
from broker.store.message_properties import string_to_properties
from broker.store.put_result import PutMessageStatus, PutRefused

V2_ALIASES: Final = dict(zip("abcdefghijklm", (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch")))
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
PERM_RW: Final = 6
_BATCH_HEAD: Final = struct.Struct(">iiiii")
#: the remoting answer to each put status, as 4.9.8's ``SendMessageProcessor.handlePutMessageResult``
#: (stored: the status's own code with the full header; refused: an error code and remark)
PUT_STATUS_REMOTING: Final[dict[PutMessageStatus, int]] = {
    PutMessageStatus.PUT_OK: R.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: R.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: R.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: R.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: R.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: R.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: R.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: R.MESSAGE_ILLEGAL,
    PutMessageStatus.OS_PAGECACHE_BUSY: R.SYSTEM_ERROR,
    PutMessageStatus.UNKNOWN_ERROR: R.SYSTEM_ERROR,
}
PAGECACHE_BUSY_REMARK: Final = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"


#: the producer group of Apache's ``mqadmin queryMsgById -s true`` (QueryMsgByIdSubCommand)
RESEND_PRODUCER_GROUP: Final = "ReSendMsgById"


def v1_header(cmd: RemotingCommand) -> RemotingCommand:
    """A V2 request seen with V1 field names (``SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1``)."""
    if cmd.code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
        fields = {V2_ALIASES.get(k, k): v for k, v in cmd.ext_fields.items()}
        return RemotingCommand(code=cmd.code, opaque=cmd.opaque, flag=cmd.flag, ext_fields=fields, body=cmd.body,
                               version=cmd.version, serialize_type=cmd.serialize_type)
    return cmd


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    out = []
    pos, n = 0, len(body)
    while pos < n:
        if n - pos < _BATCH_HEAD.size:
            raise HeaderError("batch body truncated")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        start = pos + _BATCH_HEAD.size
        if total < _BATCH_HEAD.size + 2 or pos + total > n or body_len < 0 or start + body_len + 2 > pos + total:
            raise HeaderError(f"batch message at byte {pos} has a bad size")
        mbody = body[start:start + body_len]
        plen = struct.unpack_from(">h", body, start + body_len)[0]
        ps = start + body_len + 2
        if plen < 0 or ps + plen > pos + total:
            raise HeaderError(f"batch message at byte {pos} has a bad properties length")
        props = string_to_properties(body[ps:ps + plen].decode("utf-8")) if plen else {}
        out.append((flag, mbody, props))
        pos += total
    return out


class SendMessageProcessor(Processor):
    def register(self, server: Any) -> None:
        for code in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
            server.register(code, self.send_message)
        server.register(RC.CONSUMER_SEND_MSG_BACK, self.consumer_send_msg_back)

    # ------------------------------------------------------------------ helpers
    def _born_host(self, conn: RemotingConnection) -> tuple[str, int]:
        host, _, port = conn.remote_addr.rpartition(":")
        return (host or "127.0.0.1", int(port) if port.isdigit() else 0)

    def _group_config(self, group: str) -> Any:
        return self.c.metadata.managers["subscriptionGroup"].find_subscription_group_config(group)

    def _ensure_topic(self, topic: str, queue_nums: int) -> Any:
        tc = self.c.metadata.topic(topic)
        if tc is None:
            tc = self.c.metadata.create_topic(topic, queue_nums, queue_nums, PERM_RW)
        return tc

    def _retry_or_dlq(self, topic: str, reconsume_times: int, max_times: Optional[int]) -> tuple[str, Optional[int]]:
        """handleRetryAndDLQ: (topic to write, forced queueId or None)."""
        if not topic.startswith(RETRY_PREFIX):
            return topic, None
        group = topic[len(RETRY_PREFIX):]
        sgc = self._group_config(group)
        if sgc is None:
            raise _Refuse(R.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}{FAQ}")
        limit = max_times if max_times is not None else sgc.retry_max_times
        if reconsume_times >= limit:
            dlq = DLQ_PREFIX + group
            self._ensure_topic(dlq, 1)
            return dlq, 0
        self._ensure_topic(topic, max(1, sgc.retry_queue_nums))
        return topic, None

    async def _put(self, cmd: RemotingCommand, topic: str, queue_id: Optional[int],
                   msgs: list[MessageExt], header_extra: dict[str, Any], producer_keys: bool = True) -> RemotingCommand:
        service = self.ctx.send_service
        try:
            _tc, qid = service.prepare(topic, queue_id if queue_id is not None and queue_id >= 0 else None)
        except Refusal as exc:
            if exc.code == "MESSAGE_ILLEGAL" and "queueId" in exc.message:
                return cmd.response(R.SYSTEM_ERROR, exc.message)
            return refusal_response(cmd, exc)
        for m in msgs:
            m.topic, m.queue_id = topic, qid
        if len(msgs) == 1 and is_half_send(msgs[0]):  # a transaction's prepare: a half message (broker.transaction)
            if getattr(self.c.broker_config, "reject_transaction_message", False):
                return cmd.response(R.NO_PERMISSION, f"the broker[{self.c.broker_ip}] sending transaction message "
                                    "is forbidden (rejectTransactionMessage=true)")
            msgs = [half_message(msgs[0])]
        t0 = time.perf_counter()
        try:
            r = await service.put(msgs, producer_keys)  # the store put already waited for the slave (SYNC_MASTER)
        except Refusal as exc:  # NOT_MASTER: leadership lost during the put
            return refusal_response(cmd, exc)
        except PutRefused as refused:  # nothing stored
            remark = PAGECACHE_BUSY_REMARK if refused.status is PutMessageStatus.OS_PAGECACHE_BUSY else refused.detail
            return cmd.response(PUT_STATUS_REMOTING.get(refused.status, R.SYSTEM_ERROR), remark)
        service.observe("remoting", topic, len(msgs), sum(len(m.body) for m in msgs), t0, r.status)
        header = {"msgId": ",".join(r.msg_ids), "queueId": qid if r.queue_id is None else r.queue_id,
                  "queueOffset": r.queue_offsets[0], **header_extra}
        # (PUT_OK by identity: a dict keyed by an Enum calls enum.py's interpreted __hash__)
        code = R.SUCCESS if r.status is PutMessageStatus.PUT_OK else PUT_STATUS_REMOTING.get(r.status, R.SYSTEM_ERROR)
        return cmd.response(code, None, header)

    # ------------------------------------------------------------------ SEND_MESSAGE(_V2), batch
    async def send_message(self, request: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        cmd = v1_header(request)
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            validate_topic(topic)
            refused = refuse_long_topic(request, topic)  # a 4.x client cannot read such a topic's records
            if refused is not None:
                return refused
            queue_id = field_int(cmd, "queueId", -1)
            sys_flag = field_int(cmd, "sysFlag", 0)
            born_ts = field_int(cmd, "bornTimestamp", int(time.time() * 1000))
            reconsume = field_int(cmd, "reconsumeTimes", 0)
            max_reconsume = field_int(cmd, "maxReconsumeTimes", -1)
            batch = cmd.code == RC.SEND_BATCH_MESSAGE or field_bool(cmd, "batch")
            if batch:
                if len(cmd.body) > self.c.max_message_size:  # before decoding: bytes first, as RocketMQ
                    return request.response(R.MESSAGE_ILLEGAL, f"the batch is {len(cmd.body)}B, over the max "
                                            f"message size {self.c.max_message_size}B (maxMessageSize)")
                items = decode_batch(cmd.body)
                if not items:
                    raise HeaderError("empty batch")
                max_count = int(getattr(self.c.broker_config, "max_batch_message_count", 4096) or 4096)
                if len(items) > max_count:  # issue 12: count cap (maxBatchMessageCount), as the HTTP batch
                    return request.response(R.MESSAGE_ILLEGAL, f"the batch has {len(items)} messages, over the "
                                            f"max {max_count} (maxBatchMessageCount)")
                if topic.startswith(RETRY_PREFIX):
                    return request.response(R.MESSAGE_ILLEGAL, "batch request does not support retry group " + topic)
                # the batch's own properties (the Java client's WAIT) are appended to every record, as
                # 4.9.8's MessageExtBatchEncoder does (a record's own value is overridden on decode)
                batch_props = string_to_properties(field_str(cmd, "properties", "") or "")
                batch_props["CLUSTER"] = self.c.cluster_name
                wait = batch_props.get("WAIT") != "false"
                for _flag, _body, props in items:
                    props.update(batch_props)
            else:
                props = string_to_properties(field_str(cmd, "properties", "") or "")
                props["CLUSTER"] = self.c.cluster_name
                wait = props.pop("WAIT", None) != "false"  # 4.9.8 does not store WAIT: 9 bytes a message
                items = [(field_int(cmd, "flag", 0), cmd.body, props)]
        # (one name per except clause: compiled, a name keeps the type of its first clause)
        except TopicValidationError as bad_topic:
            return request.response(R.SYSTEM_ERROR, f"The specified topic is illegal: {bad_topic}")
        except (HeaderError, UnicodeDecodeError) as bad_header:
            return request.response(R.SYSTEM_ERROR, str(bad_header))
        if len(cmd.body) > self.c.max_message_size:
            return request.response(R.MESSAGE_ILLEGAL, "the message is illegal, maybe msg body or properties length "
                                    f"not matched. msg body length limit {self.c.max_message_size}B, msg properties "
                                    "length limit 32KB.")
        try:
            topic, forced_q = self._retry_or_dlq(topic, reconsume, max_reconsume if max_reconsume >= 0 else None)
        except _Refuse as refusal:
            return request.response(refusal.code, refusal.remark)
        now = int(time.time() * 1000)
        born_host = self._born_host(conn)
        msgs = [MessageExt(topic=topic, body=bytes(body), flag=flag, properties=props, sys_flag=sys_flag,
                           born_timestamp=born_ts, born_host=born_host, store_timestamp=now,
                           store_host=self.c.store_host, reconsume_times=reconsume, wait_store_msg_ok=wait)
                for flag, body, props in items]
        # Apache's ``mqadmin queryMsgById -s true`` resends a stored message as it is, UNIQ_KEY
        # included, from its own producer group: a resend asked for, never a retry to answer
        # from the dedup window (Apache's broker stores it again; so do we)
        resend = field_str(cmd, "producerGroup", "") == RESEND_PRODUCER_GROUP
        return await self._put(request, topic, forced_q if forced_q is not None else queue_id, msgs, {},
                               producer_keys=not resend)

    # ------------------------------------------------------------------ CONSUMER_SEND_MSG_BACK
    async def consumer_send_msg_back(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            offset = field_int(cmd, "offset")
            group = field_str(cmd, "group", required=True) or ""
            delay_level = field_int(cmd, "delayLevel", 0)
            max_times_field = cmd.ext_fields.get("maxReconsumeTimes")
            max_times = int(max_times_field) if max_times_field not in (None, "") else None
        except (HeaderError, ValueError) as bad_header:
            return cmd.response(R.SYSTEM_ERROR, str(bad_header))
        sgc = self._group_config(group)
        if sgc is None:
            return cmd.response(R.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}{FAQ}")
        if sgc.retry_queue_nums <= 0:
            return cmd.response(R.SUCCESS)
        try:
            self.c.check_writable()
        except Refusal as exc:
            return refusal_response(cmd, exc)
        msg = self.store.message_at(offset)
        if msg is None:
            return cmd.response(R.SYSTEM_ERROR, f"look message by offset failed, {offset}")
        props = dict(msg.properties)
        props.setdefault("RETRY_TOPIC", msg.topic)
        props.pop("WAIT", None)
        limit = max_times if max_times is not None else sgc.retry_max_times
        if msg.reconsume_times >= limit or delay_level < 0:
            topic, qid = DLQ_PREFIX + group, 0
            self._ensure_topic(topic, 1)
            props.pop("DELAY", None)
        else:
            topic = RETRY_PREFIX + group
            self._ensure_topic(topic, sgc.retry_queue_nums)
            qid = random.randrange(sgc.retry_queue_nums)
            # as RocketMQ: the retry waits delayLevel, or 3 + reconsumeTimes (10 s, 30 s, 1 min, ...),
            # through the store's SCHEDULE_TOPIC_XXXX and broker.store.schedule
            props["DELAY"] = str(delay_level if delay_level > 0 else 3 + msg.reconsume_times)
        props.setdefault("ORIGIN_MESSAGE_ID", cmd.ext_fields.get("originMsgId") or msg.msg_id)
        inner = MessageExt(topic=topic, body=msg.body, flag=msg.flag, properties=props, sys_flag=msg.sys_flag,
                           born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                           store_timestamp=int(time.time() * 1000), store_host=self.c.store_host,
                           reconsume_times=msg.reconsume_times + 1)
        resp = await self._put(cmd, topic, qid, [inner], {})
        if resp.code != R.SUCCESS:
            return cmd.response(R.SYSTEM_ERROR, resp.remark or "put failed")
        return cmd.response(R.SUCCESS)


class _Refuse(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code, self.remark = code, remark

"""PullMessageProcessor with long polling (PullRequestHoldService).

Rules (apache/rocketmq 4.9.x ``PullMessageProcessor``):
- Header ``consumerGroup, topic, queueId, queueOffset, maxMsgNums, sysFlag, commitOffset,
  suspendTimeoutMillis, subscription, subVersion, expressionType``. sysFlag bits: 1 commit
  offset, 2 suspend, 4 subscription, 8 class filter.
- Checks: the broker is readable (``brokerPermission``: ``NO_PERMISSION`` "the broker[ip] pulling
  message is forbidden"), topic exists (``TOPIC_NOT_EXIST``), is readable (``NO_PERMISSION``), queueId <
  readQueueNums (``SYSTEM_ERROR``); the group's ``consumeEnable`` (``NO_PERMISSION``). A TAG
  expression (``*``/empty = all; ``a || b``) filters by the ConsumeQueue tagsCode (Java
  ``String.hashCode`` of the tag); other expression types are ``SUBSCRIPTION_PARSE_FAILED``.
- Store status -> code: FOUND -> SUCCESS (body = the stored records back to back);
  NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING -> PULL_RETRY_IMMEDIATELY; OFFSET_FOUND_NULL,
  OFFSET_OVERFLOW_ONE -> PULL_NOT_FOUND; OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL ->
  PULL_OFFSET_MOVED; NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE -> PULL_OFFSET_MOVED when
  the requested offset is not 0, else PULL_NOT_FOUND. On a slave, PULL_OFFSET_MOVED becomes
  PULL_RETRY_IMMEDIATELY (``offsetCheckInSlave=false``). Header ``nextBeginOffset, minOffset,
  maxOffset, suggestWhichBrokerId`` (0: the master).
- Long polling: PULL_NOT_FOUND with the suspend bit is held until a message for that queue is
  dispatched or ``suspendTimeoutMillis`` (``longPollingEnable``; else
  ``shortPollingTimeMills``) passes, then answered by a fresh read. Bounded (issue 23.5,
  ``pull_hold.py``): the hold is clamped to ``longPollingMaxSuspendMillis``; a pull over the
  held caps (count per connection / in all, bytes) is answered ``SYSTEM_BUSY`` at once (Apache 4.9's push
  consumer then retries that queue after ``pullTimeDelayMillsWhenException``, 3 s; with
  ``PULL_NOT_FOUND`` it would retry at once, a busy loop); a pull whose connection closed while
  held gets no fresh read and no answer.
- One pull carries at most Apache's per-pull caps (``maxTransferBytes/CountOnMessageInMemory``,
  ``...InDisk``; ``broker.store.transfer_limits``), and always at least one message.
- The commit-offset bit stores ``commitOffset`` for the group, on a master only.

Theory of operation: :class:`~broker.remoting.processors.pull_hold.PullRequestHoldService`
keeps one asyncio future per held pull; the store's dispatch listener wakes the queues it
dispatched to, the server's close listener the pulls of a closed connection.
"""
from __future__ import annotations

import struct
import time
from typing import Any, Callable, Optional

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.common import (FAQ, HandlerRegistry, HeaderError, Processor, RemotingContext, field_int,
                                               field_str)
from broker.remoting.processors.pull_hold import PullRequestHoldService, request_bytes
from broker.remoting.server import RemotingConnection
from broker.store.java_hash import java_string_hash
from broker.store.transfer_limits import TransferLimits
from broker.stats_manager import GROUP_GET_NUMS

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION, FLAG_CLASS_FILTER = 1, 2, 4, 8
PERM_READ = 4
_STATUS_CODE = {
    "FOUND": R.SUCCESS, "NO_MATCHED_MESSAGE": R.PULL_RETRY_IMMEDIATELY, "MESSAGE_WAS_REMOVING": R.PULL_RETRY_IMMEDIATELY,
    "OFFSET_FOUND_NULL": R.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE": R.PULL_NOT_FOUND,
    "OFFSET_OVERFLOW_BADLY": R.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL": R.PULL_OFFSET_MOVED,
}
_SIZE = struct.Struct(">i")


def tags_filter(expression: Optional[str], expression_type: Optional[str]) -> Optional[Callable[[int], bool]]:
    """FilterAPI.buildSubscriptionData for TAG expressions: None means every message."""
    if expression_type not in (None, "", "TAG"):
        raise ValueError(f"expression type {expression_type} is not supported (TAG only)")
    expr = (expression or "").strip()
    if expr in ("", "*"):
        return None
    codes = {java_string_hash(t.strip()) for t in expr.split("||") if t.strip()}
    if not codes:
        return None
    return codes.__contains__


class PullMessageProcessor(Processor):
    def __init__(self, ctx: RemotingContext) -> None:
        super().__init__(ctx)
        bc = getattr(self.c, "broker_config", None)
        self.hold = PullRequestHoldService.from_config(bc)
        self.limits = TransferLimits.remoting(bc)

    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.PULL_MESSAGE, self.pull_message)
        server.close_listeners.append(self.hold.on_close)

    def _read(self, topic: str, queue_id: int, offset: int, max_num: int,
              tag_filter: Optional[Callable[[int], bool]]) -> Any:
        return self.store.store.get_message(topic, queue_id, offset, max_num, tags_filter=tag_filter,
                                                     limits=self.limits)

    async def pull_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> Optional[RemotingCommand]:
        try:
            group = field_str(cmd, "consumerGroup", required=True) or ""
            topic = field_str(cmd, "topic", required=True) or ""
            queue_id = field_int(cmd, "queueId")
            offset = field_int(cmd, "queueOffset")
            max_num = max(1, min(field_int(cmd, "maxMsgNums", 32), 512))
            sys_flag = field_int(cmd, "sysFlag", 0)
            commit_offset = field_int(cmd, "commitOffset", 0)
            suspend_ms = field_int(cmd, "suspendTimeoutMillis", 15_000)
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        c = self.c
        if not int(getattr(c.broker_config, "broker_permission", 6)) & PERM_READ:
            return cmd.response(R.NO_PERMISSION, f"the broker[{c.broker_ip}] pulling message is forbidden")
        tc = c.metadata.topic(topic)
        if tc is None:
            return cmd.response(R.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!{FAQ}")
        if not tc.perm & PERM_READ:
            return cmd.response(R.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            return cmd.response(R.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[{conn.remote_addr}]")
        sgc = c.metadata.managers["subscriptionGroup"].find_subscription_group_config(group)
        if sgc is None:
            return cmd.response(R.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist{FAQ}")
        if not sgc.consume_enable:
            return cmd.response(R.NO_PERMISSION, f"subscription group no permission, {group}")
        try:
            tag_filter = tags_filter(cmd.ext_fields.get("subscription") if sys_flag & FLAG_SUBSCRIPTION
                                     else self.ctx.consumers.subscription_of(group, topic),
                                     cmd.ext_fields.get("expressionType"))
        except ValueError as exc:
            return cmd.response(R.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {exc}")
        is_master = c.is_master()
        if sys_flag & FLAG_COMMIT_OFFSET and is_master and commit_offset >= 0:
            c.metadata.commit_offset(group, topic, queue_id, commit_offset)
        bc = c.broker_config
        if sys_flag & FLAG_SUSPEND:
            hold_ms = suspend_ms if getattr(bc, "long_polling_enable", True) else getattr(bc, "short_polling_time_mills", 1000)
        else:
            hold_ms = 0
        deadline = time.monotonic() + self.hold.suspend_millis(hold_ms) / 1000.0
        held = False
        nbytes = request_bytes(cmd) if hold_ms > 0 else 0
        while True:
            res = self._read(topic, queue_id, offset, max_num, tag_filter)
            status = getattr(res.status, "value", str(res.status))
            code = _STATUS_CODE.get(status)
            if code is None:  # NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE
                code = R.PULL_OFFSET_MOVED if offset != 0 else R.PULL_NOT_FOUND
            remaining = deadline - time.monotonic()
            if code != R.PULL_NOT_FOUND or remaining <= 0 or self.ctx.stopping:
                break
            if conn.closed:
                return None  # released by the close listener: nobody to answer
            if not held and not self.hold.admit(conn, nbytes):
                return cmd.response(R.SYSTEM_BUSY, f"[PULL]too many held pulls ({self.hold.held} in all, "
                                    f"{self.hold.held_by(conn)} on this connection), try again later")
            held = True
            sa = self.store
            await self.hold.wait(topic, queue_id, remaining, lambda: sa.max_offset_in_queue(topic, queue_id) > offset,
                                 conn, nbytes)
            if conn.closed:
                return None  # released by the close listener: nobody to answer
        if code == R.PULL_OFFSET_MOVED and not is_master:
            code = R.PULL_RETRY_IMMEDIATELY
        header = {"suggestWhichBrokerId": 0, "nextBeginOffset": res.next_begin_offset, "minOffset": res.min_offset,
                  "maxOffset": res.max_offset}
        body = b""
        if code == R.SUCCESS:
            body = b"".join(res.buffers)
            c.metrics.get_messages.inc(topic, amount=len(res.buffers))
            self.c.metrics.stats_counts.add(GROUP_GET_NUMS, f"{topic}@{group}", len(res.buffers))
        return cmd.response(code, status, header, body)

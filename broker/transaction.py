"""Transactional messages: half messages, commit/rollback, and the check-back of the producer.

Rules (RocketMQ 4.9.8 ``TransactionalMessageServiceImpl``, ``EndTransactionProcessor``,
``TransactionalMessageCheckService``; issue 14.2):
- **Prepare.** A send whose ``TRAN_MSG`` property is ``true`` is stored as a *half* message:
  topic ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, ``REAL_TOPIC``/``REAL_QID`` = where it was going,
  sysFlag reset to not-a-transaction (so it is dispatched to the half queue, never to the user's
  queue). ``rejectTransactionMessage=true`` refuses it (NO_PERMISSION).
- **End** (END_TRANSACTION, 37, oneway from the producer; not on a slave): the half message is
  looked up by ``commitLogOffset`` and must match the request (producer group ``PGROUP``, queue
  offset, physical offset). COMMIT puts the final message into the real topic and queue with
  sysFlag COMMIT, ``preparedTransactionOffset`` = the half's offset and the half's properties
  string (Apache serialises it before clearing REAL_TOPIC/REAL_QID/TRAN_MSG from the map, so the
  stored record keeps them); then, as ROLLBACK does alone, an *op* message marks the half done:
  topic ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tags ``d``, body = the half's queue offset.
  UNKNOWN (0) changes nothing.
- **Check-back**, every ``transactionCheckInterval`` ms on the master only: from the half queue's
  check offset (consumer offsets of group ``CID_RMQ_SYS_TRANS`` on both system topics, in
  consumerOffset.json: synced to slaves, so a new master continues), each half message not
  marked done by an op message is: discarded to ``TRANS_CHECK_MAX_TIME_TOPIC`` once checked
  ``transactionCheckMax`` times; left for later (the scan stops) while younger than
  ``transactionTimeOut`` ms (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``); otherwise put back at the
  end of the half queue with ``TRANSACTION_CHECK_TIMES`` + 1 (the log, not memory, keeps the count
  across restarts and failover) and a CHECK_TRANSACTION_STATE (39) goes, oneway, to a connected
  producer of its ``PGROUP`` naming the new copy; the producer answers with END_TRANSACTION.
  The op offset advances only over op messages for halves behind the check offset.
- An upgraded store continues the same way: a 4.9.8 broker kept its pending halves, ops and
  check offsets in exactly these topics and files. Raw PREPARED/ROLLBACK records in user topics
  (what the store API writes for sysFlag 0x4/0xC) are never dispatched or delivered, as in Apache.

Theory of operation: :class:`TransactionalMessageService` holds no state of its own beyond the offsets;
puts go through ``StoreAccess.put_internal`` (no send dedup: a put-back copy keeps its UNIQ_KEY).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable, Callable, Optional

from broker.store.message import MessageExt
from broker.store.message_properties import java_hashmap_ordered, properties_to_string

log = logging.getLogger("broker.transaction")

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
REMOVE_TAG = "d"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
REAL_TOPIC, REAL_QID, UNIQ_KEY = "REAL_TOPIC", "REAL_QID", "UNIQ_KEY"
NOT_TYPE, PREPARED, COMMIT, ROLLBACK = 0x0, 0x4, 0x8, 0xC
CHECK_TRANSACTION_STATE = 39
SCAN_BATCH = 64


def is_half_send(msg: MessageExt) -> bool:
    return (msg.properties or {}).get(TRAN_MSG) == "true"


def half_message(msg: MessageExt) -> MessageExt:
    """The half message stored for a transactional send (``parseHalfMessageInner``)."""
    props = dict(msg.properties)
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=HALF_TOPIC, queue_id=0, sys_flag=msg.sys_flag & ~0xC,
                               properties=java_hashmap_ordered(props), properties_bytes=None)


def _raw_props(msg: MessageExt) -> bytes:
    if msg.properties_bytes is not None:
        return msg.properties_bytes
    return properties_to_string(java_hashmap_ordered(msg.properties)).encode("utf-8")


class EndTransactionError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class TransactionalMessageService:
    """Prepare/commit/rollback and the check-back loop (module rules)."""

    def __init__(self, store: Any, offsets: Any, put: Callable[[list[MessageExt]], Awaitable[Any]],
                 producer_channel: Callable[[str], Any], *, timeout_ms: int = 6000, check_max: int = 15,
                 check_interval_ms: int = 60_000, encode_check: Callable[[MessageExt], bytes] | None = None) -> None:
        self.store = store
        self.offsets = offsets
        self._put = put
        self.producer_channel = producer_channel
        self.timeout_ms = timeout_ms
        self.check_max = check_max
        self.interval_s = max(0.05, check_interval_ms / 1000.0)
        self.encode_check = encode_check
        self.running = False
        self._task: Optional[asyncio.Task[None]] = None
        self.counters = {"committed": 0, "rolledBack": 0, "checks": 0, "discarded": 0, "noProducer": 0}

    # --- end transaction ----------------------------------------------------------------------
    def _half_at(self, commitlog_offset: int, queue_offset: int, producer_group: str) -> MessageExt:
        msg = self.store.look_message_by_offset(commitlog_offset)
        if msg is None:
            raise EndTransactionError("SYSTEM_ERROR", f"Find prepared transaction message failed at {commitlog_offset}")
        if msg.topic != HALF_TOPIC:
            raise EndTransactionError("SYSTEM_ERROR", f"the message at {commitlog_offset} is not a half message")
        if msg.properties.get(PGROUP) != producer_group:
            raise EndTransactionError("SYSTEM_ERROR", "The producer group wrong")
        if msg.queue_offset != queue_offset:
            raise EndTransactionError("SYSTEM_ERROR", "The transaction state table offset wrong")
        return msg

    async def end(self, producer_group: str, tran_state_table_offset: int, commitlog_offset: int,
                  commit_or_rollback: int, from_check: bool = False,
                  authorize: Optional[Callable[[str], None]] = None) -> str:
        """Apply END_TRANSACTION; returns what was done ("commit", "rollback", "unknown").

        ``authorize(real_topic)`` (the door's ACL) raises to refuse before anything is written."""
        if commit_or_rollback == NOT_TYPE:
            return "unknown"
        if commit_or_rollback not in (COMMIT, ROLLBACK):
            raise EndTransactionError("SYSTEM_ERROR", f"commitOrRollback {commit_or_rollback} is not 0, 8 or 12")
        half = self._half_at(commitlog_offset, tran_state_table_offset, producer_group)
        if authorize is not None:
            authorize(half.properties.get(REAL_TOPIC, half.topic))
        if commit_or_rollback == COMMIT:
            final = self._final_message(half)
            outcome = await self._put([final])
            if not outcome.status.stored:  # never: StoreAccess raises for a put that stored nothing
                raise EndTransactionError("SYSTEM_ERROR", f"commit of the half message failed: {outcome.status.value}")
            self.counters["committed"] += 1
        else:
            self.counters["rolledBack"] += 1
        await self._put([self._op_message(half)])
        log.info("transaction %s of half message %d (queue offset %d, group %s)%s",
                 "committed" if commit_or_rollback == COMMIT else "rolled back", commitlog_offset,
                 tran_state_table_offset, producer_group, " after a check-back" if from_check else "")
        return "commit" if commit_or_rollback == COMMIT else "rollback"

    @staticmethod
    def _final_message(half: MessageExt) -> MessageExt:
        props = dict(half.properties)
        raw = _raw_props(half)  # serialised before the clears below (4.9.8)
        real_topic, real_qid = props.pop(REAL_TOPIC, ""), int(props.pop(REAL_QID, "0") or 0)
        props.pop(TRAN_MSG, None)
        return MessageExt(topic=real_topic, body=half.body, queue_id=real_qid, flag=half.flag, properties=props,
                          properties_bytes=raw, sys_flag=(half.sys_flag & ~0xC) | COMMIT,
                          born_timestamp=half.born_timestamp, born_host=half.born_host,
                          store_timestamp=half.store_timestamp, store_host=half.store_host,
                          reconsume_times=half.reconsume_times,
                          prepared_transaction_offset=half.commitlog_offset)

    @staticmethod
    def _op_message(half: MessageExt) -> MessageExt:
        return MessageExt(topic=OP_TOPIC, body=str(half.queue_offset).encode(), queue_id=half.queue_id,
                          properties={"TAGS": REMOVE_TAG, "WAIT": "true"}, born_timestamp=int(time.time() * 1000),
                          born_host=half.store_host, store_host=half.store_host,
                          wait_store_msg_ok=False)  # stored as Apache's op message; no flush wait

    # --- check-back -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.running:
            return
        self.running = True
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="transaction-check")

    async def stop(self) -> None:
        self.running = False
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while self.running:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the next round retries
                log.exception("transaction check round failed")

    def _queue_offset(self, topic: str) -> int:
        got = self.offsets.query_offset(CHECK_GROUP, topic, 0)
        if got < 0:
            cq = self.store.find_consume_queue(topic, 0)
            return cq.min_offset_in_queue if cq is not None else 0
        return got

    def _read(self, topic: str, start: int, limit: int) -> list[tuple[int, MessageExt | None]]:
        cq = self.store.find_consume_queue(topic, 0)
        if cq is None:
            return []
        out = []
        end = min(cq.max_offset_in_queue, start + limit)
        offset = max(start, cq.min_offset_in_queue)
        while offset < end:
            units = cq.get_units(offset, end - offset)
            if not units:
                break
            for phy, size, _tags in units:
                out.append((offset, self.store.look_message_by_offset(phy, size)))
                offset += 1
        return out

    def _done_halves(self, op_start: int) -> tuple[list[tuple[int, int]], set[int]]:
        ops: list[tuple[int, int]] = []
        cq = self.store.find_consume_queue(OP_TOPIC, 0)
        hi = cq.max_offset_in_queue if cq is not None else 0
        offset = op_start
        while offset < hi:
            batch = self._read(OP_TOPIC, offset, 4096)
            if not batch:
                break
            for qo, msg in batch:
                if msg is not None and msg.properties.get("TAGS") == REMOVE_TAG:
                    try:
                        ops.append((qo, int(msg.body.decode())))
                    except ValueError:
                        log.error("op message at queue offset %d has a bad body %r; ignored", qo, msg.body[:40])
                offset = qo + 1
        return ops, {h for _, h in ops}

    async def check_once(self, now_ms: int | None = None) -> int:
        """One scan of the half queue; returns how many check-backs were sent."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        half_off, op_off = self._queue_offset(HALF_TOPIC), self._queue_offset(OP_TOPIC)
        ops, done = self._done_halves(op_off)
        cq = self.store.find_consume_queue(HALF_TOPIC, 0)
        half_max = cq.max_offset_in_queue if cq is not None else 0
        sent = 0
        offset = half_off
        while offset < half_max:
            batch = self._read(HALF_TOPIC, offset, SCAN_BATCH)
            if not batch:
                break
            stop = False
            for qo, msg in batch:
                if qo in done or msg is None:
                    offset = qo + 1
                    continue
                checks = int(msg.properties.get(CHECK_TIMES, "0") or 0)
                if checks >= self.check_max:
                    await self._discard(msg)
                    offset = qo + 1
                    continue
                immunity = msg.properties.get(CHECK_IMMUNITY)
                wait_ms = int(immunity) * 1000 if immunity and immunity.isdigit() else self.timeout_ms
                if now_ms - msg.born_timestamp < wait_ms:
                    stop = True
                    break
                copy = await self._put_back(msg, checks + 1)
                if copy is not None:
                    sent += self._send_check(copy)
                    offset = qo + 1
                else:
                    stop = True  # could not put it back: try again next round
                    break
            if stop:
                break
        if offset != half_off:
            self.offsets.commit_offset(CHECK_GROUP, HALF_TOPIC, 0, offset)
        new_op = op_off
        for qo, h in ops:  # ops for halves behind the check offset are consumed
            if h < offset and qo == new_op:
                new_op = qo + 1
            else:
                break
        if new_op != op_off:
            self.offsets.commit_offset(CHECK_GROUP, OP_TOPIC, 0, new_op)
        return sent

    async def _put_back(self, msg: MessageExt, checks: int) -> MessageExt | None:
        props = dict(msg.properties)
        props[CHECK_TIMES] = str(checks)
        copy = dataclasses.replace(msg, properties=java_hashmap_ordered(props), properties_bytes=None, store_timestamp=int(time.time() * 1000))
        try:
            outcome = await self._put([copy])
        except Exception as exc:  # noqa: BLE001 - retried next round
            log.warning("putting half message %d back failed: %s", msg.commitlog_offset, exc)
            return None
        copy.commitlog_offset = outcome.physical_offsets[0]
        copy.queue_offset = outcome.queue_offsets[0]
        return copy

    def _send_check(self, half: MessageExt) -> int:
        group = half.properties.get(PGROUP, "")
        channel = self.producer_channel(group)
        if channel is None:
            self.counters["noProducer"] += 1
            log.warning("no producer of group %s online to check half message %d; checked again later",
                        group, half.commitlog_offset)
            return 0
        uniq = half.properties.get(UNIQ_KEY, "")
        header = {"tranStateTableOffset": half.queue_offset, "commitLogOffset": half.commitlog_offset,
                  "msgId": uniq, "transactionId": uniq, "offsetMsgId": half.msg_id}
        check = dataclasses.replace(half, topic=half.properties.get(REAL_TOPIC, half.topic),
                                    queue_id=int(half.properties.get(REAL_QID, "0") or 0))
        body = self.encode_check(check) if self.encode_check is not None else b""
        channel(CHECK_TRANSACTION_STATE, header, body)
        self.counters["checks"] += 1
        return 1

    async def _discard(self, msg: MessageExt) -> None:
        copy = dataclasses.replace(msg, topic=MAX_TIME_TOPIC, queue_id=0, properties_bytes=None)
        try:
            await self._put([copy])
        except Exception as exc:  # noqa: BLE001 - logged; the half stays discarded from checking
            log.error("could not keep discarded half message %d in %s: %s", msg.commitlog_offset, MAX_TIME_TOPIC, exc)
        self.counters["discarded"] += 1
        log.warning("half message %d (group %s) checked %s times: discarded to %s", msg.commitlog_offset,
                    msg.properties.get(PGROUP), msg.properties.get(CHECK_TIMES), MAX_TIME_TOPIC)

    def status(self) -> dict[str, Any]:
        cq = self.store.find_consume_queue(HALF_TOPIC, 0)
        return {"running": self.running, "halfQueueMax": cq.max_offset_in_queue if cq is not None else 0,
                "checkOffset": self._queue_offset(HALF_TOPIC), **self.counters}

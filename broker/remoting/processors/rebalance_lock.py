"""RebalanceLockManager + LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: the queue locks of orderly consumers.

Rules (apache/rocketmq 4.9.8 ``RebalanceLockManager`` and ``AdminBrokerProcessor.lockBatchMQ``):
- A consumer group's queue (topic, brokerName, queueId) is held by at most one client id at a
  time. A lock lives ``lock_max_live_ms`` (60 s, Apache's ``rocketmq.broker.rebalance.
  lockMaxLiveTime``) after its holder last locked it; an orderly Java consumer re-locks every
  20 s (``lockMQPeriodically``), so a dead consumer's queues pass to another after a minute.
- LOCK_BATCH_MQ (41), body LockBatchRequestBody ``{consumerGroup, clientId, mqSet:[{topic,
  brokerName, queueId}]}``: for each queue, granted when it is free, already held by this client,
  or its lock has expired (then it changes hands, logged); refused when another client holds
  it. Answer SUCCESS with LockBatchResponseBody ``{"lockOKMQSet": [...]}``, the queues granted.
- UNLOCK_BATCH_MQ (42), body UnlockBatchRequestBody (same fields): releases the queues this
  client holds; a queue held by another client is left alone (logged). Answer SUCCESS.
- Like Apache, the locks are in the broker's memory only: a restart or a DLedger leader change
  starts with none, and the consumers lock again within their 20 s period.
- Ours, beyond Apache: bounded. One request names at most :data:`MAX_QUEUES_PER_REQUEST` queues
  (more is a SYSTEM_ERROR naming the limit); the table holds at most ``max_entries`` locks: when
  it is full, expired locks are purged, and a queue that still does not fit is not granted (the
  client retries on its next period), logged at a bounded rate. A body that is not the JSON
  above is a SYSTEM_ERROR naming the field, never a traceback.

Theory of operation: :class:`RebalanceLockManager` is a pure table ``group -> queue ->
(clientId, lastUpdateMs)`` with the clock passed in, so its tests need no sleeps;
:class:`RebalanceLockProcessor` decodes the bodies and answers.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.common import HandlerRegistry, Processor, RemotingContext
from broker.remoting.server import RemotingConnection
from dledger.ratelog import RateLimitedLog

log = logging.getLogger("broker.rebalance_lock")

LOCK_MAX_LIVE_MS = 60_000
MAX_QUEUES_PER_REQUEST = 16_384
MAX_LOCK_ENTRIES = 262_144

Queue = tuple[str, str, int]  # (topic, brokerName, queueId), MessageQueue's identity


@dataclass
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, lock_max_live_ms: int = LOCK_MAX_LIVE_MS, max_entries: int = MAX_LOCK_ENTRIES,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.lock_max_live_ms = lock_max_live_ms
        self.max_entries = max_entries
        self.clock_ms = clock_ms
        self.table: dict[str, dict[Queue, LockEntry]] = {}
        self.entries = 0
        self._log = RateLimitedLog(log, burst=20, window_s=10.0)

    def _expired(self, e: LockEntry, now: int) -> bool:
        return now - e.last_update_ms > self.lock_max_live_ms

    def try_lock_batch(self, group: str, queues: Iterable[Queue], client_id: str) -> list[Queue]:
        """The queues of ``queues`` that ``client_id`` holds after the call, in the order given."""
        now = self.clock_ms()
        granted: list[Queue] = []
        for q in queues:
            e = self.table.get(group, {}).get(q)
            if e is None:
                if self.entries >= self.max_entries and not self._purge_expired(now):
                    self._log.warning("lock-table-full", "lock table full (%d locks): %s of group %s not granted to %s",
                                      self.max_entries, q, group, client_id)
                    continue
                self.table.setdefault(group, {})[q] = LockEntry(client_id, now)  # after the purge
                self.entries += 1
                granted.append(q)
            elif e.client_id == client_id or self._expired(e, now):
                if e.client_id != client_id:
                    self._log.warning("lock-expired", "tryLockBatch, message queue lock expired, I got it. Group: %s "
                                      "OldClientId: %s NewClientId: %s %s", group, e.client_id, client_id, q)
                    e.client_id = client_id
                e.last_update_ms = now
                granted.append(q)
        return granted

    def unlock_batch(self, group: str, queues: Iterable[Queue], client_id: str) -> int:
        """Release the queues ``client_id`` holds; the number released."""
        locks = self.table.get(group)
        if locks is None:
            return 0
        released = 0
        for q in queues:
            e = locks.get(q)
            if e is not None and e.client_id == client_id:
                del locks[q]
                self.entries -= 1
                released += 1
            elif e is not None:
                self._log.warning("unlock-by-other", "unlockBatch, but mq locked by other client: %s, Group: %s %s %s",
                               e.client_id, group, q, client_id)
        if not locks:
            del self.table[group]
        return released

    def holder(self, group: str, q: Queue) -> str | None:
        """The live holder of a queue (None when free or expired): for status and tests."""
        e = self.table.get(group, {}).get(q)
        return e.client_id if e is not None and not self._expired(e, self.clock_ms()) else None

    def _purge_expired(self, now: int) -> bool:
        """Drop every expired lock; True when that made room."""
        for group in list(self.table):
            locks = self.table[group]
            for q in [q for q, e in locks.items() if self._expired(e, now)]:
                del locks[q]
                self.entries -= 1
            if not locks:
                del self.table[group]
        return self.entries < self.max_entries


class LockBodyError(ValueError):
    pass


def parse_lock_body(body: bytes | None) -> tuple[str, str, list[Queue]]:
    """(consumerGroup, clientId, queues) of a Lock/UnlockBatchRequestBody, or LockBodyError."""
    try:
        doc = json.loads(body or b"")
    except ValueError as exc:
        raise LockBodyError(f"the lock request body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise LockBodyError("the lock request body is not a JSON object")
    group, client_id, mq_set = doc.get("consumerGroup"), doc.get("clientId"), doc.get("mqSet") or []
    if not isinstance(group, str) or not group:
        raise LockBodyError("the lock request body has no consumerGroup")
    if not isinstance(client_id, str) or not client_id:
        raise LockBodyError("the lock request body has no clientId")
    if not isinstance(mq_set, list):
        raise LockBodyError("mqSet of the lock request body is not a list")
    if len(mq_set) > MAX_QUEUES_PER_REQUEST:
        raise LockBodyError(f"the lock request names {len(mq_set)} queues, more than {MAX_QUEUES_PER_REQUEST}")
    queues: list[Queue] = []
    for mq in mq_set:
        try:
            queues.append((str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])))
        except (KeyError, TypeError, ValueError):
            raise LockBodyError(f"a queue of mqSet is not {{topic, brokerName, queueId}}: {str(mq)[:80]}") from None
    return group, client_id, queues


def queue_json(q: Queue) -> dict[str, Any]:
    return {"brokerName": q[1], "queueId": q[2], "topic": q[0]}


class RebalanceLockProcessor(Processor):
    def __init__(self, ctx: RemotingContext, locks: RebalanceLockManager | None = None) -> None:
        super().__init__(ctx)
        self.locks = locks or RebalanceLockManager()

    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.LOCK_BATCH_MQ, self.lock_batch_mq)
        server.register(RC.UNLOCK_BATCH_MQ, self.unlock_batch_mq)

    async def lock_batch_mq(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            group, client_id, queues = parse_lock_body(cmd.body)
        except LockBodyError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        granted = self.locks.try_lock_batch(group, queues, client_id)
        body = json.dumps({"lockOKMQSet": [queue_json(q) for q in granted]}, separators=(",", ":")).encode()
        return cmd.response(R.SUCCESS, None, body=body)

    async def unlock_batch_mq(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            group, client_id, queues = parse_lock_body(cmd.body)
        except LockBodyError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        self.locks.unlock_batch(group, queues, client_id)
        return cmd.response(R.SUCCESS)

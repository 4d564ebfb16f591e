"""PutCoalescer: concurrent produce requests travel to a DLedger store as one batch put.

Rules:
- Only for the DLedger commitlog, where every put crosses to the DLedger loop thread and back
  and becomes a DLedger append: puts that arrive in the same event-loop iteration (many HTTP
  requests are parsed per iteration under load) are concatenated into one
  ``put_messages_async`` call. Every message still becomes its own DLedger entry with its own
  queue offset (assigned per topic/queue by the leader's put path); a request's messages stay
  contiguous and in order. One thread hop each way and one DLedger batch replace one per
  request, which is where the leader's CPU went (group commit, as RocketMQ's GroupCommitService).
- The merged batch commits as a whole (the DLedger commit index is monotonic), so each request
  gets the batch's status with its own slice of the append result (offsets, ids, bytes).
- Isolation: if the merged put is refused for a reason that may belong to one message only
  (MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED; nothing was stored), each request is retried on
  its own, so one bad request never fails its neighbours. Requests with delayed messages (the
  store rewrites their topic) are never merged.
- Bounded: at most ``max_messages`` messages or ``max_bytes`` of bodies per merged put.

Theory of operation: :meth:`put` appends ``(messages, future)`` to the pending list and, if no
drain is scheduled, schedules :meth:`_drain` with ``call_soon`` (it runs after the callbacks
already ready in this iteration). The drain submits one merged put as a task per chunk and
resolves each request's future from the result.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Sequence

from broker.store.message import PROPERTY_DELAY_TIME_LEVEL, MessageExt, encoded_length
from broker.store.put_result import AppendMessageResult, PutMessageResult, PutMessageStatus

log = logging.getLogger("broker.store")

PutFn = Callable[[list[MessageExt]], Awaitable[PutMessageResult]]
_ISOLATE = (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)


class PutCoalescer:
    def __init__(self, put: PutFn, *, max_messages: int = 512, max_bytes: int = 2 << 20) -> None:
        self._put = put
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._pending: list[tuple[list[MessageExt], asyncio.Future[PutMessageResult]]] = []
        self._scheduled = False
        self.merged_puts = 0
        self.merged_requests = 0

    async def put(self, msgs: Sequence[MessageExt]) -> PutMessageResult:
        msgs = list(msgs)
        if any(m.properties.get(PROPERTY_DELAY_TIME_LEVEL) for m in msgs):
            return await self._put(msgs)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageResult] = loop.create_future()
        self._pending.append((msgs, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._drain)
        return await fut

    def _drain(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        chunk: list[tuple[list[MessageExt], asyncio.Future[PutMessageResult]]] = []
        n = size = 0
        for item in pending:
            k, b = len(item[0]), sum(len(m.body) for m in item[0])
            if chunk and (n + k > self.max_messages or size + b > self.max_bytes):
                self._submit(chunk)
                chunk, n, size = [], 0, 0
            chunk.append(item)
            n, size = n + k, size + b
        if chunk:
            self._submit(chunk)

    def _submit(self, chunk: list[tuple[list[MessageExt], asyncio.Future[PutMessageResult]]]) -> None:
        asyncio.get_running_loop().create_task(self._run(chunk))

    async def _run(self, chunk: list[tuple[list[MessageExt], asyncio.Future[PutMessageResult]]]) -> None:
        try:
            if len(chunk) == 1:
                msgs, fut = chunk[0]
                _resolve(fut, await self._put(msgs))
                return
            merged = [m for msgs, _ in chunk for m in msgs]
            result = await self._put(merged)
            self.merged_puts += 1
            self.merged_requests += len(chunk)
            if result.status in _ISOLATE and result.append_result is None:
                for msgs, fut in chunk:  # nothing stored: find out whose message it was
                    _resolve(fut, await self._put(msgs))
                return
            i = 0
            for msgs, fut in chunk:
                _resolve(fut, _slice(result, i, msgs))
                i += len(msgs)
        except BaseException as exc:  # noqa: BLE001 - every waiting request gets an answer
            for _, fut in chunk:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise


def _resolve(fut: asyncio.Future[PutMessageResult], result: PutMessageResult) -> None:
    if not fut.done():
        fut.set_result(result)


def _slice(result: PutMessageResult, i: int, msgs: list[MessageExt]) -> PutMessageResult:
    """The part of a merged put's result that belongs to messages ``i .. i+len(msgs)-1``."""
    ar = result.append_result
    if ar is None:
        return PutMessageResult(result.status, None, result.error, dict(result.extra))
    j = i + len(msgs)
    phys = list(ar.physical_offsets[i:j])
    sizes = [encoded_length(m) for m in msgs]
    part = AppendMessageResult(
        wrote_offset=phys[0], wrote_bytes=sum(sizes), store_timestamp=ar.store_timestamp,
        logics_offset=ar.queue_offsets[i], msg_num=len(msgs), physical_offsets=phys,
        queue_offsets=list(ar.queue_offsets[i:j]), store_hosts=list(ar.store_hosts[i:j]),
        end_offset=phys[-1] + sizes[-1],
    )
    return PutMessageResult(result.status, part, result.error, dict(result.extra))


def coalescer_for(store: Any) -> PutCoalescer | None:
    """A coalescer for a DLedger-mode store, None for the classic commitlog (it batches itself)."""
    if not getattr(getattr(store, "commitlog", None), "is_dledger", False):
        return None
    return PutCoalescer(lambda msgs: store.put_messages_async(msgs))

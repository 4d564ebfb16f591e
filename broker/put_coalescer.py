"""PutCoalescer: concurrent produce requests travel to the store as one batch put.

Rules:
- Puts that arrive in the same event-loop iteration (a Java client multiplexes all its threads
  over one connection, and many requests are parsed per iteration under load) are concatenated
  into one put. DLedger commitlog: every put crosses to the DLedger loop thread and back and
  becomes a DLedger append. Classic commitlog (issue 22): one ``put_messages_async`` per merged
  put, so one put-lock section, one flush request and one slave-ack wait serve the whole turn. Every message still becomes its own DLedger entry with its own
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
already ready in this iteration). The drain submits one merged put per chunk and resolves each
request's future from the result. With a ``submit`` function (a DLedger store:
:func:`coalescer_for`) the drain hands the chunk to the DLedger loop itself — the store's put
checks, then ``DLedgerCommitLog.submit_put`` — and the commit comes back in one
``call_soon_threadsafe`` that resolves every request of the chunk: no task, coroutine chain or
``wrap_future`` per merged put, and two fewer loop iterations between a request and its append
and between the commit and its answer. Without one (or for a lone retried request) the
awaitable ``put`` function runs in a task.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import TYPE_CHECKING, Awaitable, Callable, Final, Sequence, Union, cast

from broker.store.message import PROPERTY_DELAY_TIME_LEVEL, MessageExt, encoded_length
from broker.store.put_result import AppendMessageResult, PutMessageResult, PutMessageStatus

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.dledger_commitlog import DLedgerCommitLog
    from broker.store.message_store import DefaultMessageStore

log = logging.getLogger("broker.store")

PutFn = Callable[[list[MessageExt]], Awaitable[PutMessageResult]]
#: Starts a put without awaiting: an immediate answer, or a future resolved from any thread.
SubmitFn = Callable[[list[MessageExt]], Union[PutMessageResult, "concurrent.futures.Future[PutMessageResult]"]]
Chunk = list[tuple[list[MessageExt], "asyncio.Future[PutMessageResult]"]]
_ISOLATE: Final = (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)


class PutCoalescer:
    def __init__(self, put: PutFn, *, max_messages: int = 512, max_bytes: int = 2 << 20,
                 submit: SubmitFn | None = None) -> None:
        self._put = put
        self._submit_fn = submit
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._pending: list[tuple[list[MessageExt], asyncio.Future[PutMessageResult]]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop puts arrive on, and its thread
        self._loop_thread = 0
        self.merged_puts = 0
        self.merged_requests = 0

    async def put(self, msgs: Sequence[MessageExt]) -> PutMessageResult:
        if type(msgs) is not list:
            msgs = list(msgs)
        for m in msgs:
            if PROPERTY_DELAY_TIME_LEVEL in m.properties and m.properties[PROPERTY_DELAY_TIME_LEVEL]:
                return await self._put(msgs)
        loop = self._running_loop()
        fut: asyncio.Future[PutMessageResult] = loop.create_future()
        self._pending.append((msgs, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._drain)
        return await fut

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """``asyncio.get_running_loop()`` without its per-call ``getpid()`` system call (CPython
        3.11): the loop of the last put while it is still running in this thread (a running loop
        runs every call made in its thread); else asked again (a new loop, another thread)."""
        loop = self._loop
        ident = threading.get_ident()
        if loop is None or ident != self._loop_thread or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
            self._loop_thread = ident
        return loop

    def _drain(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        chunk: list[tuple[list[MessageExt], asyncio.Future[PutMessageResult]]] = []
        n = size = 0
        for item in pending:
            msgs = item[0]
            k = len(msgs)
            b = len(msgs[0].body) if k == 1 else sum(len(m.body) for m in msgs)
            if chunk and (n + k > self.max_messages or size + b > self.max_bytes):
                self._submit(chunk)
                chunk, n, size = [], 0, 0
            chunk.append(item)
            n, size = n + k, size + b
        if chunk:
            self._submit(chunk)

    def _submit(self, chunk: Chunk) -> None:
        if self._submit_fn is None:
            self._running_loop().create_task(self._run(chunk))
            return
        merged = chunk[0][0] if len(chunk) == 1 else [m for msgs, _ in chunk for m in msgs]
        try:
            out = self._submit_fn(merged)
        except Exception as exc:  # noqa: BLE001 - every waiting request gets an answer
            _fail(chunk, exc)
            return
        if isinstance(out, PutMessageResult):
            self._complete(chunk, out)
            return
        loop = self._running_loop()

        def done(f: "concurrent.futures.Future[PutMessageResult]") -> None:  # any thread
            try:
                loop.call_soon_threadsafe(self._completed, chunk, f)
            except RuntimeError:  # the broker loop is closed: nobody waits any more
                pass

        out.add_done_callback(done)

    def _completed(self, chunk: Chunk, f: "concurrent.futures.Future[PutMessageResult]") -> None:
        try:
            result = f.result()
        except BaseException as exc:  # noqa: BLE001 - cancelled or failed: answer everyone
            _fail(chunk, exc if isinstance(exc, Exception) else RuntimeError(f"put failed: {exc!r}"))
            return
        self._complete(chunk, result)

    def _complete(self, chunk: Chunk, result: PutMessageResult) -> None:
        """Answer the requests of a merged put submitted with ``submit`` (broker loop)."""
        if len(chunk) == 1:
            _resolve(chunk[0][1], result)
            return
        self.merged_puts += 1
        self.merged_requests += len(chunk)
        if result.status in _ISOLATE and result.append_result is None:
            for item in chunk:  # nothing stored: find out whose message it was, each on its own
                self._submit([item])
            return
        i = 0
        for msgs, fut in chunk:
            _resolve(fut, _slice(result, i, msgs))
            i += len(msgs)

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


def _fail(chunk: Chunk, exc: Exception) -> None:
    for _, fut in chunk:
        if not fut.done():
            fut.set_exception(exc)


def _slice(result: PutMessageResult, i: int, msgs: list[MessageExt]) -> PutMessageResult:
    """The part of a merged put's result that belongs to messages ``i .. i+len(msgs)-1``."""
    ar = result.append_result
    if ar is None:
        return PutMessageResult(result.status, None, result.error, dict(result.extra))
    j = i + len(msgs)
    phys = list(ar.physical_offsets[i:j])
    # DLedger results carry each record's size: no second encoding
    sizes = list(ar.sizes[i:j]) if ar.sizes else [encoded_length(m) for m in msgs]
    part = AppendMessageResult(
        wrote_offset=phys[0], wrote_bytes=sum(sizes), store_timestamp=ar.store_timestamp,
        logics_offset=ar.queue_offsets[i], msg_num=len(msgs), physical_offsets=phys,
        queue_offsets=list(ar.queue_offsets[i:j]), store_hosts=list(ar.store_hosts[i:j]),
        end_offset=phys[-1] + sizes[-1], sizes=sizes,
    )
    return PutMessageResult(result.status, part, result.error, dict(result.extra))


def coalescer_for(store: "DefaultMessageStore") -> PutCoalescer | None:
    """A coalescer for the store's commitlog: DLedger puts are submitted to the DLedger loop
    without a task; classic puts run as one ``put_messages_async`` task per merged put (one
    append under the put lock, one flush request, one replica wait for the whole turn)."""
    commitlog = store.commitlog
    if commitlog is None:
        return None
    if not commitlog.is_dledger:
        return PutCoalescer(lambda msgs: store.put_messages_async(msgs))
    return PutCoalescer(lambda msgs: store.put_messages_async(msgs),
                        submit=_dledger_submit(store, cast("DLedgerCommitLog", commitlog)))


def _dledger_submit(store: "DefaultMessageStore", commitlog: "DLedgerCommitLog") -> SubmitFn:
    """What ``DefaultMessageStore.put_messages_async`` does for a DLedger commitlog (the store's
    put checks, then ``submit_put``: encode here, append on the DLedger loop), without awaiting."""

    def submit(msgs: list[MessageExt]) -> PutMessageResult | concurrent.futures.Future[PutMessageResult]:
        prepared, error = store.prepare_put(msgs)  # role, disk space, topic, delay rewrite
        if error is not None:
            return error
        assert prepared is not None
        return commitlog.submit_put(prepared)

    return submit

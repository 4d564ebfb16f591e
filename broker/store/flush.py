"""CommitLog flush policies: FlushRealTimeService (ASYNC_FLUSH) and GroupCommitService (SYNC_FLUSH).

Rules:
- ASYNC_FLUSH: a put returns once its bytes are in the mapped file (page cache). A background
  thread flushes every ``flushIntervalCommitLog`` ms, when at least ``flushCommitLogLeastPages``
  dirty pages are waiting, or everything every ``flushCommitLogThoroughInterval`` ms. A crash of
  the process loses nothing (the kernel owns the pages); a crash of the machine loses at most
  the unflushed tail.
- SYNC_FLUSH: a put is acknowledged (PUT_OK) only after a flush that covers its last byte.
  Requests are *grouped*: the flusher swaps the whole pending list, makes one ``fdatasync`` pass
  that covers the highest requested offset, and completes every request it covered, so N
  concurrent producers cost one disk sync, not N. A request not covered within
  ``syncFlushTimeout`` ms completes with FLUSH_DISK_TIMEOUT (the bytes may still become durable).
- After every flush the checkpoint's ``physic_msg_timestamp`` is moved to the store timestamp
  of the last message known flushed, and ``physic_flushed_offset`` to the flushed offset;
  recovery uses them to tell flushed data from a torn tail.
- Durability waits are ``concurrent.futures.Future``s: a thread blocks on ``result(timeout)``,
  an asyncio caller awaits ``asyncio.wrap_future``; the fsync itself never runs on the event loop.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Protocol

from broker.store.mapped_file_queue import MappedFileQueue
from broker.store.put_result import PutMessageStatus

log = logging.getLogger(__name__)


class _Checkpoint(Protocol):
    physic_msg_timestamp: int
    physic_flushed_offset: int


class FlushService:
    """Common thread plumbing; subclasses implement :meth:`_run_once`."""

    name = "FlushService"

    def __init__(self, queue: MappedFileQueue, checkpoint: _Checkpoint | None) -> None:
        self.queue = queue
        self.checkpoint = checkpoint
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self.flush_count = 0
        # the queue's positions mean something only once recovery has set them (load maps every
        # file as full): until then a flush (e.g. the shutdown of a store whose recovery refused)
        # must not publish an offset to the checkpoint
        self.recovered = False

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wakeup(self) -> None:
        self._wakeup.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._run_once()
            except Exception:  # noqa: BLE001 - a flush thread must not die silently
                log.exception("%s iteration failed", self.name)
                time.sleep(0.01)
        self._final_flush()

    def _run_once(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _flush(self, everything: bool) -> None:
        if everything:
            self.queue.flush_all()
        else:
            self.queue.flush()
        self.flush_count += 1
        if self.checkpoint is not None and self.recovered:
            if self.queue.store_timestamp:
                self.checkpoint.physic_msg_timestamp = self.queue.store_timestamp
            # read after the flush returned: every byte below it is durable; published before any
            # SYNC_FLUSH put it covers is acknowledged, so recovery never calls an ack a torn tail
            self.checkpoint.physic_flushed_offset = self.queue.flushed_where
            publish = getattr(self.checkpoint, "publish", None)
            if publish is not None:
                publish()

    def _final_flush(self) -> None:
        self._flush(everything=True)

    def shutdown(self) -> None:
        self._stop.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        else:
            self._final_flush()


class FlushRealTimeService(FlushService):
    """ASYNC_FLUSH: periodic background flush."""

    name = "FlushRealTimeService"

    def __init__(self, queue: MappedFileQueue, checkpoint: _Checkpoint | None,
                 interval_ms: int = 500, least_pages: int = 4, thorough_interval_ms: int = 10_000,
                 page_size: int = 4096) -> None:
        super().__init__(queue, checkpoint)
        self.interval = interval_ms / 1000.0
        self.least_bytes = least_pages * page_size
        self.thorough_interval = thorough_interval_ms / 1000.0
        self._last_thorough = time.monotonic()

    def _run_once(self) -> None:
        self._wakeup.wait(self.interval)
        self._wakeup.clear()
        now = time.monotonic()
        thorough = now - self._last_thorough >= self.thorough_interval
        if thorough:
            self._last_thorough = now
        if thorough or self.queue.remain_how_many_data_to_flush() >= self.least_bytes:
            self._flush(everything=True)


class GroupCommitRequest:
    """A producer's wait for ``next_offset`` to be durable."""

    __slots__ = ("next_offset", "future", "deadline")

    def __init__(self, next_offset: int, timeout_ms: int) -> None:
        self.next_offset = next_offset
        self.future: Future[PutMessageStatus] = Future()
        self.deadline = time.monotonic() + timeout_ms / 1000.0


def _settle(req: GroupCommitRequest, status: PutMessageStatus) -> None:
    """Complete a waiting put. A waiter that gave up first (an async put's own timeout cancels
    the future it awaited) is skipped: before, its cancelled future raised here and every
    request after it in the group stayed unanswered until its own timeout (a flush that took
    longer than the put's timeout, i.e. a slow disk, turned one timeout into a group of them)."""
    try:
        req.future.set_result(status)
    except InvalidStateError:
        pass


class GroupCommitService(FlushService):
    """SYNC_FLUSH: one fdatasync pass per group of waiting puts."""

    name = "GroupCommitService"

    def __init__(self, queue: MappedFileQueue, checkpoint: _Checkpoint | None,
                 sync_flush_timeout_ms: int = 5000) -> None:
        super().__init__(queue, checkpoint)
        self.timeout_ms = sync_flush_timeout_ms
        self._lock = threading.Lock()
        self._requests: list[GroupCommitRequest] = []
        self.groups = 0  # flush passes that completed at least one request (for benchmarks)

    def pending(self) -> list[GroupCommitRequest]:
        """The requests waiting for the next flush pass (a copy)."""
        with self._lock:
            return list(self._requests)

    def put_request(self, next_offset: int) -> GroupCommitRequest:
        req = GroupCommitRequest(next_offset, self.timeout_ms)
        if self.queue.flushed_where >= next_offset:
            req.future.set_result(PutMessageStatus.PUT_OK)
            return req
        with self._lock:
            self._requests.append(req)
        self._wakeup.set()
        return req

    def _run_once(self) -> None:
        self._wakeup.wait(0.01)
        self._wakeup.clear()
        with self._lock:
            batch, self._requests = self._requests, []
        if not batch:
            return
        self._flush(everything=True)
        self._complete(batch)

    def _complete(self, batch: list[GroupCommitRequest]) -> None:
        flushed = self.queue.flushed_where
        now = time.monotonic()
        retry: list[GroupCommitRequest] = []
        for req in batch:
            if flushed >= req.next_offset:
                _settle(req, PutMessageStatus.PUT_OK)
            elif now >= req.deadline:
                _settle(req, PutMessageStatus.FLUSH_DISK_TIMEOUT)
            else:
                retry.append(req)
        self.groups += 1
        if retry:
            with self._lock:
                self._requests = retry + self._requests
            self._wakeup.set()

    def _final_flush(self) -> None:
        super()._final_flush()
        with self._lock:
            batch, self._requests = self._requests, []
        flushed = self.queue.flushed_where
        for req in batch:
            _settle(req, PutMessageStatus.PUT_OK if flushed >= req.next_offset else PutMessageStatus.FLUSH_DISK_TIMEOUT)

    @staticmethod
    def wait(req: GroupCommitRequest) -> PutMessageStatus:
        """Block until the request completes or its deadline passes."""
        remaining = max(0.0, req.deadline - time.monotonic())
        try:
            return req.future.result(timeout=remaining + 0.05)
        except TimeoutError:
            return PutMessageStatus.FLUSH_DISK_TIMEOUT

"""HAService's GroupTransferService side without a slave process: acks, one shared deadline timer,
and which puts wake the transfer (issue 22, task H6).

A stub connection stands in for an admitted slave (it counts wake-ups and says how far it has
sent); the service listens on a free port of 127.0.0.1 only because ``start()`` binds one.
"""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from broker.ha.service import HAService
from broker.ha.settings import HASettings
from broker.store.put_result import PutMessageStatus


class StubConnection:
    def __init__(self) -> None:
        self.reported = True
        self.close_reason = None
        self.authenticated = False
        self.wakes = 0
        self.sent_to = 0

    def wake(self) -> None:
        self.wakes += 1

    def behind(self, offset: int) -> bool:
        return self.sent_to < offset

    def close(self, reason: str) -> None:
        self.close_reason = reason


class StubCommitLog:
    replica_hook = None
    max_offset = 1 << 20
    min_offset = 0
    mapped_file_size = 1 << 20


async def _service(role: str = "SYNC_MASTER") -> tuple[HAService, StubConnection]:
    svc = HAService(StubCommitLog(), HASettings(broker_role=role, sync_flush_timeout=5000), host="127.0.0.1", port=0)
    await svc.start()
    conn = StubConnection()
    svc.connections.append(conn)  # type: ignore[arg-type]
    return svc, conn


@pytest.mark.timeout(20)
async def test_waiters_resolve_by_ack_and_time_out_in_deadline_order() -> None:
    svc, _ = await _service()
    try:
        long_wait = svc.request_slave_ack(100, timeout_ms=5000)
        short = svc.request_slave_ack(200, timeout_ms=50)  # earlier deadline than the armed timer
        mid = svc.request_slave_ack(300, timeout_ms=300)
        svc.on_slave_progress(100)
        await asyncio.sleep(0)
        assert long_wait.result() is PutMessageStatus.PUT_OK
        t0 = time.monotonic()
        assert await asyncio.wait_for(short, 2.0) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert time.monotonic() - t0 < 1.0 and not mid.done()  # the 300 ms one is still waiting
        assert await asyncio.wait_for(mid, 2.0) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert svc.push2slave_max_offset == 100
        late = svc.request_slave_ack(100)  # already acknowledged
        assert late.result() is PutMessageStatus.PUT_OK
        again = svc.request_slave_ack(400, timeout_ms=5000)
        svc.on_slave_progress(400)  # an ack after timeouts still answers a later waiter
        await asyncio.sleep(0)
        assert again.result() is PutMessageStatus.PUT_OK
    finally:
        await svc.shutdown()


@pytest.mark.timeout(20)
async def test_replica_hook_wakes_once_and_a_sent_offset_wakes_nothing() -> None:
    svc, conn = await _service()
    try:
        fut = svc.replica_hook(SimpleNamespace(end_offset=500, wrote_offset=0, wrote_bytes=500))
        assert conn.wakes == 1 and fut is not None and not fut.done()
        conn.sent_to = 500  # the write loop sent the put's bytes
        svc.notify_put(500)  # the broker's after-put hook: nothing left to send
        assert conn.wakes == 1
        svc.notify_put(501)
        assert conn.wakes == 2
        svc.on_slave_progress(500)
        assert await asyncio.wait_for(asyncio.wrap_future(fut), 2.0) is PutMessageStatus.PUT_OK  # type: ignore[arg-type]
        waiting = svc.replica_hook(SimpleNamespace(end_offset=900, wrote_offset=500, wrote_bytes=400))
        assert waiting is not None and svc.stop_waiting() == 1
        assert waiting.result() is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    finally:
        await svc.shutdown()


@pytest.mark.timeout(20)
async def test_async_master_hook_wakes_without_a_future() -> None:
    svc, conn = await _service("ASYNC_MASTER")
    try:
        assert svc.replica_hook(SimpleNamespace(end_offset=10, wrote_offset=0, wrote_bytes=10)) is None
        assert conn.wakes == 1
    finally:
        await svc.shutdown()

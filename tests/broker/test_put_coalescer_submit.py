"""PutCoalescer's direct-submit path (no store): one submit per merged put, answers from any
thread, immediate refusals, isolation retries and failures reach every waiting request."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from broker.put_coalescer import PutCoalescer
from broker.store.message import MessageExt
from broker.store.put_result import AppendMessageResult, PutMessageResult, PutMessageStatus


def _msg(topic: str, body: bytes) -> MessageExt:
    return MessageExt(topic=topic, body=body, queue_id=0, born_host=("127.0.0.1", 1), store_host=("127.0.0.1", 10911))


def _ok(msgs: list[MessageExt]) -> PutMessageResult:
    sizes = [100 + len(m.body) for m in msgs]
    phys, pos = [], 1000
    for n in sizes:
        phys.append(pos)
        pos += n + 48
    ar = AppendMessageResult(wrote_offset=phys[0], wrote_bytes=sum(sizes), store_timestamp=1, logics_offset=0,
                             msg_num=len(msgs), physical_offsets=phys, queue_offsets=list(range(len(msgs))),
                             store_hosts=[m.store_host for m in msgs], end_offset=phys[-1] + sizes[-1])
    return PutMessageResult(PutMessageStatus.PUT_OK, ar)


async def _never(msgs: list[MessageExt]) -> PutMessageResult:
    raise AssertionError("the awaitable put must not be used when submit is given")


@pytest.mark.timeout(30)
async def test_one_submit_per_merged_put_answered_from_another_thread() -> None:
    calls: list[int] = []

    def submit(msgs: list[MessageExt]) -> concurrent.futures.Future[PutMessageResult]:
        calls.append(len(msgs))
        fut: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()
        threading.Timer(0.01, fut.set_result, (_ok(msgs),)).start()  # a commit on "the DLedger loop"
        return fut

    co = PutCoalescer(_never, submit=submit)
    requests = [[_msg("T", b"x" * (i + 1)) for _ in range(1 + i % 3)] for i in range(10)]
    results = await asyncio.gather(*(co.put(r) for r in requests))
    assert calls == [sum(len(r) for r in requests)] and (co.merged_puts, co.merged_requests) == (1, 10)
    i = 0
    for req, res in zip(requests, results):
        assert res.ok and res.append_result.queue_offsets == list(range(i, i + len(req)))
        i += len(req)


@pytest.mark.timeout(30)
async def test_immediate_refusal_is_isolated_and_an_error_fails_everyone() -> None:
    def submit(msgs: list[MessageExt]) -> PutMessageResult | concurrent.futures.Future[PutMessageResult]:
        if any(m.topic == "Bad" for m in msgs):
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error="bad topic")
        fut: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()
        fut.set_result(_ok(msgs))
        return fut

    co = PutCoalescer(_never, submit=submit)
    res = await asyncio.gather(co.put([_msg("A", b"1")]), co.put([_msg("Bad", b"2")]), co.put([_msg("C", b"3")]))
    assert [r.status for r in res] == [PutMessageStatus.PUT_OK, PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PUT_OK]

    def broken(msgs: list[MessageExt]) -> PutMessageResult:
        raise OSError("disk on fire")

    co = PutCoalescer(_never, submit=broken)
    out = await asyncio.gather(co.put([_msg("A", b"1")]), co.put([_msg("B", b"2")]), return_exceptions=True)
    assert all(isinstance(r, OSError) for r in out)

    def cancelled(msgs: list[MessageExt]) -> concurrent.futures.Future[PutMessageResult]:
        fut: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()
        fut.cancel()
        return fut

    co = PutCoalescer(_never, submit=cancelled)
    out = await asyncio.gather(co.put([_msg("A", b"1")]), co.put([_msg("B", b"2")]), return_exceptions=True)
    assert all(isinstance(r, Exception) for r in out)

"""PutCoalescer on a real single-node DLedger store: merged puts give every request its own
contiguous offsets, a bad request fails alone, delayed messages are never merged."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.config.conf_file import parse_conf
from tools.procs import free_port
from broker.put_coalescer import PutCoalescer, coalescer_for
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore
from broker.store.put_result import PutMessageStatus


def _store(tmp: Path) -> DefaultMessageStore:
    port = free_port()
    conf = parse_conf("\n".join([
        f"storePathRootDir={tmp}", "mappedFileSizeCommitLog=1048576", "enableDLegerCommitLog=true",
        "dLegerGroup=g", f"dLegerPeers=n0-127.0.0.1:{port}", "dLegerSelfId=n0", "brokerIP1=127.0.0.1",
        "dLegerAllowInsecure=true", "",
    ]))
    store = DefaultMessageStore(conf.store, broker_config=conf.broker)
    store.load()
    store.start()
    assert store.commitlog.wait_leader_ready(10), "single-node group did not elect itself"
    return store


def _msg(topic: str, q: int, body: bytes, **props: str) -> MessageExt:
    return MessageExt(topic=topic, body=body, queue_id=q, properties=dict(props), born_host=("127.0.0.1", 1),
                      store_host=("127.0.0.1", 10911))


@pytest.mark.timeout(60)
async def test_merged_requests_get_their_own_offsets_and_a_bad_one_fails_alone(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        co = coalescer_for(store)
        assert isinstance(co, PutCoalescer)
        requests = [[_msg("TopicCo", i % 2, b"r%d-m%d" % (i, k) * (i + 1)) for k in range(1 + i % 3)] for i in range(24)]
        # 12 requests in one loop iteration: one merged put, results sliced back
        results = list(await asyncio.gather(*(co.put(r) for r in requests[:12])))
        assert (co.merged_puts, co.merged_requests) == (1, 12)
        # a bad request among 12 others: the merged put is refused, each is retried alone
        bad = [_msg("Topic With Space", 0, b"bad")]  # MESSAGE_ILLEGAL in the store's checks
        more = list(await asyncio.gather(*(co.put(r) for r in requests[12:18]), co.put(bad),
                                         *(co.put(r) for r in requests[18:])))
        bad_result = more.pop(6)
        assert bad_result.status is PutMessageStatus.MESSAGE_ILLEGAL and bad_result.append_result is None
        results += more
        next_q = {0: 0, 1: 0}
        for req, res in zip(requests, results):
            assert res.status is PutMessageStatus.PUT_OK
            ar = res.append_result
            q = req[0].queue_id
            assert list(ar.queue_offsets) == list(range(next_q[q], next_q[q] + len(req)))
            next_q[q] += len(req)
            for m, off in zip(req, ar.physical_offsets):
                stored = store.look_message_by_offset(off)
                assert stored is not None and stored.body == m.body and stored.commitlog_offset == off
            last = store.look_message_by_offset(ar.physical_offsets[-1])
            assert ar.end_offset == ar.physical_offsets[-1] + last.store_size
            assert ar.wrote_bytes == sum(store.look_message_by_offset(o).store_size for o in ar.physical_offsets)
        # a delayed message goes alone (the store rewrites its topic)
        before = co.merged_requests
        res = await asyncio.gather(co.put([_msg("TopicCo", 0, b"later", DELAY="1")]), co.put(requests[0]))
        assert all(r.status is PutMessageStatus.PUT_OK for r in res) and co.merged_requests == before
    finally:
        store.shutdown()

"""The store's composed read and put objects read what their owner changes after construction.

``StoreReads`` (the store's parts are made in ``load``), ``DLedgerReads`` (recovery sets the divide
and opens the DLedger store) and ``DLedgerPutPath`` (the server, the loop and ``topic_queue_table``
change with the commitlog's life cycle) are given accessors or their owner, never a copy: each
test changes the owner's value after construction and checks the object answers from the new
one. Pure unit tests over fakes, no files or threads (milliseconds).
"""
from __future__ import annotations

import concurrent.futures
import threading
from types import SimpleNamespace

import pytest

from broker.store.dledger_put import DLedgerPutPath
from broker.store.dledger_reads import DLedgerReads
from broker.store.message import MessageExt
from broker.store.put_result import PutMessageStatus
from broker.store.store_reads import MemberStoppedError, StoreReads
from dledger.core.codes import Code, Role
from dledger.errors import DLedgerError


def _log(max_offset: int, stopped: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(max_offset=max_offset, min_offset=0, confirm_offset=max_offset, flushed_offset=max_offset,
                           member_stopped_reason=stopped, look_message_by_offset=lambda offset, size=None: None)


def test_store_reads_read_the_parts_made_after_them() -> None:
    parts = SimpleNamespace(commitlog=None, cqs=None, index=None, conf=None)
    reads = StoreReads(commitlog=lambda: parts.commitlog, consume_queue_store=lambda: parts.cqs,
                       index_service=lambda: parts.index, broker_config=lambda: parts.conf)
    assert reads.query_message("T", "k") == []  # no index service (messageIndexEnable=false)
    parts.commitlog = _log(10)
    assert (reads.get_max_phy_offset(), reads.get_flushed_where()) == (10, 10)
    parts.commitlog = _log(20, stopped="flush failed")
    assert reads.get_max_phy_offset() == 20
    with pytest.raises(MemberStoppedError, match="flush failed"):
        reads.look_message_by_offset(0)
    parts.conf = SimpleNamespace(http_pull_max_bytes=1234)  # the broker conf is read at the first pull
    assert reads.read_limits.bytes_in_memory == 1234


def test_dledger_reads_follow_the_divide_recovery_sets() -> None:
    old = SimpleNamespace(mapped_file_queue=SimpleNamespace(mapped_files=[object()]))
    owner = SimpleNamespace(divided_commitlog_offset=-1, dledger_store=None, verify_reads=True, node_label="n",
                            corrupt_fix="", corruption=None)
    reads = DLedgerReads(old=old, delay_levels=(1,), log=owner)  # type: ignore[arg-type]
    assert reads.scan_start_of(1000) == 1000 - 48  # no divide yet: the DLedger region's entry header
    assert reads.get_message(1000, 10) is None  # no DLedger store opened yet
    owner.divided_commitlog_offset = 4096
    assert reads.scan_start_of(1000) == 1000  # below the divide: the old region's record itself
    assert reads.entry_size_at(memoryview(b""), 0, 1000) == -1


class _Server:
    def __init__(self) -> None:
        self.role, self.leader_id = Role.LEADER, "n0"
        self.config = SimpleNamespace(address_of=lambda node: f"addr-of-{node}")
        self.sinks: list = []
        self.refuse: DLedgerError | None = None

    def append_batch_then(self, bodies, sink):
        if self.refuse is not None:
            return self.refuse
        self.sinks.append(sink)
        return [i * 1000 for i in range(len(bodies))]


class _InlineLoop:
    def call_soon_threadsafe(self, fn, *args) -> None:
        fn(*args)


def _msgs(n: int) -> list[MessageExt]:
    return [MessageExt(topic="T", queue_id=0, body=b"m%d" % i) for i in range(n)]


def test_dledger_put_path_uses_the_current_server_loop_and_queue_table() -> None:
    owner = SimpleNamespace(server=None, loop=None, table={})
    ready = threading.Event()
    counters = {"puts": 0, "put_messages": 0, "refused": 0, "quorum_timeouts": 0, "outcome_unknown": 0}
    put = DLedgerPutPath(server=lambda: owner.server, loop=lambda: owner.loop, topic_queue_table=lambda: owner.table,
                         leader_ready=ready, counters=counters, max_message_size=4096)

    def submit(n: int = 2):
        fut = put.submit(_msgs(n))
        return fut.result(0) if fut.done() else fut

    res = submit()
    assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "not started" in res.error
    owner.server, owner.loop = _Server(), _InlineLoop()
    res = submit()  # started, not a ready leader: refused naming the leader
    assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and res.extra["leader_addr"] == "addr-of-n0"
    assert counters["refused"] == 1
    ready.set()
    owner.table = {("T", 0): 7}  # rebuilt by the store (recover_topic_queue_table) after construction
    fut = submit()
    assert isinstance(fut, concurrent.futures.Future) and not fut.done()  # completes at commit
    assert owner.table[("T", 0)] == 9
    owner.server.sinks[-1](None, None)
    res = fut.result(0)
    assert res.status is PutMessageStatus.PUT_OK and res.append_result.queue_offsets == [7, 8]
    fut = submit(1)
    owner.server.sinks[-1](None, DLedgerError(Code.WAIT_QUORUM_ACK_TIMEOUT))
    assert fut.result(0).status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and counters["quorum_timeouts"] == 1
    owner.server.refuse = DLedgerError(Code.NOT_LEADER)
    res = submit(1)  # refused before the append: no queue offset consumed
    assert res.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and owner.table[("T", 0)] == 10
    assert counters == {"puts": 2, "put_messages": 3, "refused": 2, "quorum_timeouts": 1, "outcome_unknown": 0}  # one per refusal

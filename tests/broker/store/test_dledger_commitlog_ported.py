"""Ports of RocketMQ's DLedgerCommitlogTest on real stores and real sockets: truncated DLedger
data files, normal and abnormal recovery (incl. a lost ConsumeQueue file), put/get single and
batch with IPv4 and IPv6 hosts (blocking and async), and the committed position of a two-node
group with one node down (two in-process DLedgerServers over TCP)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from broker.store.checkpoint import StoreCheckpoint
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus
from dledger.entry import EntryCorruptionError
from tests.broker.store.test_dledger_commitlog import dledger_store, free_port, msg

FILE_SIZE = 8192
SMALL = dict(mapped_file_size_commit_log=FILE_SIZE, warm_mapped_file_enable=False,
             max_hash_slot_num=1000, max_index_num=4000)
TOPIC = "DLedgerTopic"
V6 = dict(born_host=("::1", 40001), store_host=("fe80::1", 10911))


def open_dl(root: Path, port: int, **kw: Any) -> DefaultMessageStore:
    settings = dict(SMALL)
    settings.update(kw)
    store = dledger_store(root, f"n0-127.0.0.1:{port}", **settings)
    store.load()
    store.start()
    assert store.commitlog.wait_leader_ready(10)
    return store


def put_many(store: DefaultMessageStore, n: int, queues: int = 2) -> list[tuple[int, int, int]]:
    out = []
    for i in range(n):
        res = store.put_message(msg(TOPIC, i % queues, i))
        assert res.ok, res
        out.append((i % queues, res.append_result.queue_offsets[0], res.append_result.wrote_offset))
    return out


def readable(store: DefaultMessageStore, sent: list[tuple[int, int, int]]) -> None:
    assert store.wait_dispatched(10) and store.dispatch_behind_bytes() == 0
    for qid, qo, phy in sent:
        got = store.get_message(TOPIC, qid, qo, 1)
        assert got.status is GetMessageStatus.FOUND and got.physical_offsets == [phy], (qid, qo, got.status)
        assert got.messages[0].queue_offset == qo


def data_files(root: Path) -> list[Path]:
    return sorted((root / "dledger-n0" / "data").iterdir())


def test_truncate_cq_after_deleting_the_newest_data_files(tmp_path: Path) -> None:
    root, port = tmp_path / "s", free_port()
    store = open_dl(root, port)
    try:
        sent = put_many(store, 400)
    finally:
        store.shutdown()
    files = data_files(root)
    assert len(files) >= 8
    cut = int(files[-4].name)
    for f in files[-4:]:
        f.unlink()
    # our recovery refuses to drop committed entries silently (DESIGN §7): the load stops and
    # says why, and the store lock is released
    store = dledger_store(root, f"n0-127.0.0.1:{port}", **SMALL)
    with pytest.raises(EntryCorruptionError, match="committed"):
        store.load()
    # the operator accepts the loss by removing DLedger's checkpoint (Apache truncates silently)
    (root / "dledger-n0" / "checkpoint").unlink()
    for bak in (root / "dledger-n0").glob("checkpoint.*"):
        bak.unlink()
    (root / "abort").touch()
    store = open_dl(root, port)
    try:
        kept = [s for s in sent if s[2] < cut]
        assert 0 < len(kept) < len(sent) and len(data_files(root)) in (len(files) - 4, len(files) - 3)
        readable(store, kept)
        for qid in (0, 1):
            n = sum(1 for s in kept if s[0] == qid)
            assert store.get_max_offset_in_queue(TOPIC, qid) == n  # units beyond the DLedger max truncated
            res = store.put_message(msg(TOPIC, qid, 10_000 + qid))
            assert res.ok and res.append_result.queue_offsets == [n]  # no gap: offsets rebuilt from CQs
    finally:
        store.shutdown()
    # every data file deleted (and the checkpoint): the commitlog is empty, the CQs are kept
    for f in data_files(root):
        f.unlink()
    for f in (root / "dledger-n0").glob("checkpoint*"):
        f.unlink()
    store = dledger_store(root, f"n0-127.0.0.1:{port}", **SMALL)
    store.load()
    try:
        assert store.get_min_phy_offset() == 0 and store.get_max_phy_offset() == 0
        assert store.get_max_offset_in_queue(TOPIC, 0) > 0  # DESIGN §4.4: never destroyed
        got = store.get_message(TOPIC, 0, 0, 1)
        assert got.status is not GetMessageStatus.FOUND  # a stale unit is never served
    finally:
        store.shutdown()


@pytest.mark.parametrize("abnormal", [False, True], ids=["normal", "abnormal"])
def test_recover(tmp_path: Path, abnormal: bool) -> None:
    root, port = tmp_path / "s", free_port()
    store = open_dl(root, port)
    try:
        sent = put_many(store, 300)
        readable(store, sent)
        max_phy = store.get_max_phy_offset()
    finally:
        store.shutdown()
    if abnormal:
        (root / "abort").touch()
    store = open_dl(root, port)
    try:
        assert store.last_exit_ok is not abnormal
        assert store.get_min_phy_offset() == 0 and store.get_max_phy_offset() == max_phy  # fully committed: no barrier
        for qid in (0, 1):
            assert (store.get_min_offset_in_queue(TOPIC, qid), store.get_max_offset_in_queue(TOPIC, qid)) == (0, 150)
        readable(store, sent)
    finally:
        store.shutdown()


def test_abnormal_recovery_redispatches_a_lost_consume_queue_file(tmp_path: Path) -> None:
    root, port = tmp_path / "s", free_port()
    store = open_dl(root, port, mapped_file_size_consume_queue=1040)
    try:
        sent = put_many(store, 200)  # 100 per queue, 52 units per CQ file
        readable(store, sent)
    finally:
        store.shutdown()
    cp = StoreCheckpoint(root / "checkpoint")
    cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = 0
    cp.shutdown()
    (root / "abort").touch()
    lost = root / "consumequeue" / TOPIC / "0" / "00000000000000001040"
    assert lost.exists()
    lost.unlink()
    store = open_dl(root, port, mapped_file_size_consume_queue=1040)
    try:
        assert not store.last_exit_ok
        readable(store, sent)
        assert store.get_max_offset_in_queue(TOPIC, 0) == store.get_max_offset_in_queue(TOPIC, 1) == 100
        assert store.query_message(TOPIC, "k-1")  # the IndexFile was rebuilt by the re-dispatch
    finally:
        store.shutdown()


def _host_msg(i: int) -> MessageExt:
    return msg(TOPIC, 0, i, **(V6 if i % 2 else {}))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_put_and_get_single_and_batch_with_ipv4_and_ipv6_hosts(tmp_path: Path, mode: str) -> None:
    store = open_dl(tmp_path / "s", free_port())

    def put(msgs: list[MessageExt]):
        if mode == "sync":
            return store.put_messages(msgs)
        return asyncio.run(store.put_messages_async(msgs))

    try:
        results = []
        for i in range(10):
            res = put([_host_msg(i)])
            assert res.status is PutMessageStatus.PUT_OK
            assert res.append_result.logics_offset == i
            results.append(res.append_result)
        for b in range(10):
            res = put([_host_msg(100 + 2 * b), _host_msg(101 + 2 * b)])
            ar = res.append_result
            assert res.ok and ar.logics_offset == 10 + 2 * b and ar.queue_offsets == [10 + 2 * b, 11 + 2 * b]
            assert len(ar.msg_id.split(",")) == 2 and ar.wrote_offset == ar.physical_offsets[0]
            assert len(ar.msg_ids[1]) == 56 and len(ar.msg_ids[0]) == 32  # IPv6 store host: 28 bytes
            results.append(ar)
        assert store.wait_dispatched(10)
        got = store.get_message(TOPIC, 0, 0, 64)
        assert got.status is GetMessageStatus.FOUND and got.message_count == 30
        ids = [i for ar in results for i in ar.msg_ids]
        phys = [p for ar in results for p in ar.physical_offsets]
        for k, m in enumerate(got.messages):
            assert (m.queue_offset, m.commitlog_offset, m.msg_id) == (k, phys[k], ids[k])
            assert store.view_message_by_id(ids[k]).queue_offset == k
        assert got.messages[1].born_host == ("::1", 40001) and got.messages[1].store_host == ("fe80::1", 10911)
    finally:
        store.shutdown()


def _wait(cond, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


@pytest.mark.parametrize("hosts", ["ipv4", "ipv6"])
def test_committed_pos_with_one_of_two_peers_down(tmp_path: Path, hosts: str) -> None:
    ports = free_port(), free_port()
    peers = f"n0-127.0.0.1:{ports[0]};n1-127.0.0.1:{ports[1]}"
    dl = {"max_wait_ack_ms": 800, "preferred_leader_ids": "n0"}
    extra = V6 if hosts == "ipv6" else {}

    def node(i: int) -> DefaultMessageStore:
        s = dledger_store(tmp_path / f"n{i}", peers, self_id=f"n{i}", dledger=dl, **SMALL)
        s.load()
        s.start()
        return s

    s0, s1 = node(0), node(1)
    try:
        assert s0.commitlog.wait_leader_ready(15), s0.commitlog.status()
        res = s0.put_message(msg(TOPIC, 0, 0, **extra))
        assert res.ok
        first = res.append_result.wrote_offset
        assert _wait(lambda: s1.look_message_by_offset(first) is not None)  # the follower serves it too
        assert s1.put_message(msg(TOPIC, 0, 1)).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        max0 = s0.get_max_phy_offset()
        s1.shutdown()

        res = s0.put_message(msg(TOPIC, 0, 2, **extra))
        # proposed, then no quorum: outcome unknown (issue 13.6), never "not stored"
        assert not res.ok and res.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT, res
        wrote = res.append_result.wrote_offset
        assert wrote > max0
        time.sleep(0.3)
        assert s0.get_max_phy_offset() == max0  # nothing committed ...
        assert s0.look_message_by_offset(wrote) is None  # ... nothing visible to readers
        assert s0.wait_dispatched(5) and s0.get_max_offset_in_queue(TOPIC, 0) == 1

        s1 = node(1)  # the peer comes back: the entry commits (only n0 can win: its log is longer)
        assert _wait(lambda: s0.get_max_phy_offset() > wrote)
        m = s0.look_message_by_offset(wrote)
        assert m is not None and m.body == msg(TOPIC, 0, 2).body and m.queue_offset == 1
        assert _wait(lambda: s0.get_max_offset_in_queue(TOPIC, 0) == 2 and s1.get_max_offset_in_queue(TOPIC, 0) == 2)
        assert s1.look_message_by_offset(wrote).msg_id == m.msg_id
    finally:
        s0.shutdown()
        s1.shutdown()

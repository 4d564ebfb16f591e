"""Ports of RocketMQ's MixCommitlogTest: a classic store written here, upgraded in place by
starting it in DLedger mode (single-node group on a real socket), read and written across the
divide with restarts; ConsumeQueues that fell behind are rebuilt byte-identical; expired-file
deletion stops at the divide."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus
from tests.broker.store.test_dledger_commitlog import dledger_store, free_port, msg

FILE_SIZE = 8192
SMALL = dict(mapped_file_size_commit_log=FILE_SIZE, warm_mapped_file_enable=False,
             max_hash_slot_num=1000, max_index_num=4000)
TOPIC = "MixTopic"


def classic_store(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(store_path_root_dir=str(root), **SMALL)
    store.load()
    store.start()
    return store


def open_dl(root: Path, port: int) -> DefaultMessageStore:
    store = dledger_store(root, f"n0-127.0.0.1:{port}", **SMALL)
    store.load()
    store.start()
    assert store.commitlog.wait_leader_ready(10)
    return store


def put_many(store: DefaultMessageStore, first: int, n: int, sent: list[tuple[Any, ...]]) -> None:
    for i in range(first, first + n):
        res = store.put_message(msg(TOPIC, i % 2, i))
        assert res.status is PutMessageStatus.PUT_OK, res
        ar = res.append_result
        assert ar.queue_offsets == [i // 2], (i, ar)  # logicsOffset continues across the divide
        sent.append((i % 2, i // 2, ar.wrote_offset, msg(TOPIC, i % 2, i).body))


def check_all(store: DefaultMessageStore, sent: list[tuple[Any, ...]], check_max: bool = True) -> None:
    assert store.wait_dispatched(10)
    for qid, qo, phy, body in sent:
        got = store.get_message(TOPIC, qid, qo, 1)
        assert got.status is GetMessageStatus.FOUND, (qid, qo, got.status)
        assert got.physical_offsets == [phy]
        m = got.messages[0]
        assert (m.queue_offset, m.commitlog_offset, m.body) == (qo, phy, body)
    for qid in (0, 1) if check_max else ():
        assert store.get_max_offset_in_queue(TOPIC, qid) == sum(1 for s in sent if s[0] == qid)


def cq_snapshot(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def test_put_and_get_across_the_divide_with_restarts(tmp_path: Path) -> None:
    root = tmp_path / "store"
    sent: list[tuple[Any, ...]] = []
    store = classic_store(root)
    put_many(store, 0, 200, sent)
    store.shutdown()
    (root / "abort").touch()  # restart the classic store after a crash, as the Java test does
    store = classic_store(root)
    assert not store.last_exit_ok
    check_all(store, sent)
    last_old = max(int(p.name) for p in (root / "commitlog").iterdir())
    store.shutdown()
    divided = last_old + FILE_SIZE

    port = free_port()
    store = dledger_store(root, f"n0-127.0.0.1:{port}", **SMALL)
    store.load()
    assert store.commitlog.divided_commitlog_offset == divided
    assert store.get_max_phy_offset() == divided  # before any write
    store.start()
    try:
        assert store.commitlog.wait_leader_ready(10)
        put_many(store, 200, 200, sent)
        assert all(s[2] > divided for s in sent[200:])
        check_all(store, sent)
    finally:
        store.shutdown()
    store = open_dl(root, port)
    try:
        assert store.commitlog.divided_commitlog_offset == divided
        put_many(store, 400, 200, sent)
        check_all(store, sent)
        assert len(list((root / "dledger-n0" / "data").iterdir())) > 2  # several DLedger files
    finally:
        store.shutdown()


def test_fall_behind_consume_queues_are_rebuilt_byte_identical(tmp_path: Path) -> None:
    root = tmp_path / "store"
    sent: list[tuple[Any, ...]] = []
    store = classic_store(root)
    put_many(store, 0, 200, sent)
    store.shutdown()
    before = cq_snapshot(root)
    shutil.rmtree(root / "consumequeue")
    (root / "abort").touch()
    port = free_port()
    store = open_dl(root, port)
    try:
        assert not store.last_exit_ok
        assert store.wait_dispatched(10)
        assert cq_snapshot(root) == before  # rebuilt from the old commitlog
        put_many(store, 200, 200, sent)
        check_all(store, sent)
    finally:
        store.shutdown()
    before = cq_snapshot(root)
    shutil.rmtree(root / "consumequeue")
    store = open_dl(root, port)
    try:
        assert store.wait_dispatched(10)
        assert cq_snapshot(root) == before  # rebuilt across the divide (entries advance by size + 48)
        put_many(store, 400, 10, sent)
        check_all(store, sent)
    finally:
        store.shutdown()


def test_expired_file_deletion_stops_at_the_divide(tmp_path: Path) -> None:
    root = tmp_path / "store"
    sent: list[tuple[Any, ...]] = []
    store = classic_store(root)
    put_many(store, 0, 200, sent)
    store.shutdown()
    store = open_dl(root, free_port())
    try:
        cl = store.commitlog
        divided = cl.divided_commitlog_offset
        put_many(store, 200, 200, sent)
        assert store.wait_dispatched(10)
        dl_files = sorted(p.name for p in (root / "dledger-n0" / "data").iterdir())
        assert len(list((root / "commitlog").iterdir())) > 3 and len(dl_files) > 3
        max_before = store.get_max_phy_offset()
        for _ in range(20):  # Apache: deleteExpiredFile(now, 0, 0, true) x100
            store.delete_expired_files(clean_immediately=True)
            assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir()) == dl_files or \
                not list((root / "commitlog").iterdir())
            if not list((root / "commitlog").iterdir()):
                break
        assert list((root / "commitlog").iterdir()) == []
        assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir()) == dl_files  # all kept
        assert store.get_min_phy_offset() == divided and store.get_max_phy_offset() == max_before
        assert store.look_message_by_offset(sent[0][2]) is None
        check_all(store, [s for s in sent if s[2] > divided], check_max=False)
        assert store.get_min_offset_in_queue(TOPIC, 0) <= 100 <= store.get_max_offset_in_queue(TOPIC, 0)
        # with the old files gone, DLedger's own rule applies: young files stay
        assert store.delete_expired_files(clean_immediately=False) == 0
        assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir()) == dl_files
        # and under disk pressure committed DLedger files go (never the last one)
        assert store.delete_expired_files(clean_immediately=True) > 0
        left = sorted(p.name for p in (root / "dledger-n0" / "data").iterdir())
        assert left and left[-1] == dl_files[-1] and len(left) < len(dl_files)
        assert store.get_min_phy_offset() == int(left[0])
        res = store.put_message(msg(TOPIC, 0, 9999))
        assert res.ok and res.append_result.wrote_offset > max_before
    finally:
        store.shutdown()

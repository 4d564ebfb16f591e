"""DefaultMessageStore on Apache's stores and on fresh ones: open/recover, reads by offset,
queue and key, ConsumeQueue rebuild byte identity, put validation, delay rewrite, restart."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from broker.store.message import MessageExt, tags_code_for
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus
from tests.support.rmqfixtures import plain_body

FIXTURE_SETTINGS = dict(mapped_file_size_commit_log=1 << 20, max_hash_slot_num=10000,
                        max_index_num=40000, warm_mapped_file_enable=False)


def open_store(root: Path, **kw) -> DefaultMessageStore:
    settings = dict(FIXTURE_SETTINGS)
    settings.update(kw)
    store = DefaultMessageStore(store_path_root_dir=str(root), **settings)
    store.load()
    store.start()
    return store


def test_apache_store_opens_and_returns_every_manifest_message(store_copy, fixture_set, manifests) -> None:
    root = store_copy(fixture_set.classic)
    store = open_store(root)
    try:
        assert store.last_exit_ok and store.get_max_phy_offset() == fixture_set.classic_max_offset
        rows = manifests(fixture_set.classic)
        for row in rows:
            m = store.look_message_by_offset(row["commitLogOffset"])
            assert m is not None, row
            assert (m.topic, m.queue_id, m.queue_offset, m.store_size) == (
                row["topic"], row["queueId"], row["queueOffset"], row["storeSize"])
            assert (m.born_timestamp, m.store_timestamp, m.body_crc) == (
                row["bornTimestamp"], row["storeTimestamp"], row["bodyCRC"])
            assert (m.tags or "") == row["tags"] and (m.keys or "") == row["keys"]
            if fixture_set.name == "plain":
                assert m.body == plain_body(row["id"])
            else:
                assert m.properties == row["properties"] and m.msg_id == row["msgId"]
                assert m.sys_flag == row["sysFlag"] and m.flag == row["flag"]
        # through the ConsumeQueues: every dispatched row at its queue offset
        in_cq = [r for r in rows if r.get("inConsumeQueue", 1)]
        for row in in_cq[:: max(1, len(in_cq) // 400)]:
            got = store.get_message(row["topic"], row["queueId"], row["queueOffset"], 1)
            assert got.status is GetMessageStatus.FOUND, row
            assert got.physical_offsets == [row["commitLogOffset"]]
            assert got.next_begin_offset == row["queueOffset"] + 1
        # index lookups by key
        row = rows[7]
        key = row["keys"].split(" ")[0]
        if key:
            assert row["commitLogOffset"] in [m.commitlog_offset for m in store.query_message(row["topic"], key)]
    finally:
        store.shutdown()
    assert not (root / "abort").exists()


def test_consume_queues_rebuilt_from_commitlog_are_byte_identical(store_copy, fixture_root, fixture_set) -> None:
    root = store_copy(fixture_set.classic)
    shutil.rmtree(root / "consumequeue")
    store = open_store(root)
    assert store.wait_dispatched(30)
    store.shutdown()
    apache = fixture_root / fixture_set.classic / "consumequeue"
    expected = sorted(p.relative_to(apache) for p in apache.rglob("*") if p.is_file())
    ours = sorted(p.relative_to(root / "consumequeue") for p in (root / "consumequeue").rglob("*") if p.is_file())
    assert ours == expected
    topics = {p.parts[0] for p in expected}
    if fixture_set.name == "variety":
        assert "SCHEDULE_TOPIC_XXXX" in topics and any(t.startswith("%RETRY%") for t in topics)
    for rel in expected:
        assert (root / "consumequeue" / rel).read_bytes() == (apache / rel).read_bytes(), rel


def test_get_message_statuses(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        for i in range(10):
            assert store.put_message(MessageExt("TopicX", b"m%d" % i, queue_id=1)).ok
        assert store.wait_dispatched()
        r = store.get_message("TopicX", 1, 0, 4)
        assert r.status is GetMessageStatus.FOUND and [m.body for m in r.messages] == [b"m0", b"m1", b"m2", b"m3"]
        assert r.next_begin_offset == 4 and (r.min_offset, r.max_offset) == (0, 10)
        assert store.get_message("TopicX", 1, 10, 4).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        bad = store.get_message("TopicX", 1, 15, 4)
        assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 0
        assert store.get_message("TopicX", 7, 0, 4).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_message("Nope", 0, 0, 4).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_max_offset_in_queue("TopicX", 1) == 10
        tag = tags_code_for("TopicX", {"TAGS": "x"}, 0)
        assert store.get_message("TopicX", 1, 0, 4, tags_filter=lambda c: c == tag).status is GetMessageStatus.NO_MATCHED_MESSAGE
    finally:
        store.shutdown()


def test_put_validation_and_slave_refusal(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", max_message_size=100)
    try:
        for topic in ("", "a/b", "x" * 256, "../etc", "bad topic"):
            r = store.put_message(MessageExt(topic, b"x"))
            assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "topic" in r.error
        assert store.put_message(MessageExt("T", b"x" * 101)).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_message(MessageExt("T", b"x", queue_id=-1)).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_message(MessageExt("%RETRY%g|1_-", b"x")).ok
        assert store.get_max_phy_offset() > 0
    finally:
        store.shutdown()
    slave = open_store(tmp_path / "slave", broker_role="SLAVE")
    try:
        assert slave.put_message(MessageExt("T", b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    finally:
        slave.shutdown()


def test_delay_rewrite_key_lookup_msg_id_and_restart(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = open_store(root)
    try:
        delayed = MessageExt("Orders", b"later", queue_id=2, properties={"DELAY": "99", "TAGS": "t", "KEYS": "o-1 o-2"})
        r = store.put_message(delayed)
        assert r.ok and delayed.topic == "Orders"  # the caller's object is not mutated
        m = store.look_message_by_offset(r.append_result.wrote_offset)
        assert (m.topic, m.queue_id) == ("SCHEDULE_TOPIC_XXXX", 17)
        assert m.properties["REAL_TOPIC"] == "Orders" and m.properties["REAL_QID"] == "2"
        assert m.properties["DELAY"] == "18"
        plain = MessageExt("Orders", b"now", properties={"KEYS": "o-3", "UNIQ_KEY": "U1"})
        r2 = store.put_message(plain)
        assert store.wait_dispatched()
        cq = store.find_consume_queue("SCHEDULE_TOPIC_XXXX", 17)
        assert cq.get(0)[2] == m.store_timestamp + 7_200_000  # tagsCode = delivery time
        assert [x.body for x in store.query_message("SCHEDULE_TOPIC_XXXX", "o-2")] == [b"later"]
        assert [x.body for x in store.query_message("Orders", "U1")] == [b"now"]
        assert store.view_message_by_id(r2.append_result.msg_id).body == b"now"
        end = store.get_max_phy_offset()
    finally:
        store.shutdown()
    store = open_store(root)
    try:
        assert store.last_exit_ok and store.get_max_phy_offset() == end
        r3 = store.put_message(MessageExt("Orders", b"again"))
        assert r3.append_result.queue_offsets == [1]  # continues from the ConsumeQueue
        assert store.wait_dispatched() and store.get_message("Orders", 0, 0, 10).message_count == 2
    finally:
        store.shutdown()


def test_second_open_of_same_store_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        other = DefaultMessageStore(store_path_root_dir=str(tmp_path / "s"), **FIXTURE_SETTINGS)
        with pytest.raises(Exception, match="lock|locked|owns"):
            other.load()
    finally:
        store.shutdown()


async def test_async_put_sync_flush(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", flush_disk_type="SYNC_FLUSH")
    try:
        r = await store.put_messages_async([MessageExt("A", b"x"), MessageExt("A", b"y")])
        assert r.ok and store.get_flushed_where() >= r.append_result.end_offset
    finally:
        store.shutdown()


async def test_sync_flush_and_replica_waits_are_requested_together(tmp_path: Path) -> None:
    """A SYNC_FLUSH put on a SYNC_MASTER asks for the slave's ack while its flush is still
    pending (Apache 5's ``handleDiskFlushAndHA``), so it waits for the slower of the two, not their
    sum; a replica failure still wins over a flush that succeeded, as before."""
    import concurrent.futures

    store = open_store(tmp_path / "s", flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200)
    cl = store.commitlog
    seen: list[bool] = []

    def replica_hook(ar) -> concurrent.futures.Future:
        # was the flush still pending when the ack was asked for? (a flush wait that ended first
        # cancelled its request's future: asyncio.wrap_future passes the timeout's cancel on)
        waiting = cl.flush_service.pending()
        seen.append(len(waiting) == 1 and not waiting[0].future.done())
        rep: concurrent.futures.Future = concurrent.futures.Future()
        rep.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        return rep

    try:
        cl.flush_service.shutdown()  # nothing flushes: the flush future stays pending until its timeout
        cl.replica_hook = replica_hook
        r = await store.put_messages_async([MessageExt("A", b"x")])
        assert seen == [True], "the replica wait was requested only after the flush wait ended"
        assert r.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and r.status.stored
    finally:
        store.shutdown()

"""Dispatch refuses what a send would refuse, on real store files, in both commitlog modes.

- classic: records an HA master replicated (a path-traversal topic, a NUL topic, a negative
  queue) are skipped and reported with file and offset, the rest is dispatched; abnormal
  recovery's re-dispatch skips them the same way and truncates nothing; an unparsable record in
  the middle still stops dispatch (boundaries unknown) and the stall is in ``dispatch_status``;
- DLedger: entries appended through the DLedger server (200 zero bytes, garbage, a crafted
  traversal topic, a bad queue id) are skipped, later puts reach their ConsumeQueues, and the
  store restarts (cleanly and after a crash) without truncating anything.
"""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

from tools.procs import free_port
from broker.store.commitlog import CommitLog
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.lockfile import AbortFile
from broker.store.message import MessageExt, encode_message
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus
from tests.broker.store.test_dledger_commitlog import dledger_store

CLASSIC = dict(mapped_file_size_commit_log=1 << 16, warm_mapped_file_enable=False, max_hash_slot_num=100,
               max_index_num=400)


def good(i: int) -> MessageExt:
    return MessageExt("Good", b"good-%d" % i, queue_id=0, properties={"KEYS": f"k{i}", "TAGS": "t"},
                      born_timestamp=1_700_000_000_000 + i)


def bad(topic: str, queue_id: int = 0) -> MessageExt:
    return MessageExt(topic, b"evil", queue_id=queue_id, properties={"KEYS": "evil"},
                      born_timestamp=1_700_000_000_000)


def classic_store(root: Path, **kw) -> DefaultMessageStore:
    store = DefaultMessageStore(store_path_root_dir=str(root), **{**CLASSIC, **kw})
    store.load()
    store.start()
    return store


def indexed(store: DefaultMessageStore, topic: str, key: str) -> list[int]:
    return sorted(store.index_service.query_offset(topic, key, 32, 0, 2**62))


def cq_dirs(root: Path) -> list[str]:
    cq = root / "consumequeue"
    return sorted(p.name for p in cq.iterdir()) if cq.is_dir() else []


# --- classic ------------------------------------------------------------------------------------
def test_classic_replicated_records_with_invalid_names_are_skipped_and_reported(tmp_path: Path) -> None:
    master = CommitLog(tmp_path / "master", 1 << 16, warm_mapped_file=False)
    master.load()
    msgs = [good(0), bad("../../escape-classic"), good(1), bad("Good", -1), bad("a\x00b"), good(2)]
    ar = master.put_messages(msgs).append_result  # the CommitLog itself does not validate: a peer's bytes
    data = bytes(master.get_data(0).buffer)
    master.shutdown()
    root = tmp_path / "slave"
    slave = classic_store(root, broker_role="SLAVE")
    try:
        assert slave.append_to_commitlog(0, data)
        assert slave.wait_dispatched(5)
        assert not (tmp_path / "escape-classic").exists() and cq_dirs(root) == ["Good"]
        assert slave.get_max_offset_in_queue("Good", 0) == 3
        assert [u for u in slave.get_message("Good", 0, 0, 8).physical_offsets] == [ar.physical_offsets[i]
                                                                                    for i in (0, 2, 5)]
        st = slave.dispatch_status()
        assert st["skippedRecords"] == 3 and st["error"] is None and st["dispatchBehindBytes"] == 0
        bad_offsets = [ar.physical_offsets[i] for i in (1, 3, 4)]
        assert [s["offset"] for s in st["lastSkipped"]] == bad_offsets
        first_file = root / "commitlog" / f"{0:020d}"
        assert all(s["file"] == str(first_file) and s["filePos"] == s["offset"] for s in st["lastSkipped"])
        assert "../../escape-classic" in st["lastSkipped"][0]["reason"]
        assert "queue id -1" in st["lastSkipped"][1]["reason"]
        assert indexed(slave, "Good", "k1") == [ar.physical_offsets[2]]
        assert indexed(slave, "../../escape-classic", "evil") == indexed(slave, "Good", "evil") == []
        end = slave.commitlog.max_offset
    finally:
        slave.shutdown()
    assert not (tmp_path / "escape-classic").exists() and cq_dirs(root) == ["Good"]

    # a crash: abort left behind, ConsumeQueues and index lost -> abnormal recovery re-dispatches
    AbortFile(root).create()
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    again = classic_store(root, broker_role="SLAVE")
    try:
        assert again.commitlog.max_offset == end  # nothing truncated for the skipped records
        assert again.get_max_offset_in_queue("Good", 0) == 3
        st = again.dispatch_status()
        assert st["skippedRecords"] == 3 and [s["offset"] for s in st["lastSkipped"]] == bad_offsets
    finally:
        again.shutdown()
    assert not (tmp_path / "escape-classic").exists() and cq_dirs(root) == ["Good"]


def test_classic_unparsable_record_still_stalls_and_status_says_where(tmp_path: Path) -> None:
    """Classic record boundaries are unknown past a broken record: never guess, but show it."""
    master = CommitLog(tmp_path / "master", 1 << 16, warm_mapped_file=False)
    master.load()
    ar = master.put_messages([good(0), good(1), good(2)]).append_result
    data = bytearray(master.get_data(0).buffer)
    master.shutdown()
    broken = ar.physical_offsets[1]
    data[broken + 4:broken + 8] = b"\xde\xad\xbe\xef"
    slave = classic_store(tmp_path / "slave", broker_role="SLAVE")
    try:
        assert slave.append_to_commitlog(0, bytes(data))
        slave.wake_dispatch()
        assert not slave.wait_dispatched(1.0)
        st = slave.dispatch_status()
        assert st["error"] is not None and f"offset {broken}" in st["error"] and "magic" in st["error"]
        assert st["skippedRecords"] == 0 and st["dispatchBehindBytes"] == len(data) - broken
        assert slave.get_max_offset_in_queue("Good", 0) == 1
    finally:
        slave.shutdown()


# --- DLedger ------------------------------------------------------------------------------------
def raw_append(store: DefaultMessageStore, body: bytes) -> int:
    """Append ``body`` as one DLedger entry through the member's own server (what a client
    ``append`` did); returns the entry's position once committed."""
    cl = store.commitlog

    async def go() -> int:
        fut = cl.server.append(body)
        await fut
        return fut.pos

    return cl._await_on_loop(go)


def open_dledger(root: Path, port: int) -> DefaultMessageStore:
    store = dledger_store(root, f"n0-127.0.0.1:{port}", mapped_file_size_commit_log=1 << 20)
    store.load()
    store.start()
    assert store.commitlog.wait_leader_ready(10), store.dispatch_status()
    return store


def test_dledger_invalid_entries_are_skipped_and_later_puts_dispatched(tmp_path: Path) -> None:
    root, port = tmp_path / "d", free_port()
    store = open_dledger(root, port)
    try:
        r0 = store.put_message(good(0))
        assert r0.status is PutMessageStatus.PUT_OK
        hostile = [bytes(200), b"\xff" * 57, bytes(encode_message(bad("../../escape-dledger"), 0, 0)),
                   bytes(encode_message(bad("Good", 70000), 0, 0))]
        positions = [raw_append(store, body) for body in hostile]
        r1 = store.put_message(good(1))
        assert r1.status is PutMessageStatus.PUT_OK
        assert store.wait_dispatched(5), store.dispatch_status()
        got = store.get_message("Good", 0, 0, 8)
        assert got.status is GetMessageStatus.FOUND
        assert got.physical_offsets == [r0.append_result.wrote_offset, r1.append_result.wrote_offset]
        st = store.dispatch_status()
        assert st["skippedRecords"] == 4 and st["error"] is None
        assert [s["offset"] for s in st["lastSkipped"]] == positions
        data_file = store.commitlog.dledger_store.data_file_list.first_file.path
        assert all(s["file"] == str(data_file) and s["filePos"] == s["offset"] for s in st["lastSkipped"])
        assert "not a valid message" in st["lastSkipped"][0]["reason"]
        assert "escape-dledger" in st["lastSkipped"][2]["reason"]
        assert "queue id 70000" in st["lastSkipped"][3]["reason"]
        end = store.commitlog.max_offset
    finally:
        store.shutdown()
    assert not (tmp_path / "escape-dledger").exists() and cq_dirs(root) == ["Good"]

    # clean restart: recovery keeps every entry, the leader gets ready (dispatch is not stuck)
    store = open_dledger(root, port)
    try:
        assert store.commitlog.max_offset >= end
        r2 = store.put_message(good(2))
        assert r2.status is PutMessageStatus.PUT_OK and store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("Good", 0) == 3
    finally:
        store.shutdown()

    # crash: abort left behind, ConsumeQueues and index lost -> re-dispatch after the crash
    AbortFile(root).create()
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    store = open_dledger(root, port)
    try:
        assert store.commitlog.max_offset >= end
        assert store.get_max_offset_in_queue("Good", 0) == 3
        st = store.dispatch_status()
        assert st["skippedRecords"] == 4 and [s["offset"] for s in st["lastSkipped"]] == positions
        assert indexed(store, "Good", "k2") == [r2.append_result.wrote_offset]
        assert indexed(store, "Good", "evil") == []
    finally:
        store.shutdown()
    assert not (tmp_path / "escape-dledger").exists() and cq_dirs(root) == ["Good"]


def test_entry_frame_is_recognised_only_where_dledger_wrote_it() -> None:
    from broker.store.dledger_dispatch import dledger_entry_frame_size

    body = bytes(200)
    entry = struct.pack(">iiqqqiiii", 1, 248, 5, 2, 4096, 0, 0, 0, 200) + body
    assert dledger_entry_frame_size(entry, 0, 4096) == 248
    assert dledger_entry_frame_size(entry, 0, 4097) == -1  # pos field names another offset
    assert dledger_entry_frame_size(entry[:100], 0, 4096) == -1  # overruns the committed bytes
    assert dledger_entry_frame_size(b"\x00" * 248, 0, 0) == -1  # zeros are not a frame
    crc_bad = bytearray(entry)
    struct.pack_into(">i", crc_bad, 40, 12345)
    assert dledger_entry_frame_size(crc_bad, 0, 4096) == -1
    assert dledger_entry_frame_size(b"x" + entry, 1, 4096) == 248


def test_dledger_old_region_records_are_checked_too(tmp_path: Path) -> None:
    """Records below dividedCommitlogOffset (the frozen classic commitlog of an upgraded store)
    go through the same check when the DLedger-mode store dispatches them."""
    root = tmp_path / "u"
    classic = classic_store(root, mapped_file_size_commit_log=1 << 20)
    try:
        ar = classic.commitlog.put_messages([good(0), bad("../../escape-old"), good(1)]).append_result
        assert classic.wait_dispatched(5)
    finally:
        classic.shutdown()
    shutil.rmtree(root / "consumequeue")  # the DLedger-mode store re-dispatches the old region
    shutil.rmtree(root / "index")
    store = open_dledger(root, free_port())
    try:
        assert store.commitlog.divided_commitlog_offset == 1 << 20
        assert store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("Good", 0) == 2
        st = store.dispatch_status()
        assert st["skippedRecords"] == 1 and st["lastSkipped"][0]["offset"] == ar.physical_offsets[1]
        assert st["lastSkipped"][0]["file"] == str(root / "commitlog" / f"{0:020d}")
        r = store.put_message(good(2))
        assert r.status is PutMessageStatus.PUT_OK and store.wait_dispatched(5)
        assert store.get_max_offset_in_queue("Good", 0) == 3
    finally:
        store.shutdown()
    assert not (tmp_path / "escape-old").exists() and cq_dirs(root) == ["Good"]


def test_apache_stores_redispatch_completely_with_nothing_skipped(store_copy, fixture_set, fixture_root) -> None:
    """Both Apache stores (classic, and upgraded across the divide) re-dispatched from scratch:
    every queue Apache built comes back, to the same max offset, and nothing is skipped."""
    for name, dledger in ((fixture_set.classic, False), (fixture_set.mixed, True)):
        apache = ConsumeQueueStore(fixture_root / name, read_only=True)
        apache.load()
        apache.recover()
        want = {(cq.topic, cq.queue_id): cq.max_offset_in_queue for cq in apache.consume_queues()}
        apache.shutdown()
        root = store_copy(name)
        shutil.rmtree(root / "consumequeue")
        if (root / "index").exists():
            shutil.rmtree(root / "index")
        if dledger:
            store = open_dledger(root, free_port())
        else:
            store = classic_store(root, mapped_file_size_commit_log=fixture_set.file_size)
        try:
            assert store.wait_dispatched(30)
            st = store.dispatch_status()
            assert st["skippedRecords"] == 0 and st["error"] is None, st
            got = {(cq.topic, cq.queue_id): cq.max_offset_in_queue
                   for cq in store.consume_queue_store.consume_queues()}
            assert got == want, name
        finally:
            store.shutdown()

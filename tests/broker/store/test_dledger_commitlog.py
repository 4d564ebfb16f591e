"""DLedgerCommitLog on Apache's stores: the upgraded store opens in DLedger mode and continues
its offset space; upgrading the classic store reproduces Apache's blank, divided offset and first
DLedger file; the record parser and the barrier. Both fixture sets (plain and variety).

Also the helpers the other test_dledger_commitlog_* modules share (real stores, real sockets)."""
from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path
from typing import Any


from tools.procs import free_port
from broker.store.dledger_dispatch import (
    BARRIER_TOPIC, barrier_message_body, check_dledger_message_and_return_size,
)
from broker.store.message import MessageExt, decode_message, encode_message
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus
from tests.support.rmqfixtures import plain_body

FIXTURE_SETTINGS = dict(mapped_file_size_commit_log=1 << 20, max_hash_slot_num=10000,
                        max_index_num=40000, warm_mapped_file_enable=False)


def dledger_store(root: Path, peers: str, self_id: str = "n0", group: str = "g0",
                  dledger: dict[str, Any] | None = None, **settings: Any) -> DefaultMessageStore:
    """A DefaultMessageStore in DLedger mode (not loaded)."""
    kw = dict(FIXTURE_SETTINGS)
    kw.update(settings)
    # loopback test groups: no shared secret, explicitly insecure (the DLedger doors policy)
    dl = {"group": group, "self_id": self_id, "peers": peers, "allow_insecure": True}
    dl.update(dledger or {})
    return DefaultMessageStore(store_path_root_dir=str(root), enable_dleger_commit_log=True,
                               dledger_settings=dl, **kw)


def open_single(root: Path, port: int | None = None, **settings: Any) -> DefaultMessageStore:
    """Load + start a single-node group and wait until its leader accepts writes."""
    store = dledger_store(root, f"n0-127.0.0.1:{port or free_port()}", **settings)
    store.load()
    store.start()
    assert store.commitlog.wait_leader_ready(10), store.commitlog.status()
    return store


def msg(topic: str, queue_id: int, i: int, **kw: Any) -> MessageExt:
    return MessageExt(topic=topic, queue_id=queue_id, body=b"payload-%06d" % i + b"y" * (i % 50),
                      properties={"TAGS": f"Tag{i % 3}", "KEYS": f"k-{i}"}, born_timestamp=1_700_000_000_000 + i,
                      **kw)


def same_fields(m: MessageExt, row: dict, plain: bool) -> None:
    assert (m.topic, m.queue_id, m.queue_offset, m.store_size, m.commitlog_offset) == (
        row["topic"], row["queueId"], row["queueOffset"], row["storeSize"], row["commitLogOffset"])
    assert (m.born_timestamp, m.store_timestamp, m.body_crc) == (
        row["bornTimestamp"], row["storeTimestamp"], row["bodyCRC"])
    assert (m.tags or "") == row["tags"] and (m.keys or "") == row["keys"]
    if plain:
        assert m.body == plain_body(row["id"])
    else:
        assert m.properties == row["properties"] and m.msg_id == row["msgId"]
        assert (m.sys_flag, m.flag) == (row["sysFlag"], row["flag"])


# --- (a) the upgraded Apache store opens in DLedger mode ---------------------------------------
def test_mixed_store_opens_reads_across_the_divide_and_continues(store_copy, fixture_set, manifests) -> None:
    fs = fixture_set
    root = store_copy(fs.mixed)
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}")
    store.load()
    cl = store.commitlog
    try:
        assert cl.divided_commitlog_offset == fs.divided_offset
        assert cl.max_offset == fs.mixed_max_offset  # Apache's checkpoint committed everything
        rows = manifests(fs.mixed)
        below = sum(1 for r in rows if r["commitLogOffset"] < fs.divided_offset)
        assert 0 < below < len(rows)
        for row in rows:
            m = store.look_message_by_offset(row["commitLogOffset"])
            assert m is not None, row
            same_fields(m, row, fs.name == "plain")
        store.start()
        assert cl.wait_leader_ready(10)
        # Apache's log is fully committed, so the new leader needs no barrier: the first new
        # message continues right after 5,757,790 (the barrier case is covered in tests/sim).
        assert store.look_message_by_offset(fs.mixed_max_offset + 48) is None
        assert store.find_consume_queue(BARRIER_TOPIC, 0) is None
        next_phy = fs.mixed_max_offset
        expected: dict[tuple[str, int], int] = defaultdict(int)
        for r in rows:
            if r.get("inConsumeQueue", 1) and r["topic"] != "SCHEDULE_TOPIC_XXXX":
                key = (r["topic"], r["queueId"])
                expected[key] = max(expected[key], r["queueOffset"] + 1)
        if fs.name == "plain":
            assert set(expected.values()) == {875}
        for n, (topic, qid) in enumerate(sorted(expected)):
            res = store.put_message(msg(topic, qid, n))
            assert res.status is PutMessageStatus.PUT_OK, res
            ar = res.append_result
            assert ar.wrote_offset == next_phy + 48, (topic, qid)
            assert ar.queue_offsets == [expected[(topic, qid)]]
            got = store.look_message_by_offset(ar.wrote_offset)
            assert got.commitlog_offset == ar.wrote_offset and got.queue_offset == expected[(topic, qid)]
            assert got.msg_id == ar.msg_id
            next_phy = ar.end_offset
        assert store.wait_dispatched(10)
        for topic, qid in sorted(expected):
            assert store.get_max_offset_in_queue(topic, qid) == expected[(topic, qid)] + 1
            got = store.get_message(topic, qid, expected[(topic, qid)] - 1, 2)
            assert got.status is GetMessageStatus.FOUND and len(got.buffers) == 2
            first = store.get_message(topic, qid, store.get_min_offset_in_queue(topic, qid), 1)
            assert first.status is GetMessageStatus.FOUND
            if fs.name == "plain":
                assert first.physical_offsets[0] < fs.divided_offset < got.physical_offsets[0]
        st = cl.status()
        assert st["role"] == "LEADER" and st["divided_commitlog_offset"] == fs.divided_offset
        assert st["committed_index"] == st["end_index"] and st["max_offset"] == next_phy
    finally:
        store.shutdown()


# --- (b) upgrading the classic store reproduces Apache's mixed store's frozen commitlog ---------
def test_upgrading_classic_reproduces_apache_blank_divide_and_first_file(store_copy, fixture_set, fixture_root,
                                                                       manifests) -> None:
    fs = fixture_set
    row = next(r for r in manifests(fs.classic) if r.get("inConsumeQueue", 1) and r["topic"] != "SCHEDULE_TOPIC_XXXX")
    key = (row["topic"], row["queueId"])
    next_qo = 1 + max(r["queueOffset"] for r in manifests(fs.classic)
                      if (r["topic"], r["queueId"]) == key and r.get("inConsumeQueue", 1))
    root = store_copy(fs.classic)
    apache = fixture_root / fs.mixed
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}")
    store.load()
    try:
        cl = store.commitlog
        assert cl.divided_commitlog_offset == fs.divided_offset
        assert cl.freeze_point is not None and not cl.freeze_point.blank_present
        assert cl.max_offset == fs.divided_offset  # before any write (MixCommitlogTest)
        ours_old = sorted(p.name for p in (root / "commitlog").iterdir())
        theirs_old = sorted(p.name for p in (apache / "commitlog").iterdir())
        assert ours_old == theirs_old
        for name in ours_old:
            assert (root / "commitlog" / name).read_bytes() == (apache / "commitlog" / name).read_bytes(), name
        first_theirs = sorted(p.name for p in (apache / "dledger-n0" / "data").iterdir())[0]
        assert sorted(p.name for p in (root / "dledger-n0" / "data").iterdir()) == [first_theirs]
        assert int(first_theirs) == fs.divided_offset
        # the blank record itself (plain: [0x0008125A][0xCBD43194] at file offset 519,590)
        last = root / "commitlog" / ours_old[-1]
        pos = fs.classic_max_offset - int(ours_old[-1])
        blank = last.read_bytes()[pos:pos + 8]
        assert struct.unpack(">ii", blank) == (fs.file_size - pos, -875286124)
        if fs.name == "plain":
            assert blank.hex() == "0008125acbd43194" and pos == 519_590
        store.start()
        assert cl.wait_leader_ready(10)
        res = store.put_message(msg(key[0], key[1], 1))
        assert res.ok and res.append_result.queue_offsets == [next_qo]
        assert fs.name != "plain" or next_qo == 625
        assert sorted(p.name for p in (root / "dledger-n0" / "index").iterdir()) == ["0" * 20]  # index at 0
        assert fs.divided_offset < res.append_result.wrote_offset < fs.divided_offset + fs.file_size
    finally:
        store.shutdown()
    # a second start finds the blank and the DLedger files: nothing in the old files changes
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}")
    store.load()
    try:
        assert store.commitlog.freeze_point is None and store.commitlog.divided_commitlog_offset == fs.divided_offset
        for name in ours_old:
            assert (root / "commitlog" / name).read_bytes() == (apache / "commitlog" / name).read_bytes(), name
    finally:
        store.shutdown()


# --- parser and barrier (pure) ------------------------------------------------------------------
def _entry(message: bytes, pos: int) -> bytes:
    return struct.pack(">iiqqqiiii", 1, 48 + len(message), 0, 1, pos, 0, 0, 0, len(message)) + message


def test_parser_routes_old_records_dledger_entries_and_both_blanks() -> None:
    m = encode_message(MessageExt(topic="TopicTest", body=b"Hello", properties={"TAGS": "TagA"}), 0, 48)
    e = _entry(bytes(m), 0)
    req = check_dledger_message_and_return_size(e, 0)
    assert req.success and req.msg_size == len(m) and req.buffer_size == len(m) + 48 and req.commitlog_offset == 48
    classic = check_dledger_message_and_return_size(bytes(m), 0)
    assert classic.success and classic.msg_size == len(m) and classic.buffer_size == -1
    assert check_dledger_message_and_return_size(struct.pack(">ii", 100, -875286124), 0).msg_size == 0
    blank = check_dledger_message_and_return_size(struct.pack(">ii", -1, 100) + bytes(92), 0)
    assert blank.success and blank.msg_size == 0
    bad = bytearray(e)
    struct.pack_into(">i", bad, 4, len(e) + 1)  # entry size disagrees with the message
    assert not check_dledger_message_and_return_size(bytes(bad), 0).success
    assert not check_dledger_message_and_return_size(bytes(64), 0).success  # zeros are not a record


def test_barrier_is_a_valid_tiny_message() -> None:
    body = barrier_message_body(("127.0.0.1", 10911), 1_700_000_000_000)
    m = decode_message(body)
    assert (m.topic, m.queue_id, m.queue_offset, m.body) == (BARRIER_TOPIC, 0, 0, b"")
    assert len(body) < 120
    req = check_dledger_message_and_return_size(_entry(body, 4096), 0)
    assert req.success and req.topic == BARRIER_TOPIC
    ipv6 = decode_message(barrier_message_body(("::1", 10911), 1))
    assert ipv6.store_host == ("::1", 10911)

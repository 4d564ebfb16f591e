"""ConsumeQueue against the Apache-written fixture stores and on fresh files."""
from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import pytest

from broker.store.consume_queue import (
    CQ_STORE_UNIT_SIZE,
    ConsumeQueue,
    ConsumeQueueError,
    ConsumeQueueStore,
)
from broker.store.dispatch import DispatchRequest
from broker.store.java_hash import tags_string_to_tags_code

# MessageStoreConfig.messageDelayLevel default, in ms per level (level = queueId + 1)
_DELAY_MS = [
    1_000, 5_000, 10_000, 30_000, 60_000, 120_000, 180_000, 240_000, 300_000, 360_000,
    420_000, 480_000, 540_000, 600_000, 1_200_000, 1_800_000, 3_600_000, 7_200_000,
]
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
MAX_LONG = (1 << 63) - 1


def expected_tags_code(row: dict) -> int:
    if row["topic"] == SCHEDULE_TOPIC:
        return row["storeTimestamp"] + _DELAY_MS[row["queueId"]]
    return tags_string_to_tags_code(row["tags"])


def cq_rows(rows: list[dict]) -> list[dict]:
    """Manifest rows that Apache put into a ConsumeQueue."""
    return [r for r in rows if r.get("inConsumeQueue", 1)]


def request_for(row: dict) -> DispatchRequest:
    return DispatchRequest(
        topic=row["topic"],
        queue_id=row["queueId"],
        commitlog_offset=row["commitLogOffset"],
        msg_size=row["storeSize"],
        tags_code=expected_tags_code(row),
        store_timestamp=row["storeTimestamp"],
        consume_queue_offset=row["queueOffset"],
        keys=row["keys"],
        uniq_key=row.get("uniqKey", ""),
        sys_flag=row.get("sysFlag", 0),
    )


def _cq_files(root: Path) -> dict[str, Path]:
    base = root / "consumequeue"
    return {str(p.relative_to(base)): p for p in base.rglob("*") if p.is_file()}


@pytest.mark.parametrize("which", ["classic", "mixed"])
def test_fixture_units_match_manifest(fixture_root, fixture_set, manifests, which):
    name = getattr(fixture_set, which)
    rows = cq_rows(manifests(name))
    store = ConsumeQueueStore(fixture_root / name, read_only=True)
    store.load()
    max_phy = store.recover()
    try:
        last = max(rows, key=lambda r: r["commitLogOffset"])
        assert max_phy == last["commitLogOffset"] + last["storeSize"]
        per_queue: dict[tuple[str, int], int] = defaultdict(int)
        for row in rows:
            cq = store.find_consume_queue(row["topic"], row["queueId"], create=False)
            assert cq is not None, row
            unit = cq.get(row["queueOffset"])
            assert unit == (row["commitLogOffset"], row["storeSize"], expected_tags_code(row)), row
            per_queue[(row["topic"], row["queueId"])] += 1
        table = store.queue_offset_table()
        assert table == {f"{t}-{q}": n for (t, q), n in per_queue.items()}
        for cq in store.consume_queues():
            assert cq.min_offset_in_queue == 0
            assert cq.get(cq.max_offset_in_queue) is None
    finally:
        store.shutdown()


@pytest.mark.parametrize("which", ["classic", "mixed"])
def test_rebuild_from_manifest_is_byte_identical(fixture_root, fixture_set, manifests, tmp_path, which):
    name = getattr(fixture_set, which)
    rows = manifests(name)  # every record, including PREPARED/ROLLBACK: dispatch must skip them
    store = ConsumeQueueStore(tmp_path)
    for row in sorted(rows, key=lambda r: r["commitLogOffset"]):
        store.dispatch(request_for(row))
    store.shutdown()
    ours, theirs = _cq_files(tmp_path), _cq_files(fixture_root / name)
    assert sorted(ours) == sorted(theirs)
    for rel, path in theirs.items():
        expected = path.read_bytes()
        got = ours[rel].read_bytes()
        assert len(got) == len(expected) == 6_000_000, rel
        assert got == expected, rel


def test_dispatch_is_idempotent_and_skips_transactions_and_barriers(tmp_path):
    store = ConsumeQueueStore(tmp_path, mapped_file_size=200)
    reqs = [DispatchRequest("T", 0, 100 * i, 100, 7, 1000 + i, i) for i in range(3)]
    for r in reqs + reqs:  # the second round is a re-dispatch after restart
        store.dispatch(r)
    store.dispatch(DispatchRequest("T", 0, 300, 50, 0, 0, 0, sys_flag=0x4))  # PREPARED
    store.dispatch(DispatchRequest("T", 0, 350, 50, 0, 0, 0, sys_flag=0xC))  # ROLLBACK
    store.dispatch(DispatchRequest("RMQ_SYS_DLEDGER_BARRIER", 0, 400, 60, 0, 0, 0))
    store.dispatch(DispatchRequest("T", 0, 460, 50, 9, 0, 3, sys_flag=0x8))  # COMMIT
    cq = store.find_consume_queue("T", 0, create=False)
    assert [u for _, u in cq.iter_units()] == [(0, 100, 7), (100, 100, 7), (200, 100, 7), (460, 50, 9)]
    assert store.find_consume_queue("RMQ_SYS_DLEDGER_BARRIER", 0, create=False) is None
    assert store.max_physical_offset() == 510
    store.shutdown()


def test_roll_recover_and_truncate(tmp_path):
    size = 5 * CQ_STORE_UNIT_SIZE  # 5 units per file
    store = ConsumeQueueStore(tmp_path, mapped_file_size=size)
    for i in range(13):
        store.dispatch(DispatchRequest("T", 1, 1000 + 10 * i, 10, i, 0, i))
    cq = store.find_consume_queue("T", 1)
    assert [p.name for p in cq.file_paths] == [f"{n:020d}" for n in (0, 100, 200)]
    store.shutdown()

    store = ConsumeQueueStore(tmp_path, mapped_file_size=size)
    store.load()
    assert store.recover() == 1130
    cq = store.find_consume_queue("T", 1, create=False)
    assert (cq.min_offset_in_queue, cq.max_offset_in_queue) == (0, 13)
    assert cq.get(12) == (1120, 10, 12) and cq.get(13) is None

    store.truncate_dirty(1045)  # keeps offsets 1000..1040 => 5 units, exactly one file
    assert cq.max_offset_in_queue == 5 and len(cq.file_paths) == 1
    assert cq.max_physic_offset == 1050
    store.dispatch(DispatchRequest("T", 1, 1050, 10, 99, 0, 5))  # rolls again
    assert cq.get(5) == (1050, 10, 99)
    store.truncate_dirty(0)
    assert cq.max_offset_in_queue == 0 and cq.file_paths == []
    store.shutdown()


def test_truncate_mid_file_survives_restart(tmp_path):
    store = ConsumeQueueStore(tmp_path, mapped_file_size=200)
    for i in range(8):
        store.dispatch(DispatchRequest("T", 0, 100 * i, 100, 0, 0, i))
    store.truncate_dirty(450)
    store.shutdown()
    store = ConsumeQueueStore(tmp_path, mapped_file_size=200)
    store.load()
    assert store.recover() == 500  # units 5..7 must not come back
    assert store.queue_offset_table() == {"T-0": 5}
    store.shutdown()


def test_pre_blank_fill_and_min_offset(tmp_path):
    store = ConsumeQueueStore(tmp_path, mapped_file_size=200)  # 10 units per file
    store.dispatch(DispatchRequest("T", 2, 5000, 40, 1, 0, 13))
    cq = store.find_consume_queue("T", 2)
    assert [p.name for p in cq.file_paths] == [f"{200:020d}"]
    raw = cq.file_paths[0].read_bytes()
    assert raw[:60] == struct.pack(">qiq", 0, 0x7FFFFFFF, 0) * 3
    assert raw[60:80] == struct.pack(">qiq", 5000, 40, 1)
    assert cq.min_offset_in_queue == 13 and cq.max_offset_in_queue == 14
    assert cq.get(12) is None and cq.get(13) == (5000, 40, 1)
    store.shutdown()
    store = ConsumeQueueStore(tmp_path, mapped_file_size=200)
    store.load()
    assert store.recover() == 5040  # blanks do not count as positions
    cq = store.find_consume_queue("T", 2, create=False)
    cq.correct_min_offset(0)
    assert cq.min_offset_in_queue == 13
    store.shutdown()


def test_gap_still_appends_like_rocketmq(tmp_path, caplog):
    store = ConsumeQueueStore(tmp_path, mapped_file_size=200)
    store.dispatch(DispatchRequest("T", 0, 0, 10, 0, 0, 0))
    store.dispatch(DispatchRequest("T", 0, 10, 10, 0, 0, 5))  # offset gap
    assert "logic queue order maybe wrong" in caplog.text
    assert store.find_consume_queue("T", 0).get(1) == (10, 10, 0)
    store.shutdown()


def test_correct_min_offset_and_delete_expired(tmp_path):
    store = ConsumeQueueStore(tmp_path, mapped_file_size=100)  # 5 units per file
    for i in range(12):
        store.dispatch(DispatchRequest("T", 0, 10 * i, 10, 0, 0, i))
    cq = store.find_consume_queue("T", 0)
    assert cq.delete_expired_file(55) == 1  # file 0 ends at phy 40 < 55; file 1 ends at 90
    assert cq.min_offset_in_queue == 6 and cq.get(5) is None and cq.get(6) == (60, 10, 0)
    store.shutdown()


def test_bad_file_size_is_named(tmp_path):
    qdir = tmp_path / "consumequeue" / "T" / "0"
    qdir.mkdir(parents=True)
    (qdir / f"{0:020d}").write_bytes(b"\0" * 40)
    store = ConsumeQueueStore(tmp_path)
    with pytest.raises(ConsumeQueueError, match=r"T/0/00000000000000000000.*size 40"):
        store.load()


def test_read_only_refuses_writes(fixture_root):
    store = ConsumeQueueStore(fixture_root / "rmq-classic", read_only=True)
    store.load()
    store.recover()
    cq = store.find_consume_queue("TopicA", 0, create=False)
    with pytest.raises(ConsumeQueueError, match="read-only"):
        cq.truncate_dirty_logic_files(0)
    store.shutdown()


def test_destroy_removes_files(tmp_path):
    store = ConsumeQueueStore(tmp_path, mapped_file_size=100)
    store.dispatch(DispatchRequest("T", 0, 0, 10, 0, 0, 0))
    store.destroy()
    assert not any((tmp_path / "consumequeue").rglob("*"))


def test_consume_queue_direct_api(tmp_path):
    cq = ConsumeQueue("T", 3, tmp_path / "consumequeue", 100)
    assert cq.get(0) is None and cq.get_last_offset() == -1
    assert cq.put_message_position_info(64, 8, -5, 0)
    assert cq.put_message_position_info(64, 8, -5, 0)  # duplicate: accepted, not re-written
    assert cq.max_offset_in_queue == 1 and cq.get(0) == (64, 8, -5) and cq.get_last_offset() == 72
    assert cq.roll_next_file(7) == 10
    cq.close()


def test_truncate_fixture_at_the_divide(fixture_set, manifests, store_copy):
    """Cutting the upgraded store's CQs at dividedCommitlogOffset leaves exactly the classic units."""
    root = store_copy(fixture_set.mixed)
    rows = cq_rows(manifests(fixture_set.mixed))
    below = [r for r in rows if r["commitLogOffset"] < fixture_set.divided_offset]
    expected: dict[str, int] = defaultdict(int)
    for r in below:
        expected[f"{r['topic']}-{r['queueId']}"] += 1
    store = ConsumeQueueStore(root)
    store.load()
    store.recover()
    store.truncate_dirty(fixture_set.divided_offset)
    assert {k: v for k, v in store.queue_offset_table().items() if v} == expected
    last = max(below, key=lambda r: r["commitLogOffset"])
    assert store.max_physical_offset() == last["commitLogOffset"] + last["storeSize"]
    store.shutdown()
    again = ConsumeQueueStore(root)  # the cut survives a restart
    again.load()
    again.recover()
    assert {k: v for k, v in again.queue_offset_table().items() if v} == expected
    if fixture_set.name == "plain":
        assert set(expected.values()) == {625}
    again.shutdown()


def test_bad_file_name_and_leftovers(tmp_path):
    """A file not named by a 20-digit offset is named in the error; a ``.creating`` leftover of a
    crash is removed at load; a new file never reuses a stale one of the same name."""
    qdir = tmp_path / "consumequeue" / "T" / "0"
    qdir.mkdir(parents=True)
    (qdir / "0000000000000000000x").write_bytes(b"\0" * 100)
    with pytest.raises(ConsumeQueueError, match=r"0000000000000000000x: file name is not a 20-digit start offset"):
        ConsumeQueueStore(tmp_path, mapped_file_size=100).load()
    (qdir / "0000000000000000000x").unlink()
    (qdir / f".{0:020d}.creating").write_bytes(b"\1" * 100)
    store = ConsumeQueueStore(tmp_path, mapped_file_size=100)
    store.load()
    assert not any(qdir.iterdir())
    (qdir / f"{0:020d}").write_bytes(b"\1" * 100)  # appeared after load (no queue file known)
    store.dispatch(DispatchRequest("T", 0, 0, 10, 0, 0, 0))
    store.shutdown()
    assert (qdir / f"{0:020d}").read_bytes() == struct.pack(">qiq", 0, 10, 0) + bytes(80)

"""IndexFile / IndexService against Apache's index files and on fresh files."""
from __future__ import annotations

import struct
from collections import defaultdict
from pathlib import Path

import pytest

from broker.store.checkpoint import StoreCheckpoint
from broker.store.dispatch import DispatchRequest
from broker.store.index_file import (
    IndexFile,
    IndexFileError,
    IndexService,
    index_file_size,
    time_millis_to_human_string,
)
from broker.store.java_hash import index_key_hash

SLOTS, NUM = 10_000, 40_000  # what the fixture stores were written with
MAX_LONG = (1 << 63) - 1


def indexed_keys(row: dict) -> list[str]:
    """``topic#key`` strings Apache indexed for one manifest row, in insertion order."""
    if row.get("sysFlag", 0) & 0xC == 0xC:  # ROLLBACK
        return []
    keys = [row["uniqKey"]] if row.get("uniqKey") else []
    keys += [k for k in row["keys"].split(" ") if k]
    return [f"{row['topic']}#{k}" for k in keys]


def request_for(row: dict) -> DispatchRequest:
    return DispatchRequest(
        topic=row["topic"], queue_id=row["queueId"], commitlog_offset=row["commitLogOffset"],
        msg_size=row["storeSize"], tags_code=0, store_timestamp=row["storeTimestamp"],
        consume_queue_offset=row["queueOffset"], keys=row["keys"], uniq_key=row.get("uniqKey", ""),
        sys_flag=row.get("sysFlag", 0),
    )


def _only_index_file(root: Path) -> Path:
    files = sorted((root / "index").iterdir())
    assert len(files) == 1
    return files[0]


@pytest.mark.parametrize("which", ["classic", "mixed"])
def test_fixture_index_answers_every_key(fixture_root, fixture_set, manifests, which):
    name = getattr(fixture_set, which)
    rows = sorted(manifests(name), key=lambda r: r["commitLogOffset"])
    svc = IndexService(fixture_root / name, SLOTS, NUM, read_only=True, max_msgs_num_batch=10_000)
    svc.load(last_exit_ok=True)
    try:
        # Expected answer for a key = every indexed entry with the same 32-bit hash, newest first
        # (IndexFile compares hashes only, like Java).
        by_hash: dict[int, list[int]] = defaultdict(list)
        n_entries = 0
        for row in rows:
            for k in indexed_keys(row):
                by_hash[index_key_hash(k)].append(row["commitLogOffset"])
                n_entries += 1
        (f,) = svc.index_files
        assert f.index_count == n_entries + 1
        assert f.begin_phy_offset == rows[0]["commitLogOffset"]
        assert f.end_phy_offset == rows[-1]["commitLogOffset"]
        has_uniq = False
        for row in rows:
            for full in indexed_keys(row):
                topic, key = full.split("#", 1)
                has_uniq |= key == row.get("uniqKey")
                got = svc.query_offset(topic, key, 10_000, 0, MAX_LONG)
                assert row["commitLogOffset"] in got, (full, row["commitLogOffset"])
                assert got == by_hash[index_key_hash(full)][::-1], full
        assert has_uniq == (fixture_set.name == "variety")
        rollback = [r for r in rows if r.get("sysFlag", 0) & 0xC == 0xC]
        for row in rollback:  # ROLLBACK keys are not indexed
            assert row["commitLogOffset"] not in svc.query_offset(row["topic"], row["uniqKey"], 64, 0, MAX_LONG)
        if fixture_set.name == "variety":
            assert rollback
            assert any(not r["keys"].isascii() for r in rows)
            assert any(" " in r["keys"] for r in rows)
        # the time window restricts results
        first = rows[0]
        k = indexed_keys(first)[-1].split("#", 1)[1]
        assert svc.query_offset(first["topic"], k, 64, first["storeTimestamp"] + 10**9, MAX_LONG) == []
    finally:
        svc.shutdown()


@pytest.mark.parametrize("which", ["classic", "mixed"])
def test_rebuild_from_manifest_is_byte_identical(fixture_root, fixture_set, manifests, tmp_path, which):
    """Same keys in the same order give the same bytes. The only difference is the *file name*:
    it is the wall-clock time at creation, which no rebuild can reproduce; the header's
    timestamps and offsets come from the messages and match."""
    name = getattr(fixture_set, which)
    rows = sorted(manifests(name), key=lambda r: r["commitLogOffset"])
    theirs = _only_index_file(fixture_root / name)
    svc = IndexService(tmp_path, SLOTS, NUM, clock=lambda: 1_795_321_775.956)
    for row in rows:
        svc.dispatch(request_for(row))
    for row in rows[-50:]:  # re-dispatch after a restart must not add entries
        svc.dispatch(request_for(row))
    svc.shutdown()
    ours = _only_index_file(tmp_path)
    assert ours.name == time_millis_to_human_string(1_795_321_775_956)
    a, b = ours.read_bytes(), theirs.read_bytes()
    assert len(a) == len(b) == index_file_size(SLOTS, NUM)
    assert a[:40] == b[:40], (struct.unpack(">qqqqii", a[:40]), struct.unpack(">qqqqii", b[:40]))
    assert a == b


def test_roll_over_and_checkpoint(tmp_path):
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    ticks = iter([1000.0, 1000.0, 2000.0, 3000.0])
    svc = IndexService(tmp_path, 4, 3, checkpoint=cp, clock=lambda: next(ticks))
    for i in range(5):  # 2 entries per file (indexCount starts at 1, full at 3)
        svc.dispatch(DispatchRequest("T", 0, 100 * i, 100, 0, 10_000 + 1000 * i, i, keys=f"k{i}"))
    files = svc.index_files
    assert len(files) == 3
    assert files[1].begin_phy_offset == 200 and files[1].begin_timestamp == 12_000
    assert cp.index_msg_timestamp == files[1].end_timestamp == 13_000  # last full file flushed
    for i in range(5):
        assert svc.query_offset("T", f"k{i}", 64, 0, MAX_LONG) == [100 * i]
    assert svc.delete_expired_file(250) == 1
    assert svc.query_offset("T", "k0", 64, 0, MAX_LONG) == []
    svc.shutdown()
    cp.shutdown()


def test_a_record_whose_keys_straddle_a_roll_is_indexed_whole(tmp_path):
    """reserve_keys covers the keys in the file it was asked of; a key put after a roll checks
    its own blocks in the new file (put_key(reserved=False)), and every key is found."""
    ticks = iter([1000.0, 2000.0, 3000.0])
    svc = IndexService(tmp_path, 4, 3, clock=lambda: next(ticks))  # 2 entries per file
    svc.dispatch(DispatchRequest("T", 0, 0, 100, 0, 10_000, 0, keys="a b c", uniq_key="U"))
    assert [f.index_count - 1 for f in svc.index_files] == [2, 2]
    for key in ("U", "a", "b", "c"):
        assert svc.query_offset("T", key, 64, 0, MAX_LONG) == [0], key
    svc.shutdown()


def test_abnormal_exit_drops_files_newer_than_checkpoint(tmp_path):
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    ticks = iter([1000.0, 2000.0])
    svc = IndexService(tmp_path, 4, 3, checkpoint=cp, clock=lambda: next(ticks))
    for i in range(3):
        svc.dispatch(DispatchRequest("T", 0, 100 * i, 100, 0, 10_000 + 1000 * i, i, keys=f"k{i}"))
    svc.shutdown()
    assert cp.index_msg_timestamp == 11_000
    again = IndexService(tmp_path, 4, 3, checkpoint=cp)
    again.load(last_exit_ok=True)
    assert len(again.index_files) == 2
    again.shutdown()
    crashed = IndexService(tmp_path, 4, 3, checkpoint=cp)
    crashed.load(last_exit_ok=False)
    assert [f.end_timestamp for f in crashed.index_files] == [11_000]
    assert len(list((tmp_path / "index").iterdir())) == 1
    crashed.shutdown()


def test_multiple_keys_uniq_key_and_hash_chain(tmp_path):
    svc = IndexService(tmp_path, 1, 100)  # a single slot: every key shares one chain
    svc.dispatch(DispatchRequest("T", 0, 0, 10, 0, 5_000, 0, keys="a  b", uniq_key="U1"))
    svc.dispatch(DispatchRequest("T", 0, 10, 10, 0, 6_000, 1, keys="a", uniq_key="U2"))
    svc.dispatch(DispatchRequest("T", 0, 20, 10, 0, 7_000, 2, keys="z", sys_flag=0xC))  # ROLLBACK
    svc.dispatch(DispatchRequest("T", 0, 30, 10, 0, 8_000, 3, keys="p", sys_flag=0x4))  # PREPARED
    assert svc.query_offset("T", "a", 64, 0, MAX_LONG) == [10, 0]
    assert svc.query_offset("T", "a", 1, 0, MAX_LONG) == [10]
    assert svc.query_offset("T", "b", 64, 0, MAX_LONG) == [0]
    assert svc.query_offset("T", "U2", 64, 0, MAX_LONG) == [10]
    assert svc.query_offset("T", "z", 64, 0, MAX_LONG) == []
    assert svc.query_offset("T", "p", 64, 0, MAX_LONG) == [30]
    assert svc.query_offset("Other", "a", 64, 0, MAX_LONG) == []
    assert svc.query_offset("T", "a", 64, 5_500, MAX_LONG) == [10]  # time window
    (f,) = svc.index_files
    assert f.index_count == 7 and f.hash_slot_count == 1
    svc.shutdown()


def test_time_diff_is_clamped(tmp_path):
    f = IndexFile(tmp_path / "x", 2, 5)
    assert f.put_key("k", 1, 10_000)
    assert f.put_key("k", 2, 5_000)  # earlier than begin: 0
    assert f.put_key("k", 3, 10_000 + (1 << 33) * 1000)  # far future: Integer.MAX_VALUE
    base = 40 + 2 * 4
    f.close()
    data = (tmp_path / "x").read_bytes()  # as written to the file
    diffs = [struct.unpack_from(">iqii", data, base + k * 20)[2] for k in (1, 2, 3)]
    assert diffs == [0, 0, 0x7FFFFFFF]


def test_geometry_mismatch_is_named(fixture_root):
    path = _only_index_file(fixture_root / "rmq-classic")
    with pytest.raises(IndexFileError, match=rf"{path.name}.*maxHashSlotNum=5000000"):
        IndexFile(path, 5_000_000, 20_000_000, read_only=True)


def test_file_name_format():
    assert len(time_millis_to_human_string(1_795_321_775_956)) == 17
    assert time_millis_to_human_string(1_795_321_775_956).endswith("956")


def test_a_crash_while_creating_an_index_file_leaves_nothing_that_blocks_start(tmp_path):
    """Issue 13.4: a new IndexFile is made whole under a temporary name and renamed into place, so a
    kill -9 never leaves a 0-byte file that a restart refuses; leftovers of either kind are removed."""
    svc = IndexService(tmp_path, 4, 3, clock=lambda: 1000.0)
    svc.dispatch(DispatchRequest("T", 0, 0, 100, 0, 10_000, 0, keys="k0"))
    [made] = svc.index_files
    assert made.path.stat().st_size == index_file_size(4, 3)
    header = struct.unpack_from(">qqqqii", made.path.read_bytes())  # on disk before any flush
    assert header == (10_000, 10_000, 0, 0, 1, 2)
    assert not list((tmp_path / "index").glob("*.creating"))  # renamed into place
    svc.shutdown()
    index_dir = tmp_path / "index"
    (index_dir / (time_millis_to_human_string(2_000_000) + ".creating")).write_bytes(b"\0" * 10)  # killed mid-create
    (index_dir / ("." + time_millis_to_human_string(2_500_000) + ".creating")).write_bytes(b"\0" * 10)  # ditto, today
    (index_dir / time_millis_to_human_string(3_000_000)).write_bytes(b"")  # an older version's 0-byte file
    again = IndexService(tmp_path, 4, 3)
    again.load(last_exit_ok=True)
    assert [f.path for f in again.index_files] == [made.path]
    assert sorted(p.name for p in index_dir.iterdir()) == [made.path.name]
    assert again.query_offset("T", "k0", 10, 0, 10**13) == [0]
    again.shutdown()
    rolled = IndexFile(index_dir / time_millis_to_human_string(4_000_000), 4, 3, 500, 7_000)
    header = struct.unpack_from(">qqqqii", rolled.path.read_bytes())  # in place from the rename on
    assert header == (7_000, 7_000, 500, 500, 0, 1)
    rolled.destroy()

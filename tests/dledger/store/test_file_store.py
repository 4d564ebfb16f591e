"""DLedgerMmapFileStore: ports of DLedgerMappedFileStoreTest plus recovery/corruption cases."""
from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest

from tests.dledger.store.diskfull import small_ext4
from dledger.entry import INDEX_UNIT_SIZE, DLedgerEntry, EntryCorruptionError, read_header
from dledger.store.errors import (AppendMismatchError, CommittedTruncationError, DiskFullError,
                                  IndexOutOfRangeError, StoreLayoutError)
from dledger.store.file_store import DLedgerMmapFileStore
from dledger.store.mmap_file_list import MIN_BLANK_LEN


def make(base: Path, data_size: int = 10 * 1024 * 1024, index_size: int = INDEX_UNIT_SIZE * 1024 * 1024,
         delete_newest: int = 0, **kw) -> DLedgerMmapFileStore:
    """Like the Java test's createFileStore: optionally delete the newest data files first."""
    if delete_newest:
        d = base / "dledger-n0" / "data"
        for name in sorted(os.listdir(d))[-delete_newest:]:
            os.unlink(d / name)
    return DLedgerMmapFileStore(base, "n0", data_file_size=data_size, index_file_size=index_size, **kw).startup()


def flush_and_close(store: DLedgerMmapFileStore) -> None:
    while store.flush_pos != store.write_pos:
        store.flush()
    store.shutdown()


def entry_file(store: DLedgerMmapFileStore, index: int) -> tuple[Path, int]:
    pos, _ = store.get_entry_pos_and_size(index)
    f = store.data_file_list.find_file(pos)
    return f.path, pos - f.from_offset


def poke(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


# ----------------------------------------------------------------------------- DLedger's own tests


def test_committed_index(tmp_path: Path) -> None:
    store = make(tmp_path)
    for i in range(100):
        assert store.append_as_leader(bytes(128), 0).index == i
    store.update_committed_index(0, 90)
    assert (store.ledger_end_index, store.committed_index) == (99, 90)
    flush_and_close(store)
    store = make(tmp_path)
    assert (store.ledger_begin_index, store.ledger_end_index, store.committed_index) == (0, 99, 90)
    assert (tmp_path / "dledger-n0" / "checkpoint").read_text() == "committedIndex=90\nendIndex=99\n"


def test_append_hook(tmp_path: Path) -> None:
    store = make(tmp_path)

    def hook(entry: DLedgerEntry, buffer: memoryview, body_offset: int) -> None:
        assert len(buffer) == entry.size and read_header(buffer).pos == entry.pos
        struct.pack_into(">q", buffer, body_offset, entry.index)

    store.add_append_hook(hook)
    store.add_append_hook(hook)  # registered once
    for i in range(10):
        assert store.append_as_leader(bytes(128), 0).index == i
    assert store.ledger_end_index == 9
    for i in range(10):
        e = store.get(i)
        assert e.index == i and struct.unpack_from(">q", e.body)[0] == i


def test_append_as_leader(tmp_path: Path) -> None:
    store = make(tmp_path, current_term=lambda: 0)
    for i in range(10):
        assert store.append_as_leader(b"Hello Leader%d" % i, 0).index == i
    for i in range(10):
        e = store.get(i)
        assert e.index == i and e.body == b"Hello Leader%d" % i
    for i in range(10):
        store.update_committed_index(0, i)
        assert store.committed_index == i
        e = store.get(i)
        assert store.committed_pos == e.pos + e.size
    assert store.committed_pos == store.data_file_list.max_wrote_position
    store.update_committed_index(0, -1)  # ignored: -1, smaller index, older term
    store.update_committed_index(0, 0)
    store.update_committed_index(-1, 10)
    assert (store.ledger_end_index, store.committed_index) == (9, 9)


def test_normal_recovery(tmp_path: Path) -> None:
    store = make(tmp_path)
    for i in range(10):
        store.append_as_leader(b"Hello Leader With Recovery%d" % i, 0)
    flush_and_close(store)
    store = make(tmp_path)
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, 9)
    assert [store.get(i).body for i in range(10)] == [b"Hello Leader With Recovery%d" % i for i in range(10)]
    assert store.last_recovery.stop_reason is None


def test_abnormal_recovery(tmp_path: Path) -> None:
    geometry = dict(data_size=10 * 1024 + MIN_BLANK_LEN, index_size=10 * INDEX_UNIT_SIZE)
    store = make(tmp_path, **geometry)
    for i in range(100):
        assert store.append_as_leader(bytes(1024), 0).index == i
    assert len(store.data_file_list.files) == 12
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, 99)
    flush_and_close(store)

    store = make(tmp_path, delete_newest=2, **geometry)
    assert len(store.data_file_list.files) == 10
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, 89)
    assert [store.get(i).index for i in range(90)] == list(range(90))
    assert store.index_file_list.max_wrote_position == 90 * INDEX_UNIT_SIZE
    store.shutdown()

    store = make(tmp_path, delete_newest=10, **geometry)
    assert len(store.data_file_list.files) == 0
    assert (store.ledger_begin_index, store.ledger_end_index) == (-1, -1)
    store.shutdown()


def test_truncate_to_entry(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=8 * 1024 + MIN_BLANK_LEN, index_size=8 * INDEX_UNIT_SIZE)
    for i in range(10):
        store.append_as_leader(bytes([i]) * 1024, 0)
    assert len(store.data_file_list.files) == 2
    leader = [store.get(i) for i in range(10)]  # the "other" store of the Java test

    assert store.truncate_to_entry(leader[5]) == 5  # truncate the mid
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, 5)
    assert store.data_file_list.max_wrote_position == leader[5].pos + leader[5].size
    assert store.index_file_list.max_wrote_position == 6 * INDEX_UNIT_SIZE

    assert store.truncate_to_entry(leader[6].encode(crc=True)) == 6  # just after: written
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, 6)
    assert store.data_file_list.max_wrote_position == leader[6].pos + leader[6].size
    assert store.index_file_list.max_wrote_position == 7 * INDEX_UNIT_SIZE

    assert store.truncate_to_entry(leader[9]) == 9  # to the end: both lists rebuilt around it
    assert (store.ledger_begin_index, store.ledger_end_index) == (9, 9)
    assert store.data_file_list.max_wrote_position == leader[9].pos + leader[9].size
    assert store.index_file_list.max_wrote_position == 10 * INDEX_UNIT_SIZE
    assert store.get(9) == leader[9]
    with pytest.raises(IndexOutOfRangeError):
        store.get(8)
    flush_and_close(store)
    store = make(tmp_path, data_size=8 * 1024 + MIN_BLANK_LEN, index_size=8 * INDEX_UNIT_SIZE)
    # DLedger's recovery does not find an entry that starts mid-file after a rebuild: the
    # log restarts empty (the leader re-sends it). Nothing is invented.
    assert store.ledger_end_index in (-1, 9)


def test_append_as_follower(tmp_path: Path) -> None:
    store = make(tmp_path)
    pos = 0
    for i in range(10):
        e = DLedgerEntry(body=b"Hello Follower%d" % i, index=i, term=0, pos=pos)
        assert store.append_as_follower(e) == i
        pos += e.compute_size_in_bytes()
    assert [store.get(i).body for i in range(10)] == [b"Hello Follower%d" % i for i in range(10)]


def test_revise_where_position(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=8 * 1024 + MIN_BLANK_LEN, index_size=8 * INDEX_UNIT_SIZE)
    for i in range(20):
        store.append_as_leader(bytes(1024), 0)
    store.data_file_list.flush()
    assert len(store.data_file_list.files) == 3
    leader = [store.get(i) for i in range(20)]
    store.update_committed_index(0, 14)  # files 0 and 1 now hold committed entries only
    assert store.delete_expired_files(0, force=True) == 2
    assert store.ledger_begin_index == 14
    assert store.truncate_to_entry(leader[15]) == 15
    assert (store.ledger_begin_index, store.ledger_end_index) == (14, 15)
    assert store.data_file_list.max_wrote_position == leader[15].pos + leader[15].size
    assert store.index_file_list.max_wrote_position == 16 * INDEX_UNIT_SIZE
    assert store.flush_pos >= store.data_file_list.first_file.from_offset


# ----------------------------------------------------------------------------- batches and replication


def test_batch_positions(tmp_path: Path) -> None:
    """AppendAndPushTest.testBatchAppend: positions = 48*i + 128*(1+i)*i/2."""
    store = make(tmp_path)
    entries = store.append_batch_as_leader([bytes(128 * (i + 1)) for i in range(10)], 3)
    assert [e.pos for e in entries] == [48 * i + 128 * (1 + i) * i // 2 for i in range(10)]
    assert [e.index for e in entries] == list(range(10)) and {e.term for e in entries} == {3}


def _contents(d: Path) -> dict[str, bytes]:
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}


def test_batch_equals_single_appends_across_file_rolls(tmp_path: Path) -> None:
    bodies = [bytes([i % 250 + 1]) * (50 + (i * 37) % 700) for i in range(300)]
    kw = dict(data_size=16 * 1024, index_size=64 * INDEX_UNIT_SIZE)
    single, batched = make(tmp_path / "a", **kw), make(tmp_path / "b", **kw)
    hook = lambda e, buf, off: struct.pack_into(">q", buf, off + 8, e.pos + off)  # noqa: E731
    single.add_append_hook(hook)
    batched.add_append_hook(hook)
    for b in bodies:
        single.append_as_leader(b, 1)
    i = 0
    for n in (1, 7, 40, 2, 100, 150):
        batched.append_batch_as_leader(bodies[i:i + n], 1)
        i += n
    flush_and_close(single)
    flush_and_close(batched)
    for sub in ("data", "index"):
        assert _contents(tmp_path / "a" / "dledger-n0" / sub) == _contents(tmp_path / "b" / "dledger-n0" / sub)
    assert len(os.listdir(tmp_path / "a" / "dledger-n0" / "data")) > 5


def test_follower_replicates_leader_bytes(tmp_path: Path) -> None:
    kw = dict(data_size=8 * 1024, index_size=32 * INDEX_UNIT_SIZE, first_data_file_offset=3 * 8 * 1024)
    leader, follower = make(tmp_path / "l", **kw), make(tmp_path / "f", **kw)
    for term in (1, 2, 2, 5):
        leader.append_batch_as_leader([bytes([term]) * (100 + 13 * k) for k in range(40)], term)
    next_index = 0
    while next_index <= leader.ledger_end_index:
        views = leader.get_raw(next_index, next_index + 1000, max_bytes=3000)
        assert 1 <= len(views) and sum(len(v) for v in views) <= max(3000, len(views[0]))
        if next_index % 2:
            follower.append_batch_as_follower(b"".join(views))
        else:
            follower.append_batch_as_follower(views)
        next_index += len(views)
    assert (follower.ledger_end_index, follower.ledger_end_term) == (159, 5)
    assert follower.term_at(159) == 5 and follower.term_at(0) == 1 and follower.term_at(-1) == -1
    flush_and_close(leader)
    flush_and_close(follower)
    for sub in ("data", "index"):
        assert _contents(tmp_path / "l" / "dledger-n0" / sub) == _contents(tmp_path / "f" / "dledger-n0" / sub)


def test_empty_follower_adopts_leader_layout(tmp_path: Path) -> None:
    leader = make(tmp_path / "l", data_size=4096, first_data_file_offset=8192)
    follower = make(tmp_path / "f", data_size=4096)  # does not know the divided offset
    leader.append_batch_as_leader([b"x" * 100] * 50, 1)
    follower.append_batch_as_follower(leader.get_raw(0, 50))
    assert follower.get(0).pos == 8192 and follower.get(49) == leader.get(49)


def test_follower_rejects_misplaced_or_corrupt_entries(tmp_path: Path) -> None:
    leader, follower = make(tmp_path / "l"), make(tmp_path / "f")
    leader.append_batch_as_leader([b"a" * 10, b"b" * 10, b"c" * 10], 1)
    follower.append_as_follower(leader.get_raw(0, 1)[0])
    with pytest.raises(AppendMismatchError, match="expected 1"):
        follower.append_as_follower(leader.get_raw(2, 3)[0])
    moved = bytearray(leader.get_raw(1, 2)[0])
    struct.pack_into(">q", moved, 24, 4096)
    with pytest.raises(AppendMismatchError, match="carries pos 4096"):
        follower.append_as_follower(moved)
    flipped = bytearray(b"".join(leader.get_raw(1, 3)))
    flipped[-1] ^= 0x40
    with pytest.raises(EntryCorruptionError, match="CRC"):
        follower.append_batch_as_follower(flipped)
    older = DLedgerEntry(body=b"z", index=1, term=0, pos=leader.get(1).pos)
    with pytest.raises(AppendMismatchError, match="term 0 < ledger end term 1"):
        follower.append_as_follower(older)
    assert follower.ledger_end_index == 0 and follower.write_pos == leader.get(1).pos  # nothing written
    assert follower.append_batch_as_follower(leader.get_raw(1, 3)) == 2


# ----------------------------------------------------------------------------- truncate / commit rules


def test_truncate_by_index(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=4096, index_size=4 * INDEX_UNIT_SIZE)
    entries = store.append_batch_as_leader([bytes([i]) * 300 for i in range(30)], 1)
    store.update_committed_index(1, 10)
    assert store.truncate(20) == 20
    assert (store.ledger_end_index, store.write_pos) == (20, entries[20].pos + entries[20].size)
    assert store.index_file_list.max_wrote_position == 21 * INDEX_UNIT_SIZE
    with pytest.raises(CommittedTruncationError):
        store.truncate(9)
    with pytest.raises(IndexOutOfRangeError):
        store.truncate(25)
    again = store.append_as_leader(b"new", 2)  # lands where 21 was
    assert (again.index, again.pos) == (21, entries[21].pos)
    flush_and_close(store)
    store = make(tmp_path, data_size=4096, index_size=4 * INDEX_UNIT_SIZE)
    assert (store.ledger_end_index, store.ledger_end_term, store.get(21).body) == (21, 2, b"new")


def test_truncate_everything(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=4096, first_data_file_offset=4096 * 5)
    store.append_batch_as_leader([b"x"] * 5, 1)
    assert store.truncate(-1) == -1
    assert (store.ledger_begin_index, store.ledger_end_index, store.ledger_end_term) == (-1, -1, -1)
    e = store.append_as_leader(b"y", 2)
    assert (e.index, e.pos, store.ledger_begin_index) == (0, 4096 * 5, 0)


def test_truncated_suffix_does_not_come_back(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.append_batch_as_leader([b"x" * 100] * 10, 1)
    store.truncate(4)
    flush_and_close(store)
    assert make(tmp_path).ledger_end_index == 4


def test_terms_never_decrease(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.append_as_leader(b"a", 5)
    with pytest.raises(AppendMismatchError):
        store.append_as_leader(b"b", 4)
    assert store.ledger_end_index == 0


def test_get_raw_bounds_and_limits(tmp_path: Path) -> None:
    store = make(tmp_path, index_size=4 * INDEX_UNIT_SIZE)
    store.append_batch_as_leader([bytes(100)] * 10, 1)
    assert len(store.get_raw(0, 100)) == 10  # clipped at the end
    assert len(store.get_raw(3, 9)) == 6  # across index files of 4 units
    assert len(store.get_raw(0, 10, max_bytes=3 * 148)) == 3
    assert len(store.get_raw(0, 10, max_bytes=1)) == 1  # always at least one
    assert store.get_raw(10, 12) == []
    with pytest.raises(IndexOutOfRangeError):
        store.get(10)


def test_flush_returns_flushed_index_from_worker_thread(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=64 * 1024)
    assert store.flush() == -1
    stop = threading.Event()
    seen: list[int] = []

    def worker() -> None:
        while not stop.is_set():
            seen.append(store.flush())

    t = threading.Thread(target=worker)
    t.start()
    try:
        for _ in range(200):
            store.append_batch_as_leader([bytes(200)] * 10, 1)
    finally:
        stop.set()
        t.join()
    assert seen == sorted(seen) and seen[-1] <= 1999
    assert store.flush() == 1999
    store.truncate(1500)
    assert store.flushed_index == 1500


def test_checkpoint_commits_only_flushed(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.append_batch_as_leader([b"a"] * 10, 1)
    store.flush()
    store.append_batch_as_leader([b"b"] * 10, 1)
    store.update_committed_index(1, 19)
    store.persist_checkpoint()
    assert (tmp_path / "dledger-n0" / "checkpoint").read_text() == "committedIndex=9\nendIndex=19\n"


# ----------------------------------------------------------------------------- recovery and corruption


def test_recovery_truncates_corrupt_uncommitted_tail(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=4096)
    store.append_batch_as_leader([bytes([i]) * 200 for i in range(40)], 1)
    store.update_committed_index(1, 19)
    flush_and_close(store)
    probe = make(tmp_path, data_size=4096)
    path, rel = entry_file(probe, 27)
    end26 = sum(probe.get_entry_pos_and_size(26))
    probe.data_file_list.shutdown()
    probe.index_file_list.shutdown()
    poke(path, rel + 24, struct.pack(">q", 12345))  # corrupt the pos field of entry 27 ...
    _zero_after(tmp_path, end26 + 100)  # ... and tear the write there: nothing valid follows
    store = make(tmp_path, data_size=4096)
    assert store.ledger_end_index == 26 and store.write_pos == end26
    assert store.index_file_list.max_wrote_position == 27 * INDEX_UNIT_SIZE
    assert "pos 12345" in store.last_recovery.stop_reason
    assert store.committed_index == 19


def _zero_after(base: Path, pos: int) -> None:
    """Zero every data byte from absolute ``pos`` on (a write torn there)."""
    for f in sorted((base / "dledger-n0" / "data").iterdir()):
        start, size = int(f.name), f.stat().st_size
        if start + size > pos:
            rel = max(pos - start, 0)
            poke(f, rel, bytes(size - rel))


@pytest.mark.parametrize("field", ["pos", "size", "body"])
def test_recovery_refuses_mid_log_corruption_beyond_checkpoint(tmp_path: Path, field: str) -> None:
    """An invalid entry followed by valid ones is corruption, not a torn tail, even beyond the
    checkpoint's (lagging) committed index: refused naming file and offset; override truncates."""
    store = make(tmp_path, data_size=4096)
    store.append_batch_as_leader([bytes([i]) * 200 for i in range(40)], 1)
    store.update_committed_index(1, 19)
    flush_and_close(store)
    probe = make(tmp_path, data_size=4096)
    path, rel = entry_file(probe, 27)
    pos27 = probe.get_entry_pos_and_size(27)[0]
    probe.data_file_list.shutdown()
    probe.index_file_list.shutdown()
    at, data = {"pos": (24, struct.pack(">q", 12345)), "size": (4, struct.pack(">i", 7)),
                "body": (48 + 10, b"\xee")}[field]
    poke(path, rel + at, data)
    with pytest.raises(EntryCorruptionError) as info:
        make(tmp_path, data_size=4096)
    msg = str(info.value)
    assert "corrupt entry 27" in msg and path.name in msg and f"pos {pos27}" in msg and "index 28" in msg
    assert "replica" in msg and "allow_truncate_committed" not in msg and "mqupgrade validate" in msg  # issue 13.8
    store = make(tmp_path, data_size=4096, allow_truncate_committed=True)
    assert (store.ledger_end_index, store.committed_index) == (26, 19)


def test_stale_bytes_behind_a_truncation_are_a_torn_tail(tmp_path: Path) -> None:
    """Truncate, then append fewer bytes than were cut: the old suffix's bytes stay on disk past
    the new end and must not be taken for valid data following corruption."""
    store = make(tmp_path, data_size=1 << 16)
    store.append_batch_as_leader([bytes([i]) * 300 for i in range(30)], 1)
    store.truncate(9)
    store.append_batch_as_leader([b"n" * 500], 2)  # index 10 now ends mid-way through old entry 11
    store.append_batch_as_leader([b"m" * 20], 2)
    flush_and_close(store)
    store = make(tmp_path, data_size=1 << 16)
    assert (store.ledger_end_index, store.ledger_end_term) == (11, 2)
    assert store.get(11).body == b"m" * 20
    assert store.last_recovery.stop_reason is not None  # the stale bytes were met, and dropped


def test_recovery_refuses_to_truncate_committed_data(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=4096)
    store.append_batch_as_leader([bytes([i]) * 200 for i in range(40)], 1)
    store.update_committed_index(1, 39)
    flush_and_close(store)
    probe = make(tmp_path, data_size=4096)
    path, rel = entry_file(probe, 30)
    pos30 = probe.get_entry_pos_and_size(30)[0]
    probe.data_file_list.shutdown()
    probe.index_file_list.shutdown()
    poke(path, rel + 48 + 100, b"\xee")  # a bit flip in a committed body: CRC catches it
    with pytest.raises(EntryCorruptionError) as info:
        make(tmp_path, data_size=4096)
    msg = str(info.value)
    assert "committed entry 30" in msg and "CRC" in msg and path.name in msg and f"pos {pos30}" in msg
    store = make(tmp_path, data_size=4096, allow_truncate_committed=True)  # operator override
    assert (store.ledger_end_index, store.committed_index) == (29, 29)


def test_recovery_rewrites_index_from_data(tmp_path: Path) -> None:
    kw = dict(data_size=4096, index_size=16 * INDEX_UNIT_SIZE)
    store = make(tmp_path, **kw)
    store.append_batch_as_leader([bytes([i]) * (60 + i) for i in range(100)], 2)
    flush_and_close(store)
    index_dir = tmp_path / "dledger-n0" / "index"
    before = _contents(index_dir)
    # garble one unit in the middle and delete the last index file entirely
    names = sorted(before)
    poke(index_dir / names[2], 5 * INDEX_UNIT_SIZE + 4, struct.pack(">q", 1))
    os.unlink(index_dir / names[-1])
    store = make(tmp_path, **kw)
    assert store.ledger_end_index == 99
    assert [store.get(i).body for i in (0, 37, 99)] == [bytes([0]) * 60, bytes([37]) * 97, bytes([99]) * 159]
    flush_and_close(store)
    assert _contents(index_dir) == before


def test_recovery_starts_from_third_last_file(tmp_path: Path) -> None:
    """Files before the pre-check start are trusted (not scanned), as in DLedger."""
    kw = dict(data_size=2048)
    store = make(tmp_path, **kw)
    store.append_batch_as_leader([bytes(200)] * 100, 1)
    flush_and_close(store)
    data = sorted((tmp_path / "dledger-n0" / "data").iterdir())
    poke(data[0], 48, b"\x01")  # damage the body of entry 0 (CRC) in the first file
    store = make(tmp_path, **kw)
    assert store.ledger_end_index == 99 and store.last_recovery.first_scanned_index > 0
    with pytest.raises(EntryCorruptionError, match="CRC"):
        store.get(0)  # still detected when read


def test_recovery_rejects_bad_layout(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=4096)
    store.append_batch_as_leader([bytes(300)] * 50, 1)
    flush_and_close(store)
    data = tmp_path / "dledger-n0" / "data"
    os.unlink(data / sorted(os.listdir(data))[1])
    with pytest.raises(StoreLayoutError, match="damaged"):
        make(tmp_path, data_size=4096)
    with pytest.raises(StoreLayoutError, match="is 4096 bytes but the configured file size is 8192.*Set the file size back to 4096"):
        make(tmp_path, data_size=8192)


def test_recovery_refuses_to_drop_whole_files(tmp_path: Path) -> None:
    store = make(tmp_path, data_size=2048)
    store.append_batch_as_leader([bytes(200)] * 100, 1)
    flush_and_close(store)
    data = sorted((tmp_path / "dledger-n0" / "data").iterdir())
    for f in data[-6:-2]:  # wipe the first entry of four files before the last two
        poke(f, 0, bytes(48))
    with pytest.raises(StoreLayoutError, match="more than a file before the last file"):
        make(tmp_path, data_size=2048)


# ----------------------------------------------------------------------------- disk full


@pytest.fixture
def tiny_fs(tmp_path: Path):
    yield from small_ext4(tmp_path)


def test_disk_full_leaves_store_consistent(tiny_fs: Path) -> None:
    kw = dict(data_size=64 * 1024, index_size=1024 * INDEX_UNIT_SIZE)
    store = make(tiny_fs, **kw)
    acked = 0
    with pytest.raises(DiskFullError):
        for _ in range(10_000):
            acked += len(store.append_batch_as_leader([bytes(range(1, 201)) * 10] * 5, 1))
    assert store.ledger_end_index == acked - 1 and acked > 0
    end_pos = store.write_pos
    assert store.index_file_list.max_wrote_position == acked * INDEX_UNIT_SIZE
    assert store.get(acked - 1).index == acked - 1
    store.flush()
    store.data_file_list.shutdown()
    store.index_file_list.shutdown()
    again = make(tiny_fs, **kw)  # a restart sees exactly the acknowledged entries
    assert (again.ledger_end_index, again.write_pos) == (acked - 1, end_pos)
    again.disk_full = True
    with pytest.raises(DiskFullError, match="marked full"):
        again.append_as_leader(b"x", 1)
    with pytest.raises(DiskFullError, match="checkpoint"):
        again.shutdown()  # the checkpoint cannot be written on a full disk; files are closed anyway
    assert again.data_file_list.files == []


def test_flushed_positions_right_after_truncate(tmp_path: Path) -> None:
    """DLedgerManagedFileStoreTruncateTest.testDataFileListFlushedPosRightAfterTruncate."""
    store = make(tmp_path, data_size=8 * 1024 + MIN_BLANK_LEN, index_size=8 * INDEX_UNIT_SIZE)
    for i in range(7):
        assert store.append_as_leader(bytes(1024), 0).index == i
    store.flush()
    assert len(store.data_file_list.files) == 1
    assert store.flush_pos == store.data_file_list.max_wrote_position
    assert store.truncate_to_entry(store.get(5)) == 5
    assert store.data_file_list.flushed_where == store.data_file_list.max_wrote_position
    # the existing unit of entry 5 is rewritten, so it is not flushed any more
    assert store.index_file_list.flushed_where == store.index_file_list.max_wrote_position - INDEX_UNIT_SIZE
    assert store.flushed_index == 5 and store.flush() == 5

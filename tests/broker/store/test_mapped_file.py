"""MappedFile / MappedFileQueue: names, sizes, positions, roll, truncate, expiry, layout errors."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from broker.store.errors import StoreLayoutError
from broker.store.mapped_file import FileSizeError, MappedFile, file_name_to_offset, offset_to_file_name
from broker.store.mapped_file_queue import AllocateMappedFileService, MappedFileQueue

SIZE = 64 * 1024


def test_file_names_are_20_digit_offsets() -> None:
    assert offset_to_file_name(1073741824) == "00000000001073741824"
    assert file_name_to_offset("00000000001073741824") == 1073741824
    with pytest.raises(StoreLayoutError):
        file_name_to_offset("123")


def test_append_select_flush_positions(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_to_file_name(SIZE), SIZE)
    assert os.path.getsize(mf.path) == SIZE and mf.file_from_offset == SIZE
    assert mf.append(b"abc") == 0 and mf.append(b"defg") == 3
    assert (mf.wrote_position, mf.committed_position, mf.flushed_position) == (7, 7, 0)
    assert bytes(mf.select(0)) == b"abcdefg" and bytes(mf.select(3, 2)) == b"de"
    assert mf.select(5, 10) is None and mf.select(8) is None and mf.select(7) is None
    assert mf.flush() == 7 and mf.flushed_position == 7
    with pytest.raises(ValueError):
        mf.append(bytes(SIZE))
    mf.append_end_of_file(b"\x00\x00\x00\x08\xcb\xd41\x94")
    assert mf.is_full() and mf.remaining == 0
    view = mf.select(0)  # a live view must not make close() fail
    mf.destroy()
    assert not mf.path.exists() and bytes(view[:3]) == b"abc"


def test_warmed_file_is_allocated_not_sparse(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / offset_to_file_name(0), 1 << 20, warm=True)
    assert os.stat(mf.path).st_blocks * 512 >= 1 << 20
    cold = MappedFile(tmp_path / offset_to_file_name(4 << 20), 4 << 20)  # not warmed: only the first
    assert os.stat(cold.path).st_blocks * 512 <= 1 << 20  # granule gets blocks up front (not the file)
    mf.close()
    cold.close()


def test_wrong_size_file_is_a_layout_error(tmp_path: Path) -> None:
    (tmp_path / offset_to_file_name(0)).write_bytes(b"x" * 100)
    q = MappedFileQueue(tmp_path, SIZE)
    with pytest.raises(StoreLayoutError, match=r"00000000000000000000: length 100"):
        q.load()


def test_gap_in_files_is_a_layout_error(tmp_path: Path) -> None:
    for off in (0, 2 * SIZE):
        with open(tmp_path / offset_to_file_name(off), "wb") as fh:
            fh.truncate(SIZE)
    with pytest.raises(StoreLayoutError, match="missing"):
        MappedFileQueue(tmp_path, SIZE).load()


def test_queue_roll_find_truncate_and_allocation(tmp_path: Path) -> None:
    alloc = AllocateMappedFileService(warm=False)
    q = MappedFileQueue(tmp_path, SIZE, alloc)
    q.load()
    first = q.get_last_mapped_file(0)
    assert first is not None and first.file_from_offset == 0
    first.append(bytes(SIZE))
    second = q.get_last_mapped_file(0)
    assert second.file_from_offset == SIZE
    time.sleep(0.2)  # the allocator pre-creates the file after the one it handed out
    assert (tmp_path / offset_to_file_name(2 * SIZE)).exists()
    second.append(b"x" * 100)
    assert q.get_max_offset() == SIZE + 100 and q.get_min_offset() == 0
    assert q.find_mapped_file_by_offset(SIZE + 5) is second
    assert q.find_mapped_file_by_offset(5 * SIZE) is None
    assert q.find_mapped_file_by_offset(5 * SIZE, True) is first
    assert q.flush_all() == SIZE + 100
    q.truncate_dirty_files(SIZE - 10)
    assert len(q.mapped_files) == 1 and q.get_max_offset() == SIZE - 10
    assert not (tmp_path / offset_to_file_name(SIZE)).exists()
    assert not (tmp_path / offset_to_file_name(2 * SIZE)).exists()  # spare file discarded too
    alloc.shutdown()
    q.shutdown()


def test_load_sets_positions_to_file_end_and_delete_expired(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path, SIZE)
    q.load()
    for _ in range(3):
        mf = q.get_last_mapped_file(0)
        mf.append(bytes(SIZE))
    q.shutdown()
    old = time.time() - 7200
    for p in sorted(tmp_path.iterdir())[:2]:
        os.utime(p, (old, old))
    q2 = MappedFileQueue(tmp_path, SIZE)
    q2.load()
    assert q2.get_max_offset() == 3 * SIZE
    assert q2.delete_expired_file_by_time(3600) == 2
    assert q2.get_min_offset() == 2 * SIZE
    assert q2.delete_expired_file_by_time(0) == 0  # the last file is never deleted by age
    q2.shutdown()


def test_named_by_time_head_granule_size_error_and_read_only(tmp_path: Path) -> None:
    """What ConsumeQueue and IndexFile use: a name that is not an offset (``from_offset``), bytes
    in place before the rename (``head``), page granules, the size error's lengths, pread, and a
    read-only open that never creates."""
    path = tmp_path / "20240101000000000"
    mf = MappedFile(path, 1 << 20, from_offset=0, head=b"HEAD", granule=4096)
    assert mf.file_from_offset == 0 and path.read_bytes()[:4] == b"HEAD"
    assert os.stat(path).st_blocks * 512 < 1 << 20  # only a page-sized granule reserved, not 1 MiB
    assert not list(tmp_path.glob(".*.creating"))
    mf.write_at(8192, b"xyz")
    assert mf.read_at(8190, 6) == b"\0\0xyz\0" and mf.read_at(500_000, 4) == bytes(4)  # a hole reads zeros
    mf.reserve_bulk(0, 1 << 20)
    assert os.stat(path).st_blocks * 512 >= 1 << 20
    mf.force()
    mf.close()
    assert mf.closed
    again = MappedFile(path, 1 << 20, from_offset=0, head=b"NOPE")  # an existing file: head ignored
    assert bytes(again.whole()[:4]) == b"HEAD"
    again.close()
    ro = MappedFile(path, 1 << 20, from_offset=0, read_only=True)
    assert bytes(ro.whole()[8192:8195]) == b"xyz"
    ro.close()
    with pytest.raises(StoreLayoutError, match="does not exist"):
        MappedFile(tmp_path / offset_to_file_name(0), SIZE, read_only=True)
    assert not (tmp_path / offset_to_file_name(0)).exists()
    with pytest.raises(FileSizeError, match=r"length 1048576 != configured mapped file size 4096") as info:
        MappedFile(path, 4096, from_offset=0)
    assert (info.value.actual, info.value.expected) == (1 << 20, 4096)

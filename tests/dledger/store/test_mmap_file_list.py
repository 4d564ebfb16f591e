"""MmapFileList: layout rules of DLedger's MmapFileList on real files (no mocks)."""
from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.dledger.store.diskfull import small_ext4
from dledger.store.errors import DiskFullError, DLedgerStoreError, StoreLayoutError
from dledger.store.mmap_file_list import MIN_BLANK_LEN, MmapFileList, offset_to_file_name

FS = 10 * 1024 + MIN_BLANK_LEN  # DLedgerMappedFileStoreTest.testAbnormalRecovery geometry


def names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def model_positions(sizes: list[int], fs: int, start: int = 0) -> tuple[list[int], list[tuple[int, int]]]:
    """Reference §3.11 pseudo-code, written independently of the implementation."""
    pos, out, blanks = start, [], []
    for n in sizes:
        wrote = pos % fs
        if n + 8 > fs - wrote:
            blanks.append((pos, fs - wrote))
            pos += fs - wrote
        out.append(pos)
        pos += n
    return out, blanks


def test_file_names() -> None:
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(4_194_304) == "00000000000004194304"


def test_roll_with_blank(tmp_path: Path) -> None:
    fl = MmapFileList(tmp_path / "data", FS)
    fl.load()
    positions = [fl.append(bytes([i]) * 1072) for i in range(10)]
    assert positions[:9] == [i * 1072 for i in range(9)]
    assert positions[9] == FS  # the 10th starts the next file
    assert names(tmp_path / "data") == [offset_to_file_name(0), offset_to_file_name(FS)]
    raw = (tmp_path / "data" / offset_to_file_name(0)).read_bytes()
    remaining = FS - 9 * 1072
    assert raw[9 * 1072:9 * 1072 + 8] == b"\xff\xff\xff\xff" + struct.pack(">i", remaining)
    assert raw[9 * 1072 + 8:] == bytes(remaining - 8)
    assert bytes(fl.get_data(FS, 1072)) == bytes([9]) * 1072
    assert fl.max_wrote_position == FS + 1072 and fl.min_offset == 0
    assert fl.first_file.full and not fl.last_file.full


def test_exact_fit_leaves_eight_bytes(tmp_path: Path) -> None:
    fl = MmapFileList(tmp_path, 100)
    assert fl.append(bytes(92)) == 0  # 92 + 8 == 100: fits
    assert fl.append(b"x") == 100  # 1 + 8 > 8 left: blank of 8 bytes, next file
    assert (tmp_path / offset_to_file_name(0)).read_bytes()[92:] == b"\xff\xff\xff\xff\x00\x00\x00\x08"


def test_first_file_offset(tmp_path: Path) -> None:
    fl = MmapFileList(tmp_path, 1 << 20, first_file_offset=4_194_304)
    fl.load()
    assert fl.append(b"abc") == 4_194_304
    assert names(tmp_path) == ["00000000000004194304"]
    assert fl.min_offset == 4_194_304 and fl.max_wrote_position == 4_194_307


def test_index_list_no_blank(tmp_path: Path) -> None:
    fl = MmapFileList(tmp_path, 32 * 4)
    pos = [fl.append(bytes([i]) * 32, use_blank=False) for i in range(9)]
    assert pos == [i * 32 for i in range(9)]
    assert names(tmp_path) == [offset_to_file_name(o) for o in (0, 128, 256)]
    bad = MmapFileList(tmp_path / "odd", 100)
    bad.append(bytes(96), use_blank=False)
    with pytest.raises(DLedgerStoreError, match="does not fit"):
        bad.append(bytes(32), use_blank=False)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=60), batch=st.integers(1, 7))
def test_batches_match_single_appends_and_model(tmp_path_factory, sizes: list[int], batch: int) -> None:
    d = tmp_path_factory.mktemp("prop")
    fs = 512
    single = MmapFileList(d / "single", fs, first_file_offset=fs * 3)
    batched = MmapFileList(d / "batched", fs, first_file_offset=fs * 3)
    records = [bytes([i % 251 + 1]) * n for i, n in enumerate(sizes)]
    got_single = [single.append(r) for r in records]
    got_batch: list[int] = []
    for i in range(0, len(records), batch):
        chunk = records[i:i + batch]
        plan = batched.plan_append([len(r) for r in chunk])
        if i % 2:
            batched.commit_records(plan, chunk)
        else:
            stream = bytearray(plan.end - plan.start)
            for p, r in zip(plan.positions, chunk):
                stream[p - plan.start:p - plan.start + len(r)] = r
            plan.write_blanks(stream)
            batched.commit_stream(plan, stream)
        got_batch += plan.positions
    expected, _ = model_positions(sizes, fs, start=fs * 3)
    assert got_single == got_batch == expected
    assert names(d / "single") == names(d / "batched")
    for n in names(d / "single"):
        assert (d / "single" / n).read_bytes() == (d / "batched" / n).read_bytes()
    for p, r in zip(expected, records):
        assert bytes(batched.get_data(p, len(r))) == r


def test_load_checks(tmp_path: Path) -> None:
    d = tmp_path / "d"
    fl = MmapFileList(d, 64)
    for _ in range(3):
        fl.append(bytes(56))
    fl.shutdown()
    assert names(d) == [offset_to_file_name(o) for o in (0, 64, 128)]
    again = MmapFileList(d, 64)
    again.load()
    assert again.max_wrote_position == 192 and all(f.full for f in again.files)
    again.shutdown()

    with pytest.raises(StoreLayoutError, match=r"every file in .* is 64 bytes but the configured file size is 128"):
        MmapFileList(d, 128).load()
    os.rename(d / offset_to_file_name(64), d / offset_to_file_name(256))
    with pytest.raises(StoreLayoutError, match=r"damaged: 00000000000000000000 is followed by 00000000000000000128"):
        MmapFileList(d, 64).load()
    (d / "junk.tmp").write_bytes(bytes(64))
    with pytest.raises(StoreLayoutError, match="junk.tmp"):
        MmapFileList(d, 64).load()
    os.unlink(d / "junk.tmp")
    os.rename(d / offset_to_file_name(256), d / offset_to_file_name(200))
    with pytest.raises(StoreLayoutError, match="not a multiple"):
        MmapFileList(d, 64).load()


def _filled(tmp_path: Path, n: int = 10, fs: int = 256, rec: int = 80) -> MmapFileList:
    fl = MmapFileList(tmp_path / "t", fs)
    for i in range(n):
        fl.append(bytes([i + 1]) * rec)
    return fl


def test_truncate_offset(tmp_path: Path) -> None:
    fl = _filled(tmp_path)  # 3 records of 80 per file (3*80+8 <= 256): files 0,256,512,768
    assert fl.max_wrote_position == 768 + 80
    fl.truncate_offset(256 + 80)
    assert names(tmp_path / "t") == [offset_to_file_name(0), offset_to_file_name(256)]
    assert fl.max_wrote_position == 336
    # the stale record after the new end is zeroed so a restart's scan stops there
    raw = (tmp_path / "t" / offset_to_file_name(256)).read_bytes()
    assert raw[80:88] == bytes(8) and raw[88:160] == bytes([5]) * 72
    assert fl.append(b"z" * 80) == 336
    with pytest.raises(DLedgerStoreError, match="beyond the write position"):
        fl.get_data(336, 81)
    # at a file boundary the file starting there is kept, empty
    fl.truncate_offset(256)
    assert fl.max_wrote_position == 256 and len(fl.files) == 2 and fl.last_file.wrote == 0
    fl.truncate_offset(-1)
    assert fl.files == [] and names(tmp_path / "t") == [] and fl.max_wrote_position == 0


def test_reset_offset_and_rebuild(tmp_path: Path) -> None:
    fl = _filled(tmp_path)
    fl.reset_offset(512 + 80)
    assert names(tmp_path / "t") == [offset_to_file_name(512), offset_to_file_name(768)]
    assert fl.min_offset == 592 and fl.first_file.start == 80
    assert fl.rebuild_with_pos(5000)
    assert names(tmp_path / "t") == [offset_to_file_name(4864)]
    assert fl.min_offset == fl.max_wrote_position == 5000
    assert fl.append(b"q" * 10) == 5000


def test_pre_append_writes_blank_and_creates_file(tmp_path: Path) -> None:
    fl = MmapFileList(tmp_path, 100)
    fl.append(bytes(80))
    assert fl.pre_append(50) == 100
    assert len(fl.files) == 2 and fl.first_file.full and fl.max_wrote_position == 100
    assert fl.append(bytes(50)) == 100


def test_flush_and_flushed_where(tmp_path: Path) -> None:
    fl = _filled(tmp_path)
    assert fl.flushed_where == 0
    assert fl.flush() == fl.max_wrote_position == 848
    fl.truncate_offset(300)
    assert fl.flushed_where == 300
    fl.update_where_position(10_000)  # beyond the end: ignored
    assert fl.flushed_where == 300


def test_flush_from_worker_thread_while_appending(tmp_path: Path) -> None:
    fl = MmapFileList(tmp_path, 4096)
    stop = threading.Event()
    seen: list[int] = []

    def worker() -> None:
        while not stop.is_set():
            seen.append(fl.flush())

    t = threading.Thread(target=worker)
    t.start()
    try:
        for i in range(2000):
            fl.append(bytes([i % 256]) * 100)
    finally:
        stop.set()
        t.join()
    assert seen == sorted(seen)  # never goes backwards without a truncation
    assert fl.flush() == fl.max_wrote_position


def test_delete_expired_files_by_time(tmp_path: Path) -> None:
    fl = _filled(tmp_path)
    old = os.stat(fl.files[0].path).st_mtime
    for f in fl.files[:2]:
        os.utime(f.path, (old - 7200, old - 7200))
    assert fl.delete_expired_files_by_time(3_600_000, now_ms=old * 1000) == 2
    assert [f.from_offset for f in fl.files] == [512, 768]
    assert fl.delete_expired_files_by_time(0, force=True) == 1  # never the last file
    assert [f.from_offset for f in fl.files] == [768]


def test_reads_are_zero_copy_and_read_only(tmp_path: Path) -> None:
    fl = _filled(tmp_path, n=2)
    view = fl.get_data(0, 60)
    assert view.readonly
    with pytest.raises(TypeError):
        view[0] = 1  # type: ignore[index]
    fl.truncate_offset(-1)  # deleting a file while a reader holds a view must not fail
    assert len(bytes(view)) == 60


@pytest.fixture
def tiny_fs(tmp_path: Path):
    yield from small_ext4(tmp_path)


def test_disk_full_leaves_list_consistent(tiny_fs: Path) -> None:
    ballast = tiny_fs / "ballast"
    ballast.write_bytes(b"b" * 64 * 1024)
    fl = MmapFileList(tiny_fs / "data", 64 * 1024)
    rec = bytes(range(1, 256)) * 16  # 4080 bytes, no zero byte
    before = (0, 0)
    with pytest.raises(DiskFullError, match="disk full"):
        for _ in range(1000):
            before = (fl.max_wrote_position, len(fl.files))
            plan = fl.plan_append([len(rec)] * 3)
            fl.commit_records(plan, [rec] * 3)
    end, n_files = before
    assert end > 0
    assert (fl.max_wrote_position, len(fl.files)) == (end, n_files)  # nothing half-appended
    assert len(names(tiny_fs / "data")) == n_files  # files created by the failed batch removed
    if end < fl.last_file.end_offset:
        assert bytes(fl.last_file.mm[end - fl.last_file.from_offset:][:8]) == bytes(8)
    # free space: appending resumes exactly where the list ended
    ballast.unlink()
    assert fl.append(rec) == fl.plan_append([1]).start - len(rec) >= end
    fl.shutdown()


def test_get_last_mapped_file_creates_first_file_at_divided_offset(tmp_path: Path) -> None:
    """RocketMQ's first start after an upgrade: ``getLastMappedFile(dividedCommitlogOffset)``."""
    fl = MmapFileList(tmp_path, 1 << 20)
    f = fl.get_last_mapped_file(4_194_304 + 17)  # rounded down to the file boundary
    assert f.from_offset == 4_194_304 and names(tmp_path) == ["00000000000004194304"]
    assert fl.get_last_mapped_file() is f
    assert fl.append(b"x" * 10) == 4_194_304

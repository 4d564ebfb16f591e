"""A full disk: every mmapped store file refuses writes with DiskFullError (file and offset named),
never SIGBUS; the store refuses puts, keeps serving reads, writes again once space is back, and
a restart finds every acknowledged message.

Each test mounts its own small tmpfs (a real ENOSPC). On tmpfs even *reading* a hole through a
shared mapping needs a page, so these tests also pin that the store never faults holes in while
the disk is full. Skipped (with the reason) only where mounting is not permitted.
"""
from __future__ import annotations

import errno
import gc
import os
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from broker.store.consume_queue import ConsumeQueue
from broker.store.dispatch import DispatchRequest
from broker.store.index_file import IndexFile, IndexService
from broker.store.mapped_file import DiskFullError, MappedFile, offset_to_file_name
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"mounting a size-limited tmpfs is not permitted here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        gc.collect()  # mappings still referenced by a failed test's traceback
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the filesystem has not one byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = 1 << 16
    try:
        while chunk >= 1:
            try:
                os.write(fd, bytes(chunk))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                chunk //= 2
    finally:
        os.close(fd)


def test_mapped_file_refuses_writes_then_recovers(small_fs: Path) -> None:
    mf = MappedFile(small_fs / offset_to_file_name(0), 2 << 20)
    mf.append(b"a" * 1000)
    fill(small_fs / "filler")
    mf.append(b"b" * 1000)  # inside the granule reserved at creation: still fine
    with pytest.raises(DiskFullError) as info:
        mf.append(b"c" * (1 << 20))  # needs the next granule
    assert str(mf.path) in str(info.value) and "offset 1048576" in str(info.value)
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC
    assert (mf.wrote_position, mf.committed_position) == (2000, 2000)
    assert bytes(mf.select(0, 2000)) == b"a" * 1000 + b"b" * 1000  # reads still served
    with pytest.raises(DiskFullError):  # a new file: refused, and nothing is left behind
        MappedFile(small_fs / offset_to_file_name(2 << 20), 2 << 20)
    assert sorted(p.name for p in small_fs.iterdir()) == [offset_to_file_name(0), "filler"]
    (small_fs / "filler").unlink()
    assert mf.append(b"c" * (1 << 20)) == 2000  # a large append goes through pwrite, not the mapping
    assert bytes(mf.select(2000, 1 << 20)) == b"c" * (1 << 20)  # and the mapping shows it at once
    assert bytes(mf.select(0, 2000)) == b"a" * 1000 + b"b" * 1000
    mf.destroy()


def test_consume_queue_refuses_units_then_recovers(small_fs: Path) -> None:
    cq = ConsumeQueue("T", 0, small_fs / "consumequeue", mapped_file_size=20 * 100_000)
    cq.put_message_position_info(0, 100, 0, 0)
    fill(small_fs / "filler")
    n = 1
    with pytest.raises(DiskFullError) as info:
        for n in range(1, 100_000):
            cq.put_message_position_info(n * 100, 100, 0, n)
    assert "consumequeue/T/0/" in str(info.value)
    assert cq.max_offset_in_queue == n and cq.max_physic_offset == n * 100  # the refused unit is not counted
    assert cq.get(n - 1) == ((n - 1) * 100, 100, 0)
    (small_fs / "filler").unlink()
    cq.put_message_position_info(n * 100, 100, 0, n)  # the retry of the same unit lands
    assert cq.get(n) == (n * 100, 100, 0) and cq.max_offset_in_queue == n + 1
    cq.close()


def test_index_file_refuses_keys_then_recovers(small_fs: Path) -> None:
    (small_fs / "index").mkdir()
    fill(small_fs / "filler")
    with pytest.raises(DiskFullError):  # cannot even create a file: none is left behind
        IndexFile(small_fs / "index" / "20240101000000000", 200_000, 100_000)
    assert not any((small_fs / "index").iterdir())
    (small_fs / "filler").unlink()
    f = IndexFile(small_fs / "index" / "20240101000000000", 200_000, 100_000)
    for put in range(10):
        assert f.put_key(f"T#key-{put}", 1000 + put, 1_700_000_000_000)
    fill(small_fs / "filler")
    with pytest.raises(DiskFullError) as info:
        for put in range(10, 100_000):
            assert f.put_key(f"T#key-{put}", 1000 + put, 1_700_000_000_000)
    assert str(f.path) in str(info.value)
    assert f.index_count == put + 1  # the refused key changed nothing
    out: list[int] = []
    f.select_phy_offset(out, "T#never-put", 10, 0, 1 << 62)  # a query of a hole slot: no SIGBUS
    assert out == []
    f.select_phy_offset(out, "T#key-0", 10, 0, 1 << 62)
    assert out == [1000]
    (small_fs / "filler").unlink()
    assert f.put_key(f"T#key-{put}", 1000 + put, 1_700_000_000_000)
    f.destroy()


def test_index_service_refuses_records_then_recovers(small_fs: Path) -> None:
    """Records whose keys are written by one C call (compiled builds) stop where the reserved
    blocks end: the next record is refused whole by reserve_keys (no SIGBUS), and its retry lands."""
    def req(i: int) -> DispatchRequest:
        return DispatchRequest("T", 0, 100 * i, 100, 0, 1_700_000_000_000 + i, i, keys=f"k{i}", uniq_key=f"U{i:031d}")

    svc = IndexService(small_fs, 200_000, 100_000, clock=lambda: 1_795_321_775.0)
    svc.dispatch(req(0))
    fill(small_fs / "filler")
    i = 1
    with pytest.raises(DiskFullError):
        for i in range(1, 50_000):
            svc.dispatch(req(i))
    (f,) = svc.index_files
    assert i > 10  # the rest of the page reserved before the disk filled took records
    assert f.index_count == 2 * i + 1 and f.end_phy_offset == 100 * (i - 1)  # the refused record: no key
    for j in (0, i // 2, i - 1):
        assert svc.query_offset("T", f"k{j}", 10, 0, 1 << 62) == [100 * j]
        assert svc.query_offset("T", f"U{j:031d}", 10, 0, 1 << 62) == [100 * j]
    (small_fs / "filler").unlink()
    svc.dispatch(req(i))
    assert f.index_count == 2 * i + 3 and svc.query_offset("T", f"k{i}", 10, 0, 1 << 62) == [100 * i]
    svc.destroy()


def _msg(i: int) -> MessageExt:
    return MessageExt("T", b"x" * 2000, queue_id=i % 2, properties={"KEYS": f"k{i}", "UNIQ_KEY": f"u{i}"})


def test_classic_store_on_a_full_disk(small_fs: Path) -> None:
    settings = dict(store_path_root_dir=str(small_fs), mapped_file_size_commit_log=256 << 10,
                    mapped_file_size_consume_queue=20 * 4000, max_hash_slot_num=4000, max_index_num=16000)
    store = DefaultMessageStore(**settings)
    store.load()
    store.start()
    acked: list[tuple[int, int, int]] = []  # (queue id, queue offset, physical offset)
    try:
        r = store.put_message(_msg(0))
        acked.append((0, r.append_result.logics_offset, r.append_result.wrote_offset))
        assert store.wait_dispatched(5.0)  # its CQ file exists before the disk fills (else a race)
        fill(small_fs / "filler")
        refused = None
        for i in range(1, 2000):
            r = store.put_message(_msg(i))
            if not r.ok:
                refused = r
                break
            acked.append((i % 2, r.append_result.logics_offset, r.append_result.wrote_offset))
        assert refused is not None, "a full disk must refuse a put"
        assert refused.status in (PutMessageStatus.CREATE_MAPPED_FILE_FAILED, PutMessageStatus.SERVICE_NOT_AVAILABLE)
        assert str(small_fs) in refused.error and "disk full" in refused.error
        assert acked, "some puts fit before the disk was full"
        # reads are still served, for everything dispatched
        store.wait_dispatched(2.0)
        got = store.get_message("T", 0, 0, 1)
        assert got.status is GetMessageStatus.FOUND
        (small_fs / "filler").unlink()
        deadline = time.monotonic() + 10
        while True:  # dispatch retries each second; then puts are accepted again
            r = store.put_message(_msg(len(acked)))
            if r.ok or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.ok, r.error
        acked.append((len(acked) % 2, r.append_result.logics_offset, r.append_result.wrote_offset))
        assert store.wait_dispatched(10.0) and store.disk_full_error is None
    finally:
        store.shutdown()
    store = DefaultMessageStore(**settings)
    store.load()
    store.start()
    try:
        for qid, qo, phy in acked:
            got = store.get_message("T", qid, qo, 1)
            assert got.status is GetMessageStatus.FOUND and got.physical_offsets == [phy]
    finally:
        store.shutdown()

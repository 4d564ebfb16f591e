"""Retention (issue 14.3): a week of writes on a small disk stays bounded, in both modes.

The clock and the disk are simulated (``StoreCleaner(clock=, disk_ratio=)``); the files, their
mtimes and every deletion are real. Each simulated hour writes ~1 commitlog file; the "disk" is
3 MiB, so ``diskMaxUsedSpaceRatio`` (75 %) triggers deletion long before ``fileReservedTime``
(48 h) would, and ``deleteWhen`` (04) deletes what is expired. Checked: the store never passes the
warning level, old commitlog, ConsumeQueue and index files go, a consumer below the new minimum
gets OFFSET_TOO_SMALL with the first offset still held; above 90 % puts are refused and accepted
again once space is back. Before this change no cleaner ran: the store grew without bound.
"""
from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

from tools.procs import free_port
from broker.store.clean import StoreCleaner, delete_hours
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.put_result import PutMessageStatus
from tests.broker.store.test_dledger_commitlog import dledger_store

FILE = 64 * 1024
DISK = 3 * 1024 * 1024
T0 = time.mktime((2026, 11, 2, 0, 0, 0, 0, 0, -1))  # a local midnight


def store_bytes(root: Path) -> int:
    """Disk space the store takes (allocated blocks: DLedger index files are sparse); a file gone
    between the listing and its stat (see touch_recent) takes none."""
    total = 0
    for p in root.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_blocks * 512
        except FileNotFoundError:
            continue
    return total


def msg(i: int) -> MessageExt:
    return MessageExt("Week", b"%08d" % i + b"w" * 1000, queue_id=i % 2, properties={"KEYS": f"k{i}"},
                      born_timestamp=1_700_000_000_000 + i)


def touch_recent(root: Path, since: float, when: float) -> None:
    """Give the files written in this simulated hour the simulated mtime. A file listed here may
    be gone a moment later (the store's background threads replace their small files by a
    temporary file and a rename): nothing to touch then (a hog run met one, session 15)."""
    for p in root.rglob("*"):
        try:
            if p.is_file() and p.stat().st_mtime >= since:
                os.utime(p, (when, when))
        except FileNotFoundError:
            continue


def simulate(store: DefaultMessageStore, root: Path, hours: int) -> dict[str, int]:
    now = [T0]
    cleaner = StoreCleaner(store, clock=lambda: now[0], disk_ratio=lambda _p: store_bytes(root) / DISK)
    peak, sent, refused = 0, 0, 0
    for h in range(hours):
        now[0] = T0 + h * 3600
        real_start = time.time() - 1
        for _ in range(60):
            r = store.put_message(msg(sent))
            if r.status is PutMessageStatus.PUT_OK:
                sent += 1
            else:
                refused += 1
        store.flush() if hasattr(store, "flush") else None
        assert store.wait_dispatched(10)
        touch_recent(root, real_start, now[0])
        cleaner.run_once()
        peak = max(peak, store_bytes(root))
    return {"peak": peak, "sent": sent, "refused": refused, "deleted": cleaner.deleted_total,
            "rounds": cleaner.rounds}


def check_bounded(store: DefaultMessageStore, root: Path, out: dict[str, int]) -> None:
    assert out["deleted"] > 0 and out["refused"] == 0, out
    assert out["peak"] <= 0.90 * DISK, out  # never at the warning level
    assert store.commitlog.min_offset > 0
    index_files = sorted((root / "index").iterdir())
    assert 1 <= len(index_files) <= 8, index_files  # 25 were made (400 keys each)
    for p in index_files[:-1]:  # IndexHeader endPhyOffset @24: none wholly below the min offset is left
        assert struct.unpack_from(">q", p.read_bytes(), 24)[0] >= store.commitlog.min_offset, p
    for q in (0, 1):
        lo = store.get_min_offset_in_queue("Week", q)
        assert lo > 0
        below = store.get_message("Week", q, 0, 4)
        assert below.status is GetMessageStatus.OFFSET_TOO_SMALL and below.next_begin_offset == lo
        at = store.get_message("Week", q, lo, 1)
        assert at.status is GetMessageStatus.FOUND and at.physical_offsets[0] >= store.commitlog.min_offset
    cq_files = list((root / "consumequeue" / "Week" / "0").iterdir())
    assert len(cq_files) <= 2


SETTINGS = dict(mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=20 * 2000, max_hash_slot_num=100,
                max_index_num=400, file_reserved_time=48, delete_when="04", disk_max_used_space_ratio=75)


def test_classic_week_on_a_small_disk_stays_bounded(tmp_path: Path) -> None:
    root = tmp_path / "c"
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)
    store.load()
    store.start()
    try:
        out = simulate(store, root, 7 * 24)
        check_bounded(store, root, out)
    finally:
        store.shutdown()


def test_dledger_three_days_on_a_small_disk_stays_bounded(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}", **SETTINGS)
    store.load()
    store.start()
    try:
        assert store.commitlog.wait_leader_ready(10)
        out = simulate(store, root, 3 * 24)
        check_bounded(store, root, out)
        data = list((root / "dledger-n0" / "data").iterdir())
        assert len(data) * FILE <= 0.90 * DISK
    finally:
        store.shutdown()


def test_puts_refused_above_the_warning_level_and_accepted_after(tmp_path: Path) -> None:
    root = tmp_path / "w"
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)
    store.load()
    store.start()
    ratio = [0.95]
    try:
        cleaner = StoreCleaner(store, disk_ratio=lambda _p: ratio[0])
        store.cleaner = cleaner
        assert store.put_message(msg(0)).status is PutMessageStatus.PUT_OK  # one file: nothing to delete
        cleaner.run_once()
        r = store.put_message(msg(1))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "95.00% full" in r.error
        assert cleaner.last.forced and cleaner.status()["spaceError"]
        ratio[0] = 0.5
        cleaner.run_once()
        assert store.put_message(msg(2)).status is PutMessageStatus.PUT_OK
    finally:
        store.shutdown()


def test_delete_when_hours() -> None:
    assert delete_hours("04") == {4} and delete_hours("04;16") == {4, 16} and delete_hours("x;25;7") == {7}


def test_forced_deletions_are_counted_and_said(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 24.4: above 85% retention deletes files whatever their age; that loss is counted,
    shown in status and logged with the offsets it took."""
    store = DefaultMessageStore(store_path_root_dir=str(tmp_path / "f"), **SETTINGS)
    store.load()
    store.start()
    try:
        i = 0
        while len(store.commitlog.mapped_file_queue.mapped_files) < 4:
            assert store.put_message(msg(i)).status is PutMessageStatus.PUT_OK
            i += 1
        assert store.wait_dispatched()
        cleaner = StoreCleaner(store, disk_ratio=lambda _p: 0.88)  # forced, but puts still accepted
        store.cleaner = cleaner
        with caplog.at_level("WARNING", logger="broker.store.clean"):
            r = cleaner.run_once()
        assert r.forced and r.deleted_files == 3  # every file but the last, however young
        st = cleaner.status()
        assert st["forcedDeletedFiles"] == 3 and st["forcedDeletedBytes"] == 3 * FILE
        assert st["lastForcedDeletion"]["fromOffset"] == 0 and st["lastForcedDeletion"]["toOffset"] == 3 * FILE
        assert any("DISK PRESSURE" in rec.message and f"[0, {3 * FILE})" in rec.message for rec in caplog.records)
    finally:
        store.shutdown()

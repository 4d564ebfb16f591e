"""Silent corruption is never served (issue 13.3), on the Apache 4.9.8 stores of both sets.

- A flipped body byte in a record below the recovery scan's start file (classic), in the old
  region of an upgraded store, or in an Apache-written DLedger entry (bodyCrc=0) is an error
  naming node, file and offset on every read of it (pull, lookup by offset / msgId), with the
  real fix; a pull returns the good records before it and stops there. Before this change
  each was served as data.
- Recovery verifies by CRC every record from the checkpoint's verified offset (@48): the first
  start of an Apache store (0 there) checks every record of both regions; a later start checks
  only what is new; with the offset reset a damaged record stops the start, unless
  ``checkCRCOnRecover=false`` (reads still refuse it).
- ``checkCRCOnRead=false`` turns the read guard off.
"""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tools.procs import free_port
from broker.store.checkpoint import StoreCheckpoint
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.verify import CorruptRecordError, record_problem_at
from tests.broker.store.test_dledger_commitlog import dledger_store
from tests.broker.store.test_message_store import FIXTURE_SETTINGS

FILE = 1 << 20


def classic(root: Path, **kw) -> DefaultMessageStore:
    store = DefaultMessageStore(store_path_root_dir=str(root), **{**FIXTURE_SETTINGS, **kw})
    store.load()
    return store


def dledger(root: Path, **kw) -> DefaultMessageStore:
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}", **kw)
    store.load()
    return store


def body_at(row: dict) -> int:
    """Position of the body inside the record, from its sysFlag (v6 hosts are 12 bytes longer)."""
    sys_flag = row.get("sysFlag", 0)
    return 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 16


def flip(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x5A]))


def reset_verified(root: Path) -> None:
    with open(root / "checkpoint", "r+b") as f:
        f.seek(48)
        f.write(struct.pack(">q", 0))


def pick(rows: list[dict], lo: int, hi: int) -> dict:
    """A message with a body and a ConsumeQueue unit, not the first of its queue, in [lo, hi)."""
    for r in rows:
        if (lo <= r["commitLogOffset"] < hi and r["bodyLen"] > 0 and r["queueOffset"] > 0
                and str(r.get("inConsumeQueue", "true")).lower() in ("true", "1")
                and not r["topic"].startswith("SCHEDULE_TOPIC") and r.get("sysFlag", 0) & 0xC == 0):
            return r
    raise AssertionError(f"no message in [{lo}, {hi})")


def assert_refused(store: DefaultMessageStore, row: dict, path: Path, file_pos: int, fix: str) -> None:
    phy = row["commitLogOffset"]
    for read in (lambda: store.look_message_by_offset(phy), lambda: store.look_message_by_offset(phy, row["storeSize"]),
                 lambda: store.commitlog.get_record(phy)):
        with pytest.raises(CorruptRecordError) as ei:
            read()
        e = ei.value
        assert (e.path, e.file_offset, e.physical_offset) == (str(path), file_pos, phy)
        assert "CRC" in e.reason and fix in str(e) and e.node in str(e)
    with pytest.raises(CorruptRecordError):  # a pull starting at it
        store.get_message(row["topic"], row["queueId"], row["queueOffset"], 4)
    got = store.get_message(row["topic"], row["queueId"], row["queueOffset"] - 1, 4)
    assert got.status is GetMessageStatus.FOUND and got.physical_offsets[-1] != phy
    assert got.next_begin_offset == row["queueOffset"]  # the good one before it, then it stops
    assert store.commitlog.corruption.count >= 4


def test_classic_corrupt_record_below_the_recovery_start_is_never_served(store_copy, fixture_set, manifests) -> None:
    root = store_copy(fixture_set.classic)
    rows = manifests(fixture_set.classic)
    store = classic(root)
    try:  # first start of an Apache store: every record is verified once, then the offset is the end
        assert store.checkpoint.physic_verified_offset == fixture_set.classic_max_offset
        store.start()
    finally:
        store.shutdown()
    row = pick(rows, 0, FILE)  # in the first file: the classic recovery scan starts at the 3rd-last
    path = root / "commitlog" / f"{0:020d}"
    pos = row["commitLogOffset"] + body_at(row) + 1
    flip(path, pos)

    store = classic(root)  # verified already: starts, and reads refuse the record
    try:
        assert_refused(store, row, path, row["commitLogOffset"], "restore the file from the other broker")
    finally:
        store.shutdown()

    reset_verified(root)  # as an Apache-written checkpoint: recovery finds it
    with pytest.raises(CorruptRecordError) as ei:
        classic(root)
    assert ei.value.physical_offset == row["commitLogOffset"] and ei.value.path == str(path)

    store = classic(root, check_crc_on_recover=False)  # the override starts; reads still refuse
    try:
        with pytest.raises(CorruptRecordError):
            store.look_message_by_offset(row["commitLogOffset"])
    finally:
        store.shutdown()
    store = classic(root, check_crc_on_recover=False, check_crc_on_read=False)
    try:
        assert store.look_message_by_offset(row["commitLogOffset"]) is not None  # the guard is off
    finally:
        store.shutdown()


def test_dledger_corrupt_old_region_and_apache_entry_are_never_served(store_copy, fixture_set, manifests) -> None:
    root = store_copy(fixture_set.mixed)
    rows = manifests(fixture_set.mixed)
    divided = fixture_set.divided_offset
    store = dledger(root)
    try:
        assert store.checkpoint.physic_verified_offset == fixture_set.mixed_max_offset
        store.start()
        assert store.commitlog.wait_leader_ready(10)
        end = store.commitlog.max_offset
    finally:
        store.shutdown()
    old_row = pick(rows, 0, FILE)
    old_path = root / "commitlog" / f"{0:020d}"
    flip(old_path, old_row["commitLogOffset"] + body_at(old_row) + 1)
    new_row = pick(rows, divided, divided + FILE)
    new_path = root / "dledger-n0" / "data" / f"{divided:020d}"
    new_pos = new_row["commitLogOffset"] - divided
    # Apache writes bodyCrc=0 in its entries: only the message's own CRC can catch this
    assert struct.unpack_from(">i", new_path.read_bytes(), new_pos - 48 + 40)[0] == 0
    flip(new_path, new_pos + body_at(new_row) + 1)

    store = dledger(root)
    try:
        assert store.checkpoint.physic_verified_offset >= end - 48  # nothing new to verify
        store.start()
        assert store.commitlog.wait_leader_ready(10)
        assert_refused(store, old_row, old_path, old_row["commitLogOffset"], "mqupgrade reseed")
        assert_refused(store, new_row, new_path, new_pos, "dledger-n0 away")
        assert "g0/n0" in str(store.commitlog.corruption.recent[-1]["node"])
    finally:
        store.shutdown()

    reset_verified(root)
    with pytest.raises(CorruptRecordError) as ei:
        dledger(root)
    assert ei.value.physical_offset == old_row["commitLogOffset"]  # the first damaged record


def test_verification_covers_only_what_is_new(tmp_path: Path) -> None:
    """Records written after a start are verified at the next start; the offset moves with them."""
    from broker.store.message import MessageExt

    root = tmp_path / "s"
    store = classic(root, mapped_file_size_commit_log=1 << 16)
    store.start()
    for i in range(1500):  # 5 files of 64 KiB: the classic recovery scan starts at the 3rd-last
        store.put_message(MessageExt("T", b"b%05d" % i * 20, queue_id=0, born_timestamp=1_700_000_000_000 + i))
    end = store.commitlog.max_offset
    store.shutdown()
    cp = StoreCheckpoint(root / "checkpoint")
    assert cp.physic_verified_offset == 0  # nothing was there at the first start
    cp.shutdown()
    assert len(list((root / "commitlog").iterdir())) >= 5
    flip(root / "commitlog" / f"{0:020d}", 200)  # a body byte of the first record
    with pytest.raises(CorruptRecordError) as ei:
        classic(root, mapped_file_size_commit_log=1 << 16)
    assert ei.value.physical_offset == 0
    # verified now up to the end: a damaged byte in an already verified record is found by reads
    root2 = tmp_path / "s2"
    store = classic(root2, mapped_file_size_commit_log=1 << 16)
    store.start()
    for i in range(1500):
        store.put_message(MessageExt("T", b"b%05d" % i * 20, queue_id=0, born_timestamp=1_700_000_000_000 + i))
    store.shutdown()
    store = classic(root2, mapped_file_size_commit_log=1 << 16)
    assert store.checkpoint.physic_verified_offset == store.commitlog.max_offset == end
    store.shutdown()


def test_record_check_matches_the_full_decoder_on_every_apache_record(store_copy, fixture_set, manifests) -> None:
    root = store_copy(fixture_set.classic)
    data = {}
    for row in manifests(fixture_set.classic):
        base = row["commitLogOffset"] - row["commitLogOffset"] % FILE
        if base not in data:
            data[base] = (root / "commitlog" / f"{base:020d}").read_bytes()
        assert record_problem_at(data[base], row["commitLogOffset"] - base, row["storeSize"]) is None

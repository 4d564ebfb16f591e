"""The DLedger directories written by Apache RocketMQ 4.9.8 (DLedger 0.3.1.2): load, recover,
read back every entry, and re-create them byte for byte."""
from __future__ import annotations

import os
import struct
from pathlib import Path


from dledger.entry import BODY_OFFSET, INDEX_UNIT_SIZE, DLedgerEntry
from dledger.store.file_store import DEFAULT_INDEX_FILE_SIZE, DLedgerMmapFileStore
from dledger.store.properties import parse_properties
from dledger.store.state_files import MemberStateFile

PHY_POS = 28  # MessageDecoder.PHY_POS_POSITION
FILE_SIZE = 1 << 20


def open_store(root: Path, **kw) -> DLedgerMmapFileStore:
    return DLedgerMmapFileStore(root, "n0", data_file_size=FILE_SIZE, index_file_size=DEFAULT_INDEX_FILE_SIZE,
                                **kw).startup()


def dledger_rows(manifests, fixture_set) -> list[dict]:
    rows = [r for r in manifests(fixture_set.mixed) if r["commitLogOffset"] >= fixture_set.divided_offset]
    return sorted(rows, key=lambda r: r["commitLogOffset"])


def test_state_files_parse(fixture_root: Path, fixture_set) -> None:
    base = fixture_root / fixture_set.mixed / "dledger-n0"
    assert MemberStateFile(base).load() == (0, "n0")
    cp = parse_properties((base / "checkpoint").read_text())
    expected = {"plain": "1999", "variety": "995"}[fixture_set.name]
    assert cp == {"committedIndex": expected, "endIndex": expected}


def test_load_recover_and_read_every_entry(store_copy, manifests, fixture_set) -> None:
    root = store_copy(fixture_set.mixed)
    store = open_store(root)
    rows = dledger_rows(manifests, fixture_set)
    assert store.last_recovery.stop_reason is None
    assert (store.ledger_begin_index, store.ledger_end_index) == (0, len(rows) - 1)
    assert store.committed_index == len(rows) - 1  # from the checkpoint file
    assert store.ledger_end_term == 0
    assert store.data_file_list.first_file.from_offset == fixture_set.divided_offset
    assert store.committed_pos == fixture_set.mixed_max_offset
    for i, row in enumerate(rows):
        e = store.get(i)
        assert (e.index, e.term, e.pos, e.magic) == (i, 0, row["commitLogOffset"] - BODY_OFFSET, 1)
        assert (e.channel, e.chain_crc, e.body_crc) == (0, 0, 0)
        assert len(e.body) == row["storeSize"] == struct.unpack_from(">i", e.body, 0)[0]
        assert struct.unpack_from(">q", e.body, PHY_POS)[0] == e.pos + BODY_OFFSET
    raw = store.get_raw(0, len(rows))
    assert len(raw) == len(rows) and bytes(raw[5][BODY_OFFSET:]) == store.get(5).body
    # recovery changed nothing on disk that Apache wrote (apart from truncation bookkeeping)
    store.shutdown()
    again = open_store(root)
    assert again.ledger_end_index == len(rows) - 1


def test_recovery_of_apache_store_with_deleted_index(store_copy, manifests, fixture_set) -> None:
    """Index rewrite from data reproduces Apache's index units exactly."""
    root = store_copy(fixture_set.mixed)
    index_file = root / "dledger-n0" / "index" / "00000000000000000000"
    n = len(dledger_rows(manifests, fixture_set))
    original = index_file.read_bytes()[:n * INDEX_UNIT_SIZE + 4096]
    with open(index_file, "r+b") as fh:  # wipe the units, keep the (sparse) file
        fh.write(bytes(n * INDEX_UNIT_SIZE))
    store = open_store(root)
    assert store.ledger_end_index == n - 1
    store.shutdown()
    assert index_file.read_bytes()[:len(original)] == original


def _recreate(fixture_root: Path, fixture_set, tmp_path: Path, crc: bool) -> tuple[Path, Path, int]:
    src_root = fixture_root / fixture_set.mixed
    src = DLedgerMmapFileStore(src_root, "n0", data_file_size=FILE_SIZE, index_file_size=DEFAULT_INDEX_FILE_SIZE)
    src.load()  # read-only use: no recover() (it would truncate bookkeeping only, but stay hands-off)
    bodies: list[bytes] = []
    pos = fixture_set.divided_offset
    f = src.data_file_list.find_file(pos)
    while f is not None:  # walk the Apache files directly
        rel = pos - f.from_offset
        magic, size = struct.unpack_from(">ii", f.mm, rel)
        if magic == -1:
            pos = f.end_offset
            f = src.data_file_list.find_file(pos)
            continue
        if size == 0:
            break
        body = bytearray(f.mm[rel + BODY_OFFSET:rel + size])
        struct.pack_into(">q", body, PHY_POS, 0)  # the hook must put it back
        bodies.append(bytes(body))
        pos += size
    src.data_file_list.shutdown()
    src.index_file_list.shutdown()

    ours = DLedgerMmapFileStore(tmp_path, "n0", data_file_size=FILE_SIZE, index_file_size=DEFAULT_INDEX_FILE_SIZE,
                                entry_crc=crc, first_data_file_offset=fixture_set.divided_offset).startup()
    ours.add_append_hook(lambda e, buf, off: struct.pack_into(">q", buf, off + PHY_POS, e.pos + off))
    for i in range(0, len(bodies), 97):
        ours.append_batch_as_leader(bodies[i:i + 97], 0)
    ours.update_committed_index(0, ours.ledger_end_index)
    ours.shutdown()
    return src_root / "dledger-n0", tmp_path / "dledger-n0", len(bodies)


def test_byte_identity_with_apache(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    theirs, ours, n = _recreate(fixture_root, fixture_set, tmp_path, crc=False)
    assert sorted(os.listdir(ours / "data")) == sorted(os.listdir(theirs / "data"))
    assert sorted(os.listdir(ours / "index")) == sorted(os.listdir(theirs / "index")) == ["00000000000000000000"]
    for name in os.listdir(theirs / "data"):
        assert (ours / "data" / name).read_bytes() == (theirs / "data" / name).read_bytes(), name
    idx_ours, idx_theirs = ours / "index" / "00000000000000000000", theirs / "index" / "00000000000000000000"
    assert os.path.getsize(idx_ours) == os.path.getsize(idx_theirs) == DEFAULT_INDEX_FILE_SIZE
    prefix = n * INDEX_UNIT_SIZE + (1 << 20)
    with open(idx_ours, "rb") as a, open(idx_theirs, "rb") as b:
        assert a.read(prefix) == b.read(prefix)
    assert (ours / "checkpoint").read_text() == (theirs / "checkpoint").read_text()


def test_crc_on_differs_only_in_body_crc(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    theirs, ours, n = _recreate(fixture_root, fixture_set, tmp_path, crc=True)
    store = open_store(tmp_path)
    diffs = 0
    for name in sorted(os.listdir(theirs / "data")):
        a = bytearray((ours / "data" / name).read_bytes())
        b = (theirs / "data" / name).read_bytes()
        start = int(name)
        for i in range(store.ledger_begin_index, store.ledger_end_index + 1):
            pos, _ = store.get_entry_pos_and_size(i)
            if start <= pos < start + FILE_SIZE:
                crc = DLedgerEntry.decode(a, pos - start).body_crc  # verifies it
                assert crc != 0 or len(store.get(i).body) == 0
                a[pos - start + 40:pos - start + 44] = bytes(4)
                diffs += 1
        assert a == b, name
    assert diffs == n

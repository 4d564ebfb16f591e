"""Recovery as a table of named steps (issue 26.6): the paths the older tests did not reach.

The index rewrite is batched (``recovery._INDEX_BATCH`` units per write): a rewrite longer than one
batch, crossing index files, must give back exactly the units the store wrote; a failed pre-check
moves the scan's start one file down; and the refusals run in the order of the module rules.
"""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from dledger.entry import INDEX_UNIT_SIZE
from dledger.store import recovery
from dledger.store.errors import StoreLayoutError
from dledger.store.file_store import DLedgerMmapFileStore


def _store(base: Path, data_file_size: int, index_file_size: int = 1024 * INDEX_UNIT_SIZE) -> DLedgerMmapFileStore:
    return DLedgerMmapFileStore(base, "n0", data_file_size=data_file_size, index_file_size=index_file_size).startup()


def _close(store: DLedgerMmapFileStore) -> None:
    while store.flush_pos != store.write_pos:
        store.flush()
    store.shutdown()


def _index_bytes(base: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((base / "dledger-n0" / "index").iterdir()))


def test_index_rewrite_longer_than_a_batch_across_index_files(tmp_path: Path) -> None:
    n = 2 * recovery._INDEX_BATCH + 500
    geometry = (1 << 20, 3000 * INDEX_UNIT_SIZE)  # 3+ index files
    store = _store(tmp_path, *geometry)
    for k in range(0, n, 1000):
        store.append_batch_as_leader([bytes([k % 251]) * 20] * min(1000, n - k), 3)
    _close(store)
    before = _index_bytes(tmp_path)
    first = sorted((tmp_path / "dledger-n0" / "index").iterdir())[0]
    with open(first, "r+b") as fh:  # unit 10's pos: from there on every unit is rewritten
        fh.seek(10 * INDEX_UNIT_SIZE + 4)
        fh.write(struct.pack(">q", 7))
    assert _index_bytes(tmp_path) != before
    store = _store(tmp_path, *geometry)
    assert (store.ledger_end_index, store.ledger_end_term) == (n - 1, 3)
    assert store.last_recovery is not None and store.last_recovery.stop_reason is None
    assert store.get(n - 1).body == bytes([(n - 1) // 1000 * 1000 % 251]) * 20
    _close(store)
    assert _index_bytes(tmp_path) == before


def test_failed_precheck_starts_the_scan_one_file_earlier(tmp_path: Path) -> None:
    """Rule 2: the third-last file's first entry disagrees with its index unit, so the scan starts
    in the file before it; the scan then rewrites the bad unit from the data (rule 3)."""
    store = _store(tmp_path, 2048)
    store.append_batch_as_leader([bytes([i]) * 200 for i in range(60)], 1)
    third_last, fourth_last = store.data_file_list.files[-3], store.data_file_list.files[-4]
    first_of = {store.get_entry_pos_and_size(i)[0]: i for i in range(60)}  # pos -> index
    _close(store)
    before = _index_bytes(tmp_path)
    unit = first_of[third_last.from_offset]
    first = sorted((tmp_path / "dledger-n0" / "index").iterdir())[0]
    with open(first, "r+b") as fh:  # the unit's term (>iqiqq: magic, pos, size, index, term)
        fh.seek(unit * INDEX_UNIT_SIZE + 24)
        fh.write(struct.pack(">q", 9))
    store = _store(tmp_path, 2048)
    assert store.last_recovery is not None
    assert store.last_recovery.first_scanned_index == first_of[fourth_last.from_offset]
    assert store.ledger_end_index == 59
    _close(store)
    assert _index_bytes(tmp_path) == before


def test_refusals_run_in_the_rules_order(tmp_path: Path) -> None:
    """A scan that stops two files before the last one below the committed index: rule 4 (no whole
    file dropped) is checked before the committed-data refusal, as in the module rules, and its
    message names where the scan ended and why."""
    store = _store(tmp_path, 2048)
    store.append_batch_as_leader([bytes([i]) * 200 for i in range(60)], 1)
    store.update_committed_index(1, 59)
    _close(store)
    data = sorted((tmp_path / "dledger-n0" / "data").iterdir())
    third_last = data[-3]
    with open(third_last, "r+b") as fh:  # the first entry of the third-last file: a bad body (CRC)
        fh.seek(48 + 5)
        fh.write(b"\xee")
    with pytest.raises(StoreLayoutError) as info:
        _store(tmp_path, 2048)
    msg = str(info.value)
    assert f"ended at {int(third_last.name)}, more than a file before the last file {data[-1].name}" in msg
    assert "body CRC mismatch" in msg and "refusing to drop whole files" in msg

"""Regression tests for what the fault runs found in recovery (store level, fast, no processes).

Finding (bit-flip nemesis, DLedger): after a crash the ``checkpoint`` file's committedIndex lags
the entries the node had flushed and acknowledged to its leader. A CRC mismatch in the middle of
the log, with intact entries after it, is then taken for a torn tail whenever it lies beyond
that stale committedIndex and less than a data file from the end (more is refused with
StoreLayoutError): recovery logs a WARNING naming the file and the offset and silently
truncates every later entry. The dropped entries were acknowledged by this node (they may have
formed the commit quorum), so if the other holder is lost too, a committed entry can vanish.
The classic commitlog recovery already tells the two cases apart (torn tail = only zeros
follow; otherwise StoreCorruptionError); the DLedger recovery now does the same (a valid entry
continuing the chain after the invalid one = EntryCorruptionError naming file and offset).
"""
from __future__ import annotations

from pathlib import Path


from dledger.entry import INDEX_UNIT_SIZE, EntryCorruptionError
from dledger.store.errors import StoreLayoutError
from dledger.store.file_store import DLedgerMmapFileStore


def _make(base: Path) -> DLedgerMmapFileStore:
    return DLedgerMmapFileStore(base, "n0", data_file_size=4096, index_file_size=INDEX_UNIT_SIZE * 1024).startup()


def _flip(base: Path, pos: int) -> Path:
    files = sorted((base / "dledger-n0" / "data").iterdir())
    f = [p for p in files if int(p.name) <= pos][-1]
    with open(f, "r+b") as fh:
        fh.seek(pos - int(f.name))
        b = fh.read(1)[0]
        fh.seek(pos - int(f.name))
        fh.write(bytes([b ^ 0x10]))
    return f


def _write(base: Path, committed: int) -> list:
    store = _make(base)
    entries = store.append_batch_as_leader([bytes([65 + i % 26]) * 300 for i in range(40)], 1)
    store.update_committed_index(1, committed)
    while store.flush_pos != store.write_pos:
        store.flush()
    store.shutdown()
    return entries


def test_torn_tail_beyond_checkpoint_is_truncated(tmp_path: Path) -> None:
    """Control: the last entry cut short (nothing valid after it) is a torn tail: dropped."""
    entries = _write(tmp_path, committed=5)
    _flip(tmp_path, entries[39].pos + 48 + 100)
    store = _make(tmp_path)
    assert store.ledger_end_index == 38
    store.shutdown()


def test_mid_log_corruption_beyond_stale_checkpoint_is_refused(tmp_path: Path) -> None:
    entries = _write(tmp_path, committed=5)
    # intact entries 37..39 follow (within a file of the end: more than a file is refused already)
    path = _flip(tmp_path, entries[36].pos + 48 + 100)
    try:
        store = _make(tmp_path)
    except (EntryCorruptionError, StoreLayoutError) as exc:
        assert str(entries[36].pos) in str(exc) or "36" in str(exc)
        assert path.name in str(exc) and "CRC" in str(exc)
        # the explicit operator override still truncates
        store = DLedgerMmapFileStore(tmp_path, "n0", data_file_size=4096, index_file_size=INDEX_UNIT_SIZE * 1024,
                                     allow_truncate_committed=True).startup()
        assert store.ledger_end_index == 35
        store.shutdown()
        return
    end = store.ledger_end_index
    store.shutdown()
    raise AssertionError(f"recovery truncated to index {end}, dropping 3 intact entries after the corrupt one")

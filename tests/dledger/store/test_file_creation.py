"""Issue 13.4 (DLedger): a file created then sized in two steps could be left at 0 bytes by kill -9.

Real files only: a store is written, shut down, and then given exactly what an interrupted
creation leaves (a 0-byte last data/index file from the older two-step creation, a ``.creating``
leftover of the current one). The store must start, keep every entry and append again.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dledger.entry import INDEX_UNIT_SIZE
from dledger.store.errors import StoreLayoutError
from dledger.store.file_store import DLedgerMmapFileStore
from dledger.store.mmap_file_list import CREATING_SUFFIX, MmapFileList, offset_to_file_name

DATA = 64 * 1024
INDEX = INDEX_UNIT_SIZE * 64


def make(base: Path) -> DLedgerMmapFileStore:
    return DLedgerMmapFileStore(base, "n0", data_file_size=DATA, index_file_size=INDEX).startup()


def fill(base: Path, n: int) -> None:
    store = make(base)
    for i in range(n):
        store.append_as_leader(i.to_bytes(4, "big") * 256, 0)
    while store.flush_pos != store.write_pos:
        store.flush()
    store.update_committed_index(0, n - 1)
    store.shutdown()


def next_name(d: Path) -> str:
    last = sorted(os.listdir(d))[-1]
    size = (d / last).stat().st_size
    return offset_to_file_name(int(last) + size)


@pytest.mark.parametrize("which", ["data", "index", "both"])
def test_zero_byte_last_file_is_removed_and_store_starts(tmp_path: Path, which: str, caplog) -> None:
    fill(tmp_path, 100)  # 100 x ~1 KB entries: 2 data files, 2 index files
    root = tmp_path / "dledger-n0"
    made = []
    for sub in (["data", "index"] if which == "both" else [which]):
        p = root / sub / next_name(root / sub)
        p.touch()  # what kill -9 between open(O_CREAT) and ftruncate left behind
        made.append(p)
    store = make(tmp_path)  # before the fix: StoreLayoutError "length 0 != configured file size"
    try:
        assert (store.ledger_begin_index, store.ledger_end_index) == (0, 99)
        assert bytes(store.get(99).body) == (99).to_bytes(4, "big") * 256
        assert not any(p.exists() for p in made)
        assert "interrupted file creation" in caplog.text
        for i in range(100, 400):  # appends roll into new files again
            store.append_as_leader(b"x" * 1000, 0)
        assert store.ledger_end_index == 399
    finally:
        store.shutdown()


def test_creating_leftover_is_removed(tmp_path: Path) -> None:
    fill(tmp_path, 10)
    d = tmp_path / "dledger-n0" / "data"
    leftover = d / (next_name(d) + CREATING_SUFFIX)
    leftover.write_bytes(bytes(DATA // 2))  # killed while sizing the temporary file
    store = make(tmp_path)  # before the fix: "unexpected file ... names are 20-digit offsets"
    try:
        assert store.ledger_end_index == 9
        assert not leftover.exists()
    finally:
        store.shutdown()


def test_new_files_appear_whole(tmp_path: Path) -> None:
    """The file is never visible under its real name with a length other than the file size."""
    seen: list[int] = []
    real_link = os.link

    def spy(src, dst, *a, **kw):  # observe the file at the moment it gets its real name
        seen.append(os.stat(src).st_size)
        return real_link(src, dst, *a, **kw)

    lst = MmapFileList(tmp_path / "d", 4096)
    lst.load()
    os.link = spy
    try:
        for _ in range(3):
            lst.append(bytes(4000))
    finally:
        os.link = real_link
        lst.shutdown()
    assert seen == [4096, 4096, 4096]
    assert sorted(os.listdir(tmp_path / "d")) == [offset_to_file_name(i * 4096) for i in range(3)]


def test_short_nonzero_or_middle_empty_file_still_refused(tmp_path: Path) -> None:
    """Only an *empty last* file is harmless; a short file with bytes, or a hole, is refused."""
    fill(tmp_path, 100)
    d = tmp_path / "dledger-n0" / "data"
    first = d / sorted(os.listdir(d))[0]
    os.truncate(first, 0)  # an empty file that is not the last one
    with pytest.raises(StoreLayoutError):
        make(tmp_path)

"""Issue 13.4 (DLedger), broker side: the first DLedger start of an upgraded store killed while
its first data file was being created (an older build created then sized it in two steps, leaving
a 0-byte file) must start again as a first start: same divided offset, old messages, new writes.
"""
from __future__ import annotations

import os

from tools.procs import free_port
from tests.broker.store.test_dledger_commitlog import dledger_store, msg


def test_zero_byte_first_dledger_file_of_an_upgraded_store_restarts_as_first_start(store_copy, fixture_set) -> None:
    fs = fixture_set
    root = store_copy(fs.classic)
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}")
    store.load()  # freezes the old commitlog and creates the first DLedger data file
    store.shutdown()
    data = root / "dledger-n0" / "data"
    (first,) = sorted(data.iterdir())
    assert int(first.name) == fs.divided_offset
    os.truncate(first, 0)  # what kill -9 between create and ftruncate left
    for p in (root / "dledger-n0").rglob("*"):
        if p.is_file() and p != first:
            p.unlink()  # nothing else had been written yet
    (root / "abort").touch()
    store = dledger_store(root, f"n0-127.0.0.1:{free_port()}")
    store.load()  # before: 'length 0 != configured file size' (or, with only the file list fixed, divided -1)
    try:
        cl = store.commitlog
        assert cl.divided_commitlog_offset == fs.divided_offset
        assert [p.name for p in sorted(data.iterdir())] == [first.name]
        assert first.stat().st_size == fs.file_size
        store.start()
        assert cl.wait_leader_ready(10)
        res = store.put_message(msg("TopicTest", 0, 1))
        assert res.ok and fs.divided_offset < res.append_result.wrote_offset < fs.divided_offset + fs.file_size
    finally:
        store.shutdown()

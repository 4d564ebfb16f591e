"""Stranded followers (issue 13.2) with real files, sockets and processes.

* A follower whose store was moved away (what ``EntryCorruptionError`` tells the operator to do)
  must catch up fully: before the reject hint the leader kept ``match`` at the old value and the
  follower stayed empty for good (``test_moved_away_store_catches_up_processes`` proves both,
  the "before" half was run against the code before the fix, see the issue's closing note).
* A follower behind the leader's begin index (retention) is reset to the leader's first entry
  (DLedger's truncate); its log then begins there and survives a restart.
"""
from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from dledger.entry import INDEX_UNIT_SIZE
from dledger.store.file_store import DLedgerMmapFileStore
from dledger.store.mmap_file_list import MIN_BLANK_LEN
from tests.dledger.test_processes import ProcGroup
from tests.dledger.test_server import Group

DATA = 8 * 1024 + MIN_BLANK_LEN


def _store(root: Path, nid: str) -> DLedgerMmapFileStore:
    return DLedgerMmapFileStore(root, nid, data_file_size=DATA, index_file_size=8 * INDEX_UNIT_SIZE).startup()


def test_begin_at_restarts_the_log_at_the_leaders_first_entry(tmp_path: Path) -> None:
    leader = _store(tmp_path, "ld")
    for i in range(30):
        leader.append_as_leader(bytes([i]) * 1024, 1 + i // 10)
    leader.flush()
    old = [bytes(v) for v in leader.get_raw(0, 5)]
    leader.update_committed_index(3, 25)
    assert leader.delete_expired_files(0, force=True) >= 2
    begin = leader.ledger_begin_index
    assert begin > 10
    follower = _store(tmp_path, "f")
    follower.append_batch_as_follower(old)  # an old prefix, far behind the leader's begin
    follower.flush()
    follower.update_committed_index(1, 4)
    assert follower.begin_at(bytes(leader.get_raw(begin, begin + 1)[0])) == begin
    follower.append_batch_as_follower([bytes(v) for v in leader.get_raw(begin + 1, 30)])
    assert (follower.ledger_begin_index, follower.ledger_end_index) == (begin, 29)
    want = [bytes(v) for v in leader.get_raw(begin, 30)]
    assert [bytes(v) for v in follower.get_raw(begin, 30)] == want
    follower.flush()
    follower.shutdown()
    again = _store(tmp_path, "f")  # the reset log is what recovery finds after a restart
    assert (again.ledger_begin_index, again.ledger_end_index) == (begin, 29)
    assert [bytes(v) for v in again.get_raw(begin, 30)] == want
    again.shutdown()
    leader.shutdown()


@pytest.mark.timeout(60)
async def test_follower_behind_retention_is_reset_and_catches_up(tmp_path: Path) -> None:
    g = Group(tmp_path, mapped_file_size_for_entry_data=64 * 1024, mapped_file_size_for_entry_index=4096)
    try:
        await g.start_all()
        leader = await g.leader()
        await asyncio.gather(*[leader.append(b"a" * 900) for _ in range(20)])
        victim = next(n for n in g.ids if n != leader.config.self_id)
        await g.stop(victim)
        for _ in range(6):
            await asyncio.gather(*[leader.append(b"b" * 900) for _ in range(40)])
        for s in g.servers.values():  # retention on the two live members
            s.store.delete_expired_files(0, force=True)
        begin = leader.store.ledger_begin_index
        assert begin > 20, begin
        # restart them (their transports could still hold pushes made before the retention,
        # which would serve the victim without any reset), then bring the victim back
        live = list(g.servers)
        for nid in live:
            await g.stop(nid)
        for nid in live:
            await g.start(nid)
        s = await g.start(victim)
        leader = await g.leader()
        end = await g.converged(timeout=20)
        assert s.store.ledger_begin_index == begin and s.status()["counters"]["begin_resets"] == 1
        peer = leader.status()["peers"][victim]
        assert peer["begin_resets"] >= 1 and not peer["behind_begin"]
        want = [bytes(v) for v in leader.store.get_raw(begin, end + 1)]
        assert [bytes(v) for v in s.store.get_raw(begin, end + 1)] == want
        await asyncio.gather(*[leader.append(b"c") for _ in range(10)])  # and it keeps going
        assert await g.converged() == end + 10
    finally:
        await g.stop_all()


@pytest.fixture
def procs_group(tmp_path: Path):
    g = ProcGroup(tmp_path)
    yield g
    g.kill_all()


async def _acked_appends(g: ProcGroup, n: int) -> dict[int, bytes]:
    c = g.client(timeout=5.0)
    acked: dict[int, bytes] = {}
    try:
        for k in range(0, n, 50):
            res = await c.append_batch([b"e%d" % i for i in range(k, k + 50)])
            for i, r in enumerate(res):
                acked[r.index] = b"e%d" % (k + i)
    finally:
        await c.close()
    return acked


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
async def test_moved_away_store_catches_up_processes(procs_group: ProcGroup) -> None:
    g = procs_group
    for nid in g.ids:
        g.start(nid)
    ld = await g.leader()
    acked = await _acked_appends(g, 500)
    await g.caught_up()
    victim = next(n for n in g.ids if n != ld)
    g.kill9(victim)
    shutil.move(str(g.root / f"dledger-{victim}"), str(g.root / f"moved-away-{victim}"))
    t0 = time.monotonic()
    g.start(victim)
    end = await g.caught_up(timeout=30)
    took = time.monotonic() - t0
    assert end >= max(acked)
    c = g.client()
    try:
        for idx, body in acked.items():  # every acknowledged entry is readable on the new copy
            assert (await c.get(idx, victim))["body"] == body
    finally:
        await c.close()
    st = (await g.statuses())[ld]
    assert st["peers"][victim]["hint_resets"] >= 1, st["peers"]
    print(f"\nmoved-away follower caught up {end + 1} entries in {took:.2f}s")

"""The dedup window keeps no per-entry objects the garbage collector walks (issue 22.3).

A full collection stops every thread; it costs time for every element of every container it
traverses. These tests count exactly what the collector traverses (``gc.get_referents`` is the
containers' ``tp_traverse``), so they fail if a per-entry object or tuple creeps back in, without
timing anything.
"""
from __future__ import annotations

import gc
import logging

import pytest

from broker.gc_quiet import RecentTable
from broker.gc_watch import GcWatch, freeze_startup
from broker.put_dedup import RecentSends, dedup_key
from broker.store.dispatch import DispatchRequest


def _walked() -> int:
    """Elements the collector visits in one full collection (references out of tracked objects)."""
    return sum(len(gc.get_referents(o)) for o in gc.get_objects())


def test_recent_table_window_bound_replacement_and_stale_cleanup() -> None:
    t = RecentTable(capacity=8)
    for i in range(5):
        t.put(f"k{i}", 100.0 + i, b"v%d" % i, limit=0.0, max_keys=8)
    assert [t.get(f"k{i}", 0.0) for i in range(5)] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert t.get("k1", 101.5) is None and t.get("k2", 101.5) == b"v2"  # older than the limit
    t.put("k0", 200.0, b"again", limit=0.0, max_keys=8)  # a key put again: new payload and age
    assert t.get("k0", 150.0) == b"again"
    for i in range(5, 20):  # past the capacity: the oldest go first
        t.put(f"k{i}", 300.0 + i, b"x", limit=0.0, max_keys=3)
    assert len(t) == 3 and t.get("k19", 0.0) == b"x" and t.get("k16", 0.0) is None and t.get("k0", 0.0) is None
    t.trim(limit=1e9, max_keys=3)
    assert len(t) == 0 and t.get("k19", 0.0) is None
    with pytest.raises(ValueError):
        RecentTable(0)


def test_stale_keys_leave_the_index() -> None:
    t = RecentTable(capacity=100)
    for i in range(5000):
        t.put(f"k{i}", float(i), b"", limit=float(i - 10), max_keys=100)
    assert len(t) <= 11 and len(t._index) <= 2 * len(t) + 1024 + 1


def test_a_full_window_adds_nothing_for_the_collector_to_walk() -> None:
    w = RecentSends(60, ("127.0.0.1", 10911), clock=lambda: 1000.0)
    gc.collect()
    before = _walked()
    for b in range(200):
        w.on_arrival([DispatchRequest("TopicA", 1, (b * 100 + i) * 1200, 1200, 0, 0, b * 100 + i,
                                      uniq_key=f"{b:08X}{i:024X}") for i in range(100)])
        keys = [dedup_key("TopicA", f"R{b:07X}{i:024X}") for i in range(2)]
        w.remember(keys, 3, [b, b + 1], [b * 10, b * 10 + 5], [5, 5])
    gc.collect()
    grown = _walked() - before
    assert w.status()["keys"] == 20_400
    # 20,000 dispatched keys and 200 requests of 2 remembered: the collector's work must not grow with them
    assert grown < 2_000, f"the collector walks {grown} more references after 20,200 window entries"
    assert not gc.is_tracked(w._keys._index)
    hit = w.lookup([dedup_key("TopicA", f"{7:08X}{5:024X}")])
    assert hit is not None and (hit[0].queue_offset, hit[0].physical_offset) == (705, 705 * 1200)
    again = w.lookup([dedup_key("TopicA", f"R{7:07X}{i:024X}") for i in range(2)])
    assert again is not None
    back = w.outcome_of(again)
    assert (back["queue_offsets"], back["physical_offsets"], back["queue_id"], back["next_offset"]) == (
        [7, 8], [70, 75], 3, 80)


def test_gc_watch_times_collections_and_reports_long_ones(caplog: pytest.LogCaptureFixture) -> None:
    watch = GcWatch(report_ms=0.0).install()
    try:
        with caplog.at_level(logging.WARNING, logger="broker.gc"):
            gc.collect()
        snap = watch.snapshot()
        assert snap["collections"][2] >= 1 and snap["seconds"][2] > 0 and snap["maxMs"][2] > 0
        assert any("generation 2 stopped every thread" in r.getMessage() for r in caplog.records)
    finally:
        watch.uninstall()


def test_freeze_startup_moves_what_is_alive_out_of_the_collectors_way() -> None:
    try:
        frozen = freeze_startup()
        assert frozen > 1000 and gc.get_freeze_count() == frozen
        assert len(gc.get_objects(2)) < frozen  # what a full collection still walks
    finally:
        gc.unfreeze()


def test_keep_leaves_a_live_entry_with_the_same_payload_as_it_is() -> None:
    """keep() is put() unless the key is live with that very payload: then nothing changes, not
    even its age (the answer and the dispatch of one message make one entry)."""
    t = RecentTable(capacity=8)
    t.keep("a", 100.0, b"place-1", limit=0.0, max_keys=8)
    t.keep("a", 150.0, b"place-1", limit=0.0, max_keys=8)
    assert len(t) == 1 and t.get("a", 120.0) is None  # the age stayed 100
    t.keep("a", 160.0, b"place-2", limit=0.0, max_keys=8)  # another place: a new entry
    assert len(t) == 2 and t.get("a", 155.0) == b"place-2"
    t.keep("a", 170.0, b"place-2", limit=165.0, max_keys=8)  # same payload but older than the limit: put again
    assert t.get("a", 165.0) == b"place-2"
    t.keep("b", 180.0, b"place-2x", limit=0.0, max_keys=8)
    t.keep("b", 181.0, b"x", limit=0.0, max_keys=8)  # a payload that is the old one's tail is another payload
    assert t.get("b", 0.0) == b"x"

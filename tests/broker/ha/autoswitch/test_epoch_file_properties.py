"""EpochFileCache over random operation sequences (hypothesis): what is on disk always reloads to
what is in memory, and the invariants of append_entry hold (epochs and start offsets grow, each
end is the next start, the last epoch open)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache

LONG_MAX = 2 ** 63 - 1
OFFSETS = st.integers(min_value=0, max_value=2 ** 40)
op = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 50), OFFSETS),
    st.tuples(st.just("suffix_offset"), st.just(0), OFFSETS),
    st.tuples(st.just("suffix_epoch"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("prefix_offset"), st.just(0), OFFSETS),
)


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(op, max_size=40))
def test_disk_reloads_to_memory_and_invariants_hold(ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / EPOCH_FILE_NAME
        cache = EpochFileCache(path)
        for kind, epoch, offset in ops:
            before = cache.get_all_entries()
            if kind == "append":
                ok = cache.append_entry(EpochEntry(epoch, offset))
                grows = not before or (epoch > before[-1].epoch and offset > before[-1].start_offset)
                assert ok == grows
                if not ok:
                    assert cache.get_all_entries() == before
            elif kind == "suffix_offset":
                cache.truncate_suffix_by_offset(offset)
                assert all(e.start_offset < offset for e in cache.get_all_entries())
            elif kind == "suffix_epoch":
                cache.truncate_suffix_by_epoch(epoch)
                assert all(e.epoch < epoch for e in cache.get_all_entries())
            else:
                cache.truncate_prefix_by_offset(offset)
                assert all(e.end_offset > offset for e in cache.get_all_entries())
            entries = cache.get_all_entries()
            for a, b in zip(entries, entries[1:]):
                assert a.epoch < b.epoch and a.start_offset < b.start_offset and a.end_offset == b.start_offset
            if entries:
                assert entries[-1].end_offset == LONG_MAX
            reloaded = EpochFileCache(path)
            reloaded.init_cache_from_file()
            assert reloaded.get_all_entries() == entries

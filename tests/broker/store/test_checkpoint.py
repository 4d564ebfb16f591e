"""StoreCheckpoint against Apache's files and its own round trip."""
from __future__ import annotations

import struct

import pytest

from broker.store.checkpoint import CheckpointError, StoreCheckpoint


@pytest.mark.parametrize("which", ["classic", "mixed"])
def test_reads_fixture_checkpoint(fixture_set, manifests, store_copy, which):
    name = getattr(fixture_set, which)
    root = store_copy(name)
    raw = (root / "checkpoint").read_bytes()
    assert len(raw) == 4096
    cp = StoreCheckpoint(root / "checkpoint")
    physic, logics, index = struct.unpack_from(">qqq", raw)
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (physic, logics, index)
    assert cp.master_flushed_offset == cp.confirm_phy_offset == 0  # 4.9.8 does not write them
    # The flushed timestamps are real message store timestamps, at or before the newest message.
    newest = max(r["storeTimestamp"] for r in manifests(name))
    assert 0 < cp.logics_msg_timestamp <= newest and 0 < cp.physic_msg_timestamp <= newest
    assert cp.logics_msg_timestamp == newest  # clean shutdown: every unit's timestamp recorded
    assert cp.min_timestamp == min(physic, logics) - 3000
    assert cp.min_timestamp_index == min(cp.min_timestamp, index) == 0  # index never filled up
    cp.flush()  # writing back unchanged values keeps the file byte-identical
    cp.shutdown()
    assert (root / "checkpoint").read_bytes() == raw


def test_round_trip_and_5x_fields(tmp_path):
    path = tmp_path / "store" / "checkpoint"
    cp = StoreCheckpoint(path)
    assert path.stat().st_size == 4096 and cp.min_timestamp == 0
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 10_000, 9_000, 5_000
    cp.master_flushed_offset, cp.confirm_phy_offset = 123, 456
    assert path.read_bytes()[:8] == bytes(8)  # nothing reaches the file before flush()
    cp.shutdown()
    raw = path.read_bytes()
    assert struct.unpack_from(">qqqqq", raw) == (10_000, 9_000, 5_000, 123, 456)
    assert raw[40:] == bytes(4096 - 40)
    again = StoreCheckpoint(path)
    assert again.min_timestamp == 6_000 and again.get_min_timestamp_index() == 5_000
    assert again.confirm_phy_offset == 456
    again.shutdown()
    with pytest.raises(CheckpointError, match="shut down"):
        again.flush()


def test_min_timestamp_never_negative(tmp_path):
    cp = StoreCheckpoint(tmp_path / "checkpoint")
    cp.physic_msg_timestamp = 1000
    cp.logics_msg_timestamp = 2000
    assert cp.min_timestamp == 0
    cp.shutdown()


def test_truncated_file_is_an_error(tmp_path):
    (tmp_path / "checkpoint").write_bytes(b"\0" * 10)
    with pytest.raises(CheckpointError, match="checkpoint is 10 bytes"):
        StoreCheckpoint(tmp_path / "checkpoint")

"""Facts of ``mqupgrade inspect`` beyond the classic commitlog (issue 13.8): message counts
from the ConsumeQueues, and the DLedger side of an upgraded store.

Rules: read-only and O(1) in the store size, like the rest of ``inspect``: counts come from the
ConsumeQueues' min/max offsets, the DLedger end from ``checkpoint`` + one index unit (never a
scan, never the store's recovery, which writes).

Theory of operation: :func:`count_messages` sums ``max - min`` over every ConsumeQueue;
:func:`inspect_dledger` fills ``StoreInspection.dledger`` and lifts ``max_offset`` to the end of
the committed DLedger log, so an upgraded store shows its real end across the divide.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from broker.store.consume_queue import ConsumeQueueStore
from dledger.entry import INDEX_UNIT, INDEX_UNIT_SIZE
from dledger.store.state_files import CheckpointFile
from upgrade.store_files import list_files


def count_messages(root: Path, cq_file_size: int) -> Optional[int]:
    """Messages the ConsumeQueues index (read-only; None without ConsumeQueues)."""
    if not (root / "consumequeue").is_dir():
        return None
    cqs = ConsumeQueueStore(root, cq_file_size, read_only=True)
    try:
        cqs.load()
        total = 0
        for cq in cqs.consume_queues():
            cq.recover()
            total += max(0, cq.max_offset_in_queue - cq.min_offset_in_queue)
        return total
    finally:
        cqs.shutdown()


def inspect_dledger(s: Any, member: Path) -> None:
    """The DLedger side of an upgraded store, read-only and O(1): its first data file starts at
    the divide; the committed index comes from ``checkpoint`` and its index unit gives the end of
    the committed log, which is the store's max offset (the old region ends at the divide)."""

    data, index = list_files(member / "data"), list_files(member / "index")
    info: dict[str, Any] = {"dir": member.name, "divided_offset": data[0].from_offset, "data_files": len(data),
                            "committed_index": None, "max_offset": None, "how": ""}
    s.dledger = info
    try:
        committed = CheckpointFile(member).load_committed_index()
    except Exception as exc:  # noqa: BLE001 - a damaged checkpoint is reported, not a traceback
        info["how"] = f"checkpoint unreadable: {exc}"
        return
    info["committed_index"] = committed
    if committed is None or committed < 0 or not index:
        info["how"] = "no committed entry in the checkpoint"
        return
    at = committed * INDEX_UNIT_SIZE
    f = next((x for x in index if x.from_offset <= at < x.from_offset + x.size), None)
    if f is None:
        info["how"] = f"no index file holds entry {committed}"
        return
    with open(member / "index" / f.name, "rb") as fh:
        fh.seek(at - f.from_offset)
        raw = fh.read(INDEX_UNIT_SIZE)
    if len(raw) < INDEX_UNIT_SIZE:
        info["how"] = f"index file {f.name} ends before entry {committed}"
        return
    _magic, pos, size, idx, _term = INDEX_UNIT.unpack(raw)
    if idx != committed or size <= 0:
        info["how"] = f"index unit of entry {committed} does not verify (holds entry {idx})"
        return
    end = pos + size
    info["max_offset"] = end
    info["how"] = f"end of committed entry {committed} (checkpoint + index unit)"
    s.max_offset = max(s.max_offset, end)
    s.max_offset_method = "DLedger: " + info["how"]
    cq_max = s.cq_max_physical_offset
    if cq_max > end:
        s.cq_state, s.cq_detail = "ahead", f"ConsumeQueues reach {cq_max}, beyond the committed DLedger end {end}"
    elif cq_max >= info["divided_offset"] or cq_max == end:
        s.cq_state, s.cq_detail = "agrees", f"max {cq_max} inside the DLedger log (committed end {end})"

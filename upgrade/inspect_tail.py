"""The end of a classic commitlog, found as recovery would find it, in O(1) of the store size.

Rules:
- Read-only: one read-only mapping per commitlog file, the ConsumeQueues opened read-only.
- Start at the record after the last ConsumeQueue unit (verified to be a valid record of the
  unit's size) and walk forward with CRC checks to the first invalid record; without a usable
  hint, walk from the 3rd-last file as ``recoverNormally`` does. Records after the hint that a CQ
  should hold make the CQ "behind"; PREPARED/ROLLBACK transaction records never are in a CQ.

Theory of operation: :func:`find_end` takes the ConsumeQueues' hint (:func:`_cq_hint`), walks
with a :class:`_Walker` and fills the end, tail, stop reason and ConsumeQueue state of the
:class:`~upgrade.inspect_model.StoreInspection`.
"""
from __future__ import annotations

import mmap
from pathlib import Path
from typing import Optional

from broker.store.consume_queue import ConsumeQueueStore, is_consume_queue_dispatchable
from broker.store.message import check_message_and_return_size, explain_invalid_record
from broker.store.record_walk import END, RECORD, ROLL, walk
from upgrade.inspect_model import StoreInspection


class _Walker:
    """Walks records across commitlog files with one read-only mapping per file."""

    def __init__(self, s: StoreInspection) -> None:
        self.s = s
        self.maps: dict[int, mmap.mmap] = {}

    def view(self, index: int) -> mmap.mmap:
        if index not in self.maps:
            f = self.s.files[index]
            with open(self.s.file_path(f.name), "rb") as fh:
                self.maps[index] = mmap.mmap(fh.fileno(), f.size, access=mmap.ACCESS_READ)
        return self.maps[index]

    def close(self) -> None:
        for m in self.maps.values():
            m.close()

    def index_of(self, offset: int) -> Optional[int]:
        first = self.s.files[0].from_offset
        i = (offset - first) // self.s.file_size
        return i if 0 <= i < len(self.s.files) else None

    def walk(self, index: int, pos: int) -> tuple[int, int, str, bool, int]:
        """(end offset, file index of the end, stop reason, frozen, dispatchable records seen)."""
        dispatchable = 0
        while True:
            view = self.view(index)
            kind = END
            for kind, at, size, req, _ in walk(view, pos, len(view), check_message_and_return_size, check_crc=True):
                pos = at + size
                if kind == RECORD:
                    dispatchable += is_consume_queue_dispatchable(req)
                    self.s.walked_bytes += size
            f = self.s.files[index]
            if kind == ROLL:  # end-of-file blank
                if index + 1 < len(self.s.files):
                    index, pos = index + 1, 0
                    continue
                return f.from_offset + pos, index, "blank", True, dispatchable
            head = bytes(view[pos:pos + 8])
            reason = "zeros" if head.strip(b"\0") == b"" else explain_invalid_record(view, pos)
            return f.from_offset + pos, index, reason, False, dispatchable


def _cq_hint(s: StoreInspection, root: Path) -> tuple[int, Optional[tuple[int, int]]]:
    """(CQ max physical offset, (offset, size) of the unit that reaches it) from the CQs' tails."""
    if not (root / "consumequeue").is_dir():
        return -1, None
    cqs = ConsumeQueueStore(root, s.cq_file_size, read_only=True)
    try:
        cqs.load()
        best, unit = -1, None
        for cq in cqs.consume_queues():
            cq.recover()
            if cq.max_physic_offset > best:
                last = cq.get(cq.max_offset_in_queue - 1)
                if last is not None and last[0] + last[1] == cq.max_physic_offset:
                    best, unit = cq.max_physic_offset, (last[0], last[1])
                else:
                    best, unit = cq.max_physic_offset, None
        return best, unit
    finally:
        cqs.shutdown()


def find_end(s: StoreInspection, root: Path) -> None:
    """Fill ``s``'s end, tail, stop reason and ConsumeQueue agreement (see the module rules)."""
    w = _Walker(s)
    try:
        cq_max, unit = _cq_hint(s, root)
        s.cq_max_physical_offset = cq_max
        start: Optional[tuple[int, int]] = None
        if unit is not None:
            i = w.index_of(unit[0])
            if i is not None:
                f = s.files[i]
                req = check_message_and_return_size(w.view(i), unit[0] - f.from_offset, True)
                if req.success and req.msg_size == unit[1]:
                    start = (i, unit[0] - f.from_offset + unit[1])
                    s.max_offset_method = "walk from the last ConsumeQueue unit"
        if start is None:
            start = (max(0, len(s.files) - 3), 0)
            s.max_offset_method = "walk from the 3rd-last file (no usable ConsumeQueue hint)"
        end, index, reason, frozen, dispatchable = w.walk(*start)
    finally:
        w.close()
    s.max_offset = end
    s.stop_reason = reason
    s.frozen = frozen
    tf = s.files[index]
    s.tail_file, s.tail_position = tf.name, end - tf.from_offset
    s.files_after_end = [f.name for f in s.files[index + 1:]]
    if cq_max < 0:
        s.cq_state, s.cq_detail = "none", "no ConsumeQueue units"
    elif cq_max > end:
        s.cq_state, s.cq_detail = "ahead", f"ConsumeQueues reach {cq_max}, beyond the commitlog end {end}"
    elif cq_max == end:
        s.cq_state, s.cq_detail = "agrees", f"max {cq_max} = commitlog end"
    elif s.max_offset_method.startswith("walk from the last") and dispatchable == 0:
        s.cq_state, s.cq_detail = "agrees", f"max {cq_max}; no record after it belongs in a ConsumeQueue"
    else:
        s.cq_state = "behind"
        s.cq_detail = (f"max {cq_max}; {dispatchable} record(s) after it belong in ConsumeQueues"
                       if dispatchable else f"max {cq_max}; the last unit did not verify")

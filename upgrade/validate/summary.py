"""What every range task shares: the summary record, read-only mappings, record categories.

Rules:
- A summary is a plain dict (pickles small, serialises to JSON as is) with fixed keys created by
  :func:`new_summary`; violation rows go through :meth:`Summary.violation`, which keeps at most
  MAX_VIOLATIONS rows per range but counts every one per check.
- Mappings are read-only (``ACCESS_READ``) from a page-aligned start to the file end; callers
  must drop numpy views before ``close`` (we keep one, ``a``, and delete it there).
- PREPARED/ROLLBACK transactional records and barrier messages (topic
  ``RMQ_SYS_DLEDGER_BARRIER``, DESIGN §4.1) are never dispatched to ConsumeQueues.

Theory of operation: plain data holders, no logic beyond bookkeeping.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from broker.store import message as codec
from upgrade.validate.plan import CQ_UNIT, ScanRange  # noqa: F401 - CQ_UNIT re-exported

MAX_VIOLATIONS = 50
BARRIER_TOPIC = b"RMQ_SYS_DLEDGER_BARRIER"
TX_SKIP = (codec.TRANSACTION_PREPARED_TYPE, codec.TRANSACTION_ROLLBACK_TYPE)
IDX_UNIT = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
CHECK_FOR_KIND = {"old": "old_continuity", "new": "old_continuity", "dl": "dledger_continuity"}
# what a violation's ``offset`` measures: physical commitlog offsets, DLedger index bytes, CQ bytes
SPACE = {"old": "physical", "new": "physical", "dl": "physical", "idx": "index", "cq": "consumequeue"}


class Summary(dict):
    """A range summary; a dict so it pickles small and serialises to JSON as is."""

    def violation(self, check: str, offset: int, message: str, file: str | None = None,
                  file_offset: int | None = None, queue: str | None = None) -> None:
        self["violation_count"] += 1
        self["by_check"][check] = self["by_check"].get(check, 0) + 1
        if len(self["violations"]) < MAX_VIOLATIONS:
            self["violations"].append({
                "check": check, "node": self["node"], "file": file or self["file"], "offset": int(offset),
                "file_offset": int(offset - self["file_start"]) if file_offset is None else int(file_offset),
                "queue": queue, "space": SPACE[self["kind"]], "message": message,
            })


def new_summary(r: ScanRange) -> Summary:
    return Summary(rid=r.rid, kind=r.kind, node=r.node, file=r.name, path=r.path, file_start=r.file_start,
                   file_size=r.file_size, start=r.abs_start, end=r.abs_end, forced=r.forced_start is not None,
                   first=None, next=None, end_kind="empty", end_pos=None, records=0, messages=0,
                   dispatchable=0, tx_skipped=0, barriers=0, bytes=0, runs=[], violations=[],
                   violation_count=0, by_check={}, hash=None, first_index=None, last_index=None, first_term=None,
                   last_term=None, screen_disagreements=0, cq_digest=[], idx_digest=[], digest=None,
                   detail=r.detail, undispatched=0, tail=None, epoch_starts=[])


class Mapped:
    """Read-only mmap of ``path`` from the page-aligned ``start`` to the file end."""

    def __init__(self, path: str, start: int = 0) -> None:
        self.base = start - start % mmap.ALLOCATIONGRANULARITY
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            self.limit = max(size - self.base, 0)  # buffer length
            self.mm = mmap.mmap(fh.fileno(), self.limit, offset=self.base, access=mmap.ACCESS_READ) if self.limit > 0 else b""
        self.a = np.frombuffer(self.mm, dtype=np.uint8) if self.limit > 0 else np.zeros(0, np.uint8)

    def close(self) -> None:
        del self.a
        if isinstance(self.mm, mmap.mmap):
            self.mm.close()

"""Cutting stores into byte ranges: the unit of work that Spark parallelises.

Rules:
- Ranges lie on a fixed grid per file (``[k*R, (k+1)*R)`` of file-relative bytes), so the same
  range of the same file has the same bounds on every replica and their hashes compare.
- A range owns the records that *start* inside it (Hadoop's line-reader rule); records may run
  past the range end. Grid sizes: R for commitlog and DLedger data, R rounded down to 32 for the
  DLedger index, to 20 for ConsumeQueues, so units never straddle ranges.
- Committed prefix only: DLedger data ranges stop at ``committed_pos``, index ranges at unit
  ``committed_index``. ConsumeQueue ranges stop at the file's last data extent (``SEEK_HOLE``)
  because CQ files are sparse and mostly empty.
- ConsumeQueue ranges are ``R / CQ_DENSITY`` bytes (at least 64 KiB): each 20-byte unit is checked against its
  message, so a CQ range costs about what a data range of R bytes costs.
- Replica hashing (check 6) is planned here: with several nodes each range hashes its bytes up
  to the common limit (old region: the smallest write end / the divide; DLedger: the smallest
  ``committed_pos``; index: the smallest committed index).
- Classic stores (no DLedger, not frozen) may be open in a running broker: their context carries
  ``vouched``, the ConsumeQueues' dispatch frontier (:func:`cq_frontier`, clamped to the end of
  the files listed) and ``live_tail``, the last old file. Records before ``vouched`` were whole
  when dispatched; what follows is checked with the unfinished-write rule (``tasks``).
- A store migrated to Controller mode: the writable classic region's files are ``new`` ranges
  (scanned like old ones; they are the live part: ``vouched`` and ``live_tail`` come from them),
  DLedger data ranges stop at the DLedger region's ``end`` (the regions file's, not the
  checkpoint's), and the context carries ``classic_from`` and ``gap_start`` (the last region's end)
  so that ConsumeQueue units are routed by region (``cq``). ``epoch_offsets`` (the epoch file's
  start offsets) go to the classic ranges of the writable region, which report the ones that are
  record starts (``tasks``).
- A ScanRange is a small frozen record: it is pickled to executors; the files stay where they are.

Theory of operation: ``plan(layouts, range_size)`` is pure metadata work on the driver (file
listing and a short walk of each classic last file when replicas must be compared).
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field, replace

import numpy as np

from upgrade.validate.layout import FileRef, StoreLayout
from upgrade.validate.records import walk_classic

DEFAULT_RANGE_SIZE = 64 << 20
CQ_UNIT = np.dtype([("off", ">i8"), ("size", ">i4"), ("tags", ">i8")])
CQ_DENSITY = 64  # CQ ranges cover range_size / 64 bytes: ~the messages of one data range
CQ_MIN_RANGE = 64 << 10


@dataclass(frozen=True)
class NodeContext:
    """What a task needs to know about its node besides its own file."""

    node: str
    old: tuple[FileRef, ...]
    data: tuple[FileRef, ...]
    index: tuple[FileRef, ...]
    divided: int | None
    committed_pos: int | None
    committed_index: int
    check_crc: bool = True
    # classic stores (no DLedger, not frozen) may have a broker writing them: ``vouched`` is the
    # ConsumeQueues' dispatch frontier (max unit offset + size) and ``live_tail`` the last old
    # file's path; see ``tasks`` (unfinished writes) and ``cq`` (units past the frontier)
    vouched: int | None = None
    live_tail: str | None = None
    # a store migrated to Controller mode (``regions``): the writable classic region's files,
    # where it starts, where the gap below it starts; the epoch file's start offsets
    new: tuple[FileRef, ...] = ()
    classic_from: int | None = None
    gap_start: int | None = None
    epoch_offsets: tuple[int, ...] = ()


def _live_tail(files: tuple[FileRef, ...]) -> str:
    """The classic file a running broker writes: the last one holding a record. A file the broker
    pre-created for its next roll (AllocateMappedFileService) starts with zeros."""
    for f in reversed(files):
        with open(f.path, "rb") as fh:
            if any(fh.read(8)):
                return f.path
    return files[-1].path


@dataclass(frozen=True)
class ScanRange:
    rid: int
    kind: str  # "old" | "new" (writable classic region of a migrated store) | "dl" | "idx" | "cq"
    node: str
    path: str
    file_start: int  # absolute offset of the file's byte 0 (physical, index-space or CQ-space)
    file_size: int
    start: int  # file-relative, inclusive
    end: int  # file-relative, exclusive
    ctx: NodeContext
    hash_limit: int | None = None  # absolute; hash bytes [start, min(end, limit)) when set
    topic: str = ""
    queue_id: int = -1
    forced_start: int | None = None  # file-relative start set by reconciliation
    detail: bool = False  # cq/idx: check every unit against its message/entry (digest mismatch)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def abs_start(self) -> int:
        return self.file_start + self.start

    @property
    def abs_end(self) -> int:
        return self.file_start + self.end

    def forced(self, abs_pos: int) -> "ScanRange":
        return replace(self, forced_start=abs_pos - self.file_start)

    def detailed(self) -> "ScanRange":
        return replace(self, detail=True)


@dataclass
class Plan:
    ranges: list[ScanRange] = field(default_factory=list)
    contexts: dict[str, NodeContext] = field(default_factory=dict)
    old_limit: int | None = None  # common hash limit of the old region
    new_limit: int | None = None  # ... of the writable classic region of migrated stores
    dl_limit: int | None = None
    idx_limit: int | None = None
    range_size: int = DEFAULT_RANGE_SIZE

    @property
    def total_bytes(self) -> int:
        return sum(r.end - r.start for r in self.ranges)

def data_extent_end(path: str, size: int) -> int:
    """End of the last non-hole extent of a (sparse) file; ``size`` when holes are unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return size
    try:
        end, pos = 0, 0
        while pos < size:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            end, pos = hole, hole
        return min(end, size)
    except (AttributeError, OSError):
        return size
    finally:
        os.close(fd)


def classic_write_end(layout: StoreLayout, files: tuple[FileRef, ...] | None = None) -> int | None:
    """Absolute end of the records in the last old file (or of ``files``): its blank or first
    zero byte."""
    files = layout.old if files is None else files
    if not files:
        return None
    last = files[-1]
    if last.size == 0:
        return last.start
    with open(last.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        _starts, _kind, end = walk_classic(mm, 0, last.size, last.size)
    return last.start + end


def cq_frontier(layout: StoreLayout) -> int | None:
    """Max ``offset + size`` over the last live unit of every ConsumeQueue (None without any).

    Reput dispatches records in commitlog order and only complete ones, so every record that
    starts before this offset was completely written when it was read (RocketMQ's dispatch
    position, as the ConsumeQueues on disk vouch for it). Per queue: the last file holding a
    live unit, found by a binary search over units (live units first, then zeros), a few
    20-byte reads each.
    """
    best = None
    for q in layout.queues:
        for f in reversed(q.files):
            with open(f.path, "rb") as fh:
                def unit(i: int) -> tuple[int, int]:
                    raw = os.pread(fh.fileno(), 20, i * 20)
                    if len(raw) < 20:
                        return 0, 0
                    u = np.frombuffer(raw, dtype=CQ_UNIT)[0]
                    return int(u["off"]), int(u["size"])

                lo, hi = 0, f.size // 20  # find the first empty unit
                while lo < hi:
                    mid = (lo + hi) // 2
                    if unit(mid)[1] != 0:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == 0:
                    continue
                off, size = unit(lo - 1)
            if size == 0x7FFFFFFF:  # pre-blank fill only: no live unit in this file
                continue
            best = off + size if best is None else max(best, off + size)
            break
    return best


def _vouched(layout: StoreLayout, files: tuple[FileRef, ...]) -> int | None:
    """The dispatch frontier, clamped to the end of the live files discovered (a broker may have
    rolled to a new file and dispatched into it since the listing)."""
    front = cq_frontier(layout)
    return None if front is None else min(front, files[-1].end)


def _grid(f: FileRef, limit: int, step: int) -> list[tuple[int, int]]:
    return [(s, min(s + step, limit)) for s in range(0, limit, step)]


def plan(layouts: list[StoreLayout], range_size: int = DEFAULT_RANGE_SIZE, check_crc: bool = True) -> Plan:
    if range_size < 4096:
        raise ValueError("range size must be at least 4096 bytes")
    out = Plan(range_size=range_size)
    replicas = len(layouts) > 1
    if replicas:
        ends = []
        for lay in layouts:
            ends.append(lay.divided_offset if lay.divided_offset is not None and lay.old else classic_write_end(lay))
        out.old_limit = min((e for e in ends if e is not None), default=None)
        if all(lay.new for lay in layouts):
            out.new_limit = min(classic_write_end(lay, lay.new) or 0 for lay in layouts)
        dls = [lay.dledger for lay in layouts if lay.dledger is not None]
        if len(dls) > 1:
            out.dl_limit = min(lay.region_end if lay.region_end is not None else lay.dledger.committed_pos
                               for lay in layouts if lay.dledger is not None)
            out.idx_limit = (min(d.committed_index for d in dls) + 1) * 32
    rid = 0
    for lay in layouts:
        dl = lay.dledger
        live_files = lay.new if lay.migrated else (lay.old if dl is None and not lay.frozen else ())
        committed_pos = lay.region_end if lay.region_end is not None else (dl.committed_pos if dl else None)
        ctx = NodeContext(lay.node, lay.old, dl.data if dl else (), dl.index if dl else (), lay.divided_offset,
                          committed_pos, dl.committed_index if dl else -1, check_crc,
                          _vouched(lay, live_files) if live_files else None,
                          _live_tail(live_files) if live_files else None, lay.new, lay.classic_from,
                          lay.regions.last_end if lay.regions is not None else None,
                          tuple(sorted({o for _e, o in lay.epochs.entries})) if lay.epochs is not None else ())
        out.contexts[lay.node] = ctx
        for kind, files, limit_all in (("old", lay.old, out.old_limit), ("new", lay.new, out.new_limit)):
            for f in files:
                for s, e in _grid(f, f.size, range_size):
                    out.ranges.append(ScanRange(rid, kind, lay.node, f.path, f.start, f.size, s, e, ctx, limit_all))
                    rid += 1
        if dl is not None and committed_pos is not None:
            for f in dl.data:
                limit = min(f.size, committed_pos - f.start)
                for s, e in _grid(f, max(limit, 0), range_size):
                    out.ranges.append(ScanRange(rid, "dl", lay.node, f.path, f.start, f.size, s, e, ctx, out.dl_limit))
                    rid += 1
            step = max(32, range_size // 32 * 32)
            units_end = (dl.committed_index + 1) * 32
            for f in dl.index:
                limit = min(f.size, units_end - f.start)
                for s, e in _grid(f, max(limit, 0), step):
                    out.ranges.append(ScanRange(rid, "idx", lay.node, f.path, f.start, f.size, s, e, ctx, out.idx_limit))
                    rid += 1
        step = max(CQ_MIN_RANGE, range_size // CQ_DENSITY) // 20 * 20  # a unit costs ~one message check
        for q in lay.queues:
            for f in q.files:
                extent = data_extent_end(f.path, f.size)
                limit = min(f.size, -(-extent // 20) * 20)
                for s, e in _grid(f, limit, step):
                    out.ranges.append(ScanRange(rid, "cq", lay.node, f.path, f.start, f.size, s, e, ctx,
                                                topic=q.topic, queue_id=q.queue_id))
                    rid += 1
    return out

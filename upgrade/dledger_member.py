"""One DLedger-mode store, read for its migration to Controller mode (read-only, O(1) in its size).

Rules:
- A DLedger-mode store is a store root holding ``dledger-<selfId>/data`` (DLedger's files; Apache's
  or ours) and, when it was upgraded from master/slave, the old classic commitlog below the divide.
  Nothing here writes: files are read with ``pread`` and one read-only mapping at a time; the
  ConsumeQueues are opened read-only; the lock is probed as ``mqupgrade inspect`` does.
- The committed end comes from ``checkpoint``'s committedIndex and that entry's index unit
  (``pos + size``: the physical end of its message, since the message is the entry's body). The
  entries after it (the uncommitted tail) are found by walking headers from there (index + 1,
  ``pos`` equal to its place, DLedger's blank moving to the next file); they are reported, never
  read as messages.
- The old classic region, when there is one, is ``[first commitlog file, divide)``, where the
  divide is the end of the last classic file and must be where the DLedger data starts.
- The ConsumeQueues are compared with the committed end: ``agrees`` when their highest unit ends
  there or no committed message after it belongs in a ConsumeQueue (PREPARED/ROLLBACK and
  DLedger barriers never do); ``behind`` when some does (the store must dispatch them);
  ``ahead`` when a unit points past the committed end.

Theory of operation: :func:`inspect_member` fills a :class:`Member` from the listing, the
checkpoint, one index unit, the tail walk and the ConsumeQueues' last units; :class:`_Files`
reads entry headers, index units and messages across the numbered files;
:func:`first_difference` compares two members' committed bytes for the plan.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from broker.store.consume_queue import ConsumeQueueStore, is_consume_queue_dispatchable
from broker.store.message import check_message_and_return_size
from broker.store.shape import StoreShapeError, read_shape
from dledger.entry import BODY_OFFSET, HEADER, INDEX_UNIT, INDEX_UNIT_SIZE
from dledger.store.state_files import CheckpointFile
from upgrade import fileops
from upgrade.store_files import CommitLogFile, list_files
from upgrade.store_lock import lock_holder as _lock_holder

DLEDGER_BLANK = -1
TAIL_WALK_LIMIT = 1_000_000  # entries: the uncommitted tail is a few batches, never this


@dataclass
class Member:
    root: str
    self_id: str = ""
    dir: str = ""  # dledger-<selfId>
    data_files: list[CommitLogFile] = field(default_factory=list)
    data_file_size: int = 0
    first_index: int = -1
    committed_index: Optional[int] = None  # the checkpoint's, or the group's when the plan lifts it
    checkpoint_index: Optional[int] = None
    committed_term: int = -1
    committed_end: int = 0  # physical end of the last committed entry's message
    last_index: int = -1  # the last entry in the files (committed or not)
    last_end: int = 0
    commit_log_dir: str = ""
    classic_files: list[CommitLogFile] = field(default_factory=list)
    classic_start: int = -1
    classic_end: int = -1  # the old dividedCommitlogOffset
    clean_shutdown: bool = True
    lock_holder: Optional[str] = None
    cq_max_physical_offset: int = -1
    cq_state: str = "none"  # agrees | behind | ahead | none
    cq_detail: str = ""
    shape: Optional[str] = None  # what storeshape records, if anything
    problems: list[str] = field(default_factory=list)

    @property
    def region_start(self) -> int:
        return self.data_files[0].from_offset if self.data_files else 0

    @property
    def uncommitted_entries(self) -> int:
        return max(0, self.last_index - (self.committed_index if self.committed_index is not None else -1))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_dledger_store(root: Path) -> bool:
    return any(list_files(d / "data") for d in root.glob("dledger-*") if d.is_dir())


class _Files:
    """Reads across one directory's numbered files of equal size (DLedger data or index)."""

    def __init__(self, d: Path, files: list[CommitLogFile]) -> None:
        self.d, self.files = d, files

    def file_at(self, offset: int) -> Optional[CommitLogFile]:
        return next((f for f in self.files if f.from_offset <= offset < f.from_offset + f.size), None)

    def read(self, offset: int, n: int) -> bytes:
        f = self.file_at(offset)
        if f is None:
            return b""
        fd = os.open(self.d / f.name, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return os.pread(fd, min(n, f.from_offset + f.size - offset), offset - f.from_offset)
        finally:
            os.close(fd)


class _Log:
    """A member's data and index files: index units, entry headers, messages."""

    def __init__(self, member_dir: Path) -> None:
        self.data = _Files(member_dir / "data", list_files(member_dir / "data"))
        self.index = _Files(member_dir / "index", list_files(member_dir / "index"))

    def unit(self, i: int) -> Optional[tuple[int, int, int, int, int]]:
        """(magic, pos, size, index, term) of entry ``i``'s index unit, if it verifies."""
        raw = self.index.read(i * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        if len(raw) < INDEX_UNIT_SIZE:
            return None
        u = INDEX_UNIT.unpack(raw)
        return u if u[3] == i and u[2] > BODY_OFFSET and u[0] > 0 else None

    def header(self, pos: int) -> Optional[tuple[int, ...]]:
        raw = self.data.read(pos, HEADER.size)
        return tuple(HEADER.unpack(raw)) if len(raw) == HEADER.size else None

    def entry_at(self, offset: int, lo: int, hi: int) -> int:
        """The index of the entry holding physical ``offset`` (binary search over units lo..hi)."""
        while lo < hi:
            mid = (lo + hi + 1) // 2
            u = self.unit(mid)
            if u is not None and u[1] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def walk_tail(self, pos: int, index: int) -> tuple[int, int]:
        """(last index, end) of the entries from ``pos`` (expected ``index``) on: the tail walk."""
        last, end = index - 1, pos
        for _ in range(TAIL_WALK_LIMIT):
            f = self.data.file_at(pos)
            if f is None:
                break
            h = self.header(pos)
            if h is None or h[0] == DLEDGER_BLANK:  # DLedger's blank (or no room): the entry is in the next file
                pos = f.from_offset + f.size
                continue
            magic, size, idx, _term, epos = h[0], h[1], h[2], h[3], h[4]
            if magic != 1 or idx != index or epos != pos or size <= BODY_OFFSET:
                break  # zeros (the write end), or bytes that do not continue the chain
            last, end = idx, pos + size
            pos, index = end, index + 1
        return last, end


def _read_classic(m: Member, root: Path, commit_log_dir: Optional[str]) -> None:
    m.commit_log_dir = str(Path(commit_log_dir) if commit_log_dir else root / "commitlog")
    m.classic_files = list_files(Path(m.commit_log_dir))
    if not m.classic_files:
        return
    m.classic_start = m.classic_files[0].from_offset
    last = m.classic_files[-1]
    m.classic_end = last.from_offset + last.size
    if m.data_files and m.classic_end != m.region_start:
        m.problems.append(f"the old classic commitlog ends at {m.classic_end} but {m.dir}/data starts at "
                          f"{m.region_start}; the divide is not where the DLedger log begins")


def _read_committed(m: Member, log: _Log, member_dir: Path, override: Optional[int]) -> None:
    first = log.header(m.region_start)
    m.first_index = first[2] if first is not None and first[0] == 1 else -1
    try:
        committed = CheckpointFile(member_dir).load_committed_index()
    except Exception as exc:  # noqa: BLE001 - a damaged checkpoint is reported, not a traceback
        m.problems.append(f"{m.dir}/checkpoint is unreadable ({exc})")
        return
    m.checkpoint_index = committed
    if override is not None:
        committed = override  # the group committed it; this member's checkpoint lags (it holds the entry)
    m.committed_index = committed
    if committed is None or committed < max(0, m.first_index):
        m.problems.append(f"{m.dir}: no committed entry (checkpoint committedIndex {committed}); nothing to migrate")
        return
    u = log.unit(committed)
    if u is None:
        m.problems.append(f"{m.dir}/index holds no valid unit for committed entry {committed}")
        return
    h = log.header(u[1])
    if h is None or h[0] != 1 or h[2] != committed or h[4] != u[1] or h[1] != u[2]:
        m.problems.append(f"{m.dir}: committed entry {committed} at {u[1]} does not match its index unit")
        return
    m.committed_term, m.committed_end = u[4], u[1] + u[2]
    m.last_index, m.last_end = log.walk_tail(m.committed_end, committed + 1)
    if m.last_index < committed:
        m.last_index, m.last_end = committed, m.committed_end


def _read_consume_queues(m: Member, root: Path, log: _Log, cq_file_size: int) -> None:
    if (root / "consumequeue").is_dir():
        cqs = ConsumeQueueStore(root, cq_file_size, read_only=True)
        try:
            cqs.load()
            for cq in cqs.consume_queues():
                cq.recover()
                m.cq_max_physical_offset = max(m.cq_max_physical_offset, cq.max_physic_offset)
        finally:
            cqs.shutdown()
    cq_max, end = m.cq_max_physical_offset, m.committed_end
    if cq_max > end:
        m.cq_state, m.cq_detail = "ahead", f"ConsumeQueues reach {cq_max}, beyond the committed end {end}"
        return
    if cq_max == end:
        m.cq_state, m.cq_detail = "agrees", f"ConsumeQueues end at the committed end {end}"
        return
    assert m.committed_index is not None
    lo = max(0, m.first_index)
    i = lo if cq_max <= m.region_start else log.entry_at(cq_max - 1, lo, m.committed_index) + 1  # after the last unit's
    missing = 0
    views: dict[str, mmap.mmap] = {}  # one read-only mapping per data file the gap touches
    try:
        for idx in range(i, m.committed_index + 1):
            u = log.unit(idx)
            f = log.data.file_at(u[1]) if u is not None else None
            if u is None or f is None:
                break
            if f.name not in views:
                with open(log.data.d / f.name, "rb") as fh:
                    views[f.name] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            req = check_message_and_return_size(views[f.name], u[1] - f.from_offset + BODY_OFFSET, False)
            if req.success and req.msg_size > 0 and is_consume_queue_dispatchable(req):
                missing += 1
    finally:
        for v in views.values():
            v.close()
    if missing:
        m.cq_state = "behind"
        m.cq_detail = (f"ConsumeQueues end at {cq_max}; {missing} committed message(s) after it belong in "
                       "ConsumeQueues")
    else:
        m.cq_state, m.cq_detail = "agrees", f"ConsumeQueues end at {cq_max}; no committed message after it needs one"


def inspect_member(root: str | os.PathLike[str], commit_log_dir: Optional[str] = None,
                   cq_file_size: int = 300_000 * 20, committed_override: Optional[int] = None) -> Member:
    """Read one DLedger-mode store (see the module rules)."""
    rootp = Path(root).resolve()
    m = Member(str(rootp))
    dirs = sorted(d for d in rootp.glob("dledger-*") if d.is_dir() and list_files(d / "data"))
    m.clean_shutdown = not (rootp / "abort").exists()
    m.lock_holder = _lock_holder(rootp)
    try:
        shape = read_shape(rootp)
        m.shape = None if shape is None else f"mode={shape.mode}"
    except StoreShapeError as exc:
        m.problems.append(f"unreadable store record: {exc}")
    if len(dirs) != 1:
        m.problems.append("no dledger-*/data holds DLedger files: not a DLedger-mode store" if not dirs else
                          f"more than one DLedger member here ({', '.join(d.name for d in dirs)})")
        return m
    member_dir = dirs[0]
    m.dir, m.self_id = member_dir.name, member_dir.name[len("dledger-"):]
    log = _Log(member_dir)
    m.data_files = log.data.files
    sizes = {f.size for f in m.data_files}
    m.data_file_size = m.data_files[0].size
    if len(sizes) != 1:
        m.problems.append(f"{m.dir}/data files differ in size ({sorted(sizes)})")
        return m
    _read_classic(m, rootp, commit_log_dir)
    _read_committed(m, log, member_dir, committed_override)
    if not m.problems:
        _read_consume_queues(m, rootp, log, cq_file_size)
    return m


def first_difference(a: Member, b: Member, start: int, end: int) -> Optional[tuple[int, int]]:
    """(physical offset, entry index) of the first byte where two members' data differ in
    ``[start, end)``, or None when they agree."""
    da, db = Path(a.root) / a.dir / "data", Path(b.root) / b.dir / "data"
    for f in a.data_files:
        lo, hi = max(start, f.from_offset), min(end, f.from_offset + f.size)
        if lo >= hi:
            continue
        if not (db / f.name).is_file():
            return lo, -1
        diff, _read = fileops.first_difference(da / f.name, db / f.name, lo - f.from_offset, hi - f.from_offset)
        if diff is not None:
            at = f.from_offset + diff
            assert a.committed_index is not None
            return at, _Log(Path(a.root) / a.dir).entry_at(at, max(0, a.first_index), a.committed_index)
    return None

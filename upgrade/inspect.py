"""``mqupgrade inspect``: what each store holds and whether the stores agree.

Rules:
- Read-only, except that the ``lock`` probe takes and drops the store lock for an instant
  (RocketMQ's own ``tryLock``), which is the only reliable way to see a running broker.
- Per store: commitlog files (names, sizes, allocated bytes; holes are never read), min/max
  physical offset, the last file's tail (is the end-of-file blank already written, i.e. frozen?),
  clean shutdown (``abort`` absent), lock holder, ConsumeQueue agreement, ``config/`` files,
  ``dledger-*`` dirs (already upgraded?), free disk, and the messages the ConsumeQueues hold.
- An upgraded store (DLedger data under ``dledger-*``, or ``storeshape`` recording ``mode=dledger``
  even with its ``dledger-*`` directory gone) is still a problem for ``plan``/``apply`` (exit 2),
  but is inspected in full: its old region is walked as usual and ``max_offset`` is the end of
  the committed DLedger log across the divide (``upgrade.inspect_dledger``).
- A store root that does not exist is an error of the ``inspect`` command (exit 1, one line
  naming it); :func:`inspect_store` itself accepts it (a new node of a plan).
- The max offset is found as recovery would find it, in O(1) of the store size: start at the
  record after the last ConsumeQueue unit (it is verified to be a valid record of the unit's
  size) and walk forward with CRC checks to the first invalid record; without a usable hint,
  walk from the 3rd-last file as ``recoverNormally`` does. Records after the hint that a CQ
  should hold make the CQ "behind"; PREPARED/ROLLBACK transaction records never are in a CQ.
- Across stores: the master is ``--master`` if given, else the one whose conf says *_MASTER,
  else the one with the most data. Each other store with data is compared with it: how far
  behind it is, and whether the bytes they both hold are identical. Only files both hold are
  compared, the last shared file only up to the common end; the first differing byte is reported
  as file + file offset + absolute offset. ``compare_last=N`` limits this to the last N shared
  files (Apache's wiki compares the last two with md5sum); the default compares all shared data.

Theory of operation: :func:`inspect_store` builds a :class:`StoreInspection` from a directory
listing, a few small reads near the tail and the ConsumeQueues' last units;
:func:`inspect_stores` adds the master choice and the :class:`Comparison` of every replica.
Both are plain dataclasses with ``to_dict`` for ``--json`` and for the plan.
"""
from __future__ import annotations

import mmap
import sys
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from broker.config.conf_file import ParsedConf
from broker.config.broker_config import BrokerRole
from broker.store.consume_queue import ConsumeQueueStore, is_consume_queue_dispatchable
from broker.store.lockfile import StoreLock, StoreLockedError
from broker.store.message import check_message_and_return_size, explain_invalid_record
from broker.store.record_walk import END, RECORD, ROLL, walk
from broker.store.shape import DLEDGER, StoreShapeError, read_shape, shape_path
from upgrade import fileops
from upgrade.inspect_dledger import count_messages, inspect_dledger
from upgrade.store_files import CommitLogFile, list_files
from upgrade.store_links import refuse_links

if TYPE_CHECKING:  # pragma: no cover
    import argparse

DEFAULT_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_CQ_FILE_SIZE = 300_000 * 20



class InspectError(Exception):
    """A user mistake (bad path, conflicting options): one line, no traceback."""


@dataclass
class StoreInspection:
    root: str
    exists: bool
    commit_log_dir: str
    conf: Optional[str] = None
    conf_role: Optional[str] = None
    file_size: int = DEFAULT_FILE_SIZE
    file_size_source: str = "default"
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE
    files: list[CommitLogFile] = field(default_factory=list)
    min_offset: int = -1
    max_offset: int = 0
    max_offset_method: str = "no commitlog"
    walked_bytes: int = 0
    tail_file: Optional[str] = None
    tail_position: int = 0  # wrote position in the tail file
    frozen: bool = False  # the end-of-file blank is already at the end (DLedger first start ran)
    stop_reason: str = ""  # why the walk stopped (zeros = clean end)
    files_after_end: list[str] = field(default_factory=list)
    clean_shutdown: bool = True
    lock_holder: Optional[str] = None
    cq_max_physical_offset: int = -1
    cq_state: str = "none"  # agrees | behind | ahead | none
    cq_detail: str = ""
    config_files: list[str] = field(default_factory=list)
    dledger_dirs: list[str] = field(default_factory=list)
    # an upgraded store (issue 13.8): its DLedger log continues the offset space above the divide
    dledger: Optional[dict[str, Any]] = None  # dir, divided_offset, committed_index, max_offset, how
    messages: Optional[int] = None  # messages the ConsumeQueues hold (sum of max - min over queues)
    free_bytes: int = 0
    index_settings: dict[str, Any] = field(default_factory=lambda: {
        "max_hash_slot_num": 5_000_000, "max_index_num": 20_000_000, "message_index_enable": True,
        "source": "defaults"})
    problems: list[str] = field(default_factory=list)  # reasons it cannot be upgraded as is
    role: str = "?"  # master | slave | empty (set by inspect_stores)

    @property
    def has_data(self) -> bool:
        return bool(self.files)

    @property
    def needs_recovery(self) -> bool:
        return not self.clean_shutdown or bool(self.files_after_end) or self.cq_state == "ahead" or (
            bool(self.stop_reason) and self.stop_reason != "zeros" and not self.frozen)

    @property
    def data_bytes(self) -> int:
        return sum(f.allocated for f in self.files)

    def file_path(self, name: str) -> Path:
        return Path(self.commit_log_dir) / name

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["needs_recovery"] = self.needs_recovery
        return d


@dataclass
class Comparison:
    master: str
    replica: str
    behind_bytes: int  # master max - replica max (negative: the replica is ahead)
    compared_files: list[str] = field(default_factory=list)
    compared_bytes: int = 0
    read_bytes: int = 0
    identical: bool = True
    first_difference: Optional[dict[str, Any]] = None  # file, file_offset, offset
    missing_files: list[str] = field(default_factory=list)  # master files after the replica's last
    head_missing: list[str] = field(default_factory=list)  # master files before the replica's first
    skipped_files: int = 0  # shared files not compared (compare_last)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Inspection:
    stores: list[StoreInspection]
    master: Optional[str]
    master_reason: str
    comparisons: list[Comparison]
    compare_last: Optional[int] = None

    def store(self, root: str) -> StoreInspection:
        for s in self.stores:
            if s.root == root:
                return s
        raise KeyError(root)

    def comparison(self, root: str) -> Optional[Comparison]:
        return next((c for c in self.comparisons if c.replica == root), None)

    def to_dict(self) -> dict[str, Any]:
        return {"master": self.master, "master_reason": self.master_reason, "compare_last": self.compare_last,
                "stores": [s.to_dict() for s in self.stores], "comparisons": [c.to_dict() for c in self.comparisons]}


# ---- per store ----------------------------------------------------------------------------------
def _lock_holder(root: Path) -> Optional[str]:
    if not (root / "lock").exists():
        return None
    lock = StoreLock(root)
    try:
        lock.acquire()
    except StoreLockedError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot probe the lock ({exc.strerror})"
    lock.release()
    return None


def _recorded_upgrade(root: Path) -> list[str]:
    """Issue 24.8: a store whose ``storeshape`` says it ran in DLedger mode is upgraded, even when
    no ``dledger-*/data`` is beside it (moved or deleted): one problem line naming the record."""
    try:
        shape = read_shape(root)
    except StoreShapeError as exc:
        return [f"unreadable store record: {exc}"]
    if shape is None or shape.mode != DLEDGER:
        return []
    return [f"already upgraded: {shape_path(root)} records mode=dledger (group {shape.group}, self id "
            f"{shape.self_id}, divide {shape.divided}) but no dledger-*/data holds DLedger files here; the DLedger "
            f"log was moved or deleted: put dledger-{shape.self_id} back, or `mqupgrade reseed` this node"]


def _free_bytes(path: Path) -> int:
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


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


def _find_end(s: StoreInspection, root: Path) -> None:
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


def _infer_index_settings(s: StoreInspection, root: Path) -> None:
    """IndexFile size = 40 + 4*slots + 20*num; Apache's defaults keep num = 4*slots, so an
    existing file gives slots = (size - 40) / 84. Without one the defaults apply."""
    files = sorted(p for p in (root / "index").glob("[0-9]" * 17) if p.is_file())
    if not files:
        return
    size = files[-1].stat().st_size
    if size == 40 + 4 * 5_000_000 + 20 * 20_000_000:
        return
    if (size - 40) % 84 == 0:
        slots = (size - 40) // 84
        s.index_settings = {"max_hash_slot_num": slots, "max_index_num": 4 * slots,
                            "message_index_enable": True, "source": f"inferred from {files[-1].name}"}
    else:
        s.index_settings = {"max_hash_slot_num": 5_000_000, "max_index_num": 20_000_000,
                            "message_index_enable": False,
                            "source": f"{files[-1].name} has an unusual size; pass --conf (index left alone)"}


def inspect_store(root: str | os.PathLike[str], conf: Optional[ParsedConf] = None, *,
                  settings: Optional[dict[str, Any]] = None) -> StoreInspection:
    """Inspect one store root. ``conf`` supplies commitlog dir, file sizes and brokerRole;
    ``settings`` (a plan node's ``store_settings``) supplies the same without a conf."""
    rootp = Path(root).resolve()
    if rootp.exists() and not rootp.is_dir():
        raise InspectError(f"{root}: not a directory")
    cl_dir = Path(conf.store.commit_log_dir) if conf else rootp / "commitlog"
    if settings and settings.get("store_path_commit_log"):
        cl_dir = Path(settings["store_path_commit_log"])
    s = StoreInspection(str(rootp), rootp.exists(), str(cl_dir))
    if settings:
        s.file_size = settings.get("mapped_file_size_commit_log", s.file_size)
        s.cq_file_size = settings.get("mapped_file_size_consume_queue", s.cq_file_size)
        s.file_size_source = "plan"
        conf = None
    if conf is not None:
        s.conf, s.conf_role = conf.source, conf.store.broker_role.value
        s.file_size, s.file_size_source = conf.store.mapped_file_size_commit_log, "conf"
        s.cq_file_size = conf.store.mapped_file_size_consume_queue
    s.free_bytes = _free_bytes(rootp)
    if not rootp.exists():
        return s
    s.files = list_files(cl_dir)
    s.clean_shutdown = not (rootp / "abort").exists()
    s.lock_holder = _lock_holder(rootp)
    cfg = rootp / "config"
    s.config_files = sorted(p.name for p in cfg.iterdir() if p.is_file()) if cfg.is_dir() else []
    s.dledger_dirs = sorted(p.name for p in rootp.glob("dledger-*") if p.is_dir())
    for d in s.dledger_dirs:
        if list_files(rootp / d / "data"):
            s.problems.append(f"already upgraded: {d}/data holds DLedger files")
    if not any(p.startswith("already upgraded") for p in s.problems):
        s.problems.extend(_recorded_upgrade(rootp))
    if conf is None and not settings:
        cq_files = sorted((rootp / "consumequeue").glob("*/*/" + "[0-9]" * 20))
        if cq_files:
            s.cq_file_size = cq_files[0].stat().st_size
        _infer_index_settings(s, rootp)
    elif conf is not None:
        s.index_settings = {"max_hash_slot_num": conf.store.max_hash_slot_num,
                            "max_index_num": conf.store.max_index_num,
                            "message_index_enable": conf.store.message_index_enable, "source": "conf"}
    if not s.files:
        return s
    sizes = {f.size for f in s.files}
    if conf is None and not settings:
        s.file_size, s.file_size_source = max(sizes, key=lambda z: sum(f.size == z for f in s.files)), "files"
    odd = [f"{f.name} ({f.size} bytes)" for f in s.files if f.size != s.file_size]
    if odd:
        s.problems.append(f"mismatched file sizes: {', '.join(odd)} != mappedFileSizeCommitLog {s.file_size}")
        return s
    for a, b in zip(s.files, s.files[1:]):
        if b.from_offset != a.from_offset + s.file_size:
            s.problems.append(f"gap in the commitlog: {b.name} does not follow {a.name}")
            return s
    if s.files[0].from_offset % s.file_size:
        s.problems.append(f"{s.files[0].name} is not a multiple of the file size {s.file_size}")
        return s
    s.min_offset = s.files[0].from_offset
    upgraded = [d for d in s.dledger_dirs if list_files(rootp / d / "data")]
    if s.problems and not all(p.startswith("already upgraded") for p in s.problems):
        return s
    _find_end(s, rootp)
    s.messages = count_messages(rootp, s.cq_file_size)
    if upgraded:
        inspect_dledger(s, rootp / upgraded[0])
    return s


# ---- across stores ------------------------------------------------------------------------------
def compare(master: StoreInspection, replica: StoreInspection, compare_last: Optional[int] = None) -> Comparison:
    """Compare the bytes both stores hold (see the module rules)."""
    c = Comparison(master.root, replica.root, master.max_offset - replica.max_offset)
    mnames = [f.name for f in master.files]
    rnames = {f.name for f in replica.files}
    shared = [f for f in master.files if f.name in rnames]
    if replica.files:
        tail = int(replica.tail_file or replica.files[-1].name)  # files after its end go at recovery
        c.missing_files = [n for n in mnames if int(n) > tail]
        c.head_missing = [n for n in mnames if int(n) < replica.files[0].from_offset]
    common_end = min(master.max_offset, replica.max_offset)
    if compare_last is not None and len(shared) > compare_last:
        c.skipped_files = len(shared) - compare_last
        shared = shared[-compare_last:]
    for f in shared:
        end = min(master.file_size, common_end - f.from_offset)
        if end <= 0:
            continue
        c.compared_files.append(f.name)
        diff, read = fileops.first_difference(master.file_path(f.name), replica.file_path(f.name), 0, end)
        c.compared_bytes += end
        c.read_bytes += read
        if diff is not None:
            c.identical = False
            c.first_difference = {"file": f.name, "file_offset": diff, "offset": f.from_offset + diff}
            break
    return c


def inspect_stores(roots: list[str], confs: Optional[dict[str, ParsedConf]] = None,
                   master: Optional[str] = None, compare_last: Optional[int] = None) -> Inspection:
    """Inspect every root, choose the master, compare the replicas with it."""
    confs = confs or {}
    resolved = [str(Path(r).resolve()) for r in roots]
    if len(set(resolved)) != len(resolved):
        raise InspectError("the same store root is given twice")
    refuse_links(resolved, InspectError)  # issue 23.8: nothing under a store root may be a link
    stores = [inspect_store(r, confs.get(r)) for r in resolved]
    refuse_links([s.commit_log_dir for s in stores if s.commit_log_dir], InspectError)
    with_data = [s for s in stores if s.has_data]
    reason = ""
    chosen: Optional[StoreInspection] = None
    if master is not None:
        mroot = str(Path(master).resolve())
        chosen = next((s for s in stores if s.root == mroot), None)
        if chosen is None:
            raise InspectError(f"--master {master} is not one of the store roots")
        reason = "given with --master"
    else:
        masters = [s for s in stores if s.conf_role in (BrokerRole.ASYNC_MASTER.value, BrokerRole.SYNC_MASTER.value)
                   and s.conf is not None]
        if len(masters) > 1:
            raise InspectError("more than one conf says *_MASTER: " + ", ".join(s.root for s in masters)
                               + " (pick one with --master)")
        if masters:
            chosen, reason = masters[0], f"brokerRole={masters[0].conf_role} in {masters[0].conf}"
        elif with_data:
            chosen = max(with_data, key=lambda s: s.max_offset)  # first of the largest on ties
            reason = "holds the most data"
    comparisons = []
    for s in stores:
        if chosen is not None and s is chosen:
            s.role = "master"
        elif s.has_data:
            s.role = "slave"
            if chosen is not None and chosen.has_data and not s.problems and not chosen.problems:
                comparisons.append(compare(chosen, s, compare_last))
        else:
            s.role = "empty"
    return Inspection(stores, chosen.root if chosen else None, reason, comparisons, compare_last)


# ---- rendering ----------------------------------------------------------------------------------
def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f}G" if n >= 1 << 30 else f"{n / (1 << 20):.1f}M"


def render(insp: Inspection) -> str:
    """The readable table of ``mqupgrade inspect``."""
    head = ("role", "store", "files", "min", "max", "messages", "tail", "shutdown", "lock", "consumequeue", "config",
            "free")
    rows = [head]
    for s in insp.stores:
        tail = "-" if not s.tail_file else (f"{s.tail_file[-8:]}+{s.tail_position}" + (" blank" if s.frozen else ""))
        rows.append((
            s.role, s.root, str(len(s.files)), str(s.min_offset) if s.files else "-", str(s.max_offset) if s.files else "-",
            str(s.messages) if s.messages is not None else "-", tail, "clean" if s.clean_shutdown else "DIRTY (abort)", "HELD" if s.lock_holder else "free",
            s.cq_state, f"{len(s.config_files)} files" if s.config_files else "none", _gib(s.free_bytes),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.append("")
    lines.append(f"master: {insp.master or '-'} ({insp.master_reason or 'no store holds data'})")
    for c in insp.comparisons:
        lag = (f"behind by {c.behind_bytes} bytes" if c.behind_bytes > 0 else
               "caught up" if c.behind_bytes == 0 else f"AHEAD of the master by {-c.behind_bytes} bytes")
        if c.identical:
            same = f"identical over {len(c.compared_files)} shared file(s), {c.compared_bytes} bytes"
            if c.skipped_files:
                same += f" ({c.skipped_files} earlier shared file(s) not compared)"
        else:
            d = c.first_difference or {}
            same = f"DIVERGES in {d.get('file')} at file offset {d.get('file_offset')} (offset {d.get('offset')})"
        lines.append(f"{c.replica}: {lag}; {same}")
    for s in insp.stores:
        dl = s.dledger
        if dl is not None:
            lines.append(f"note: {s.root}: upgraded: {dl['dir']} continues the commitlog from the divide at "
                         f"{dl['divided_offset']} ({dl['data_files']} data file(s)); "
                         + (f"max offset {dl['max_offset']}, committed index {dl['committed_index']} ({dl['how']})"
                            if dl["max_offset"] is not None else f"DLedger end unknown: {dl['how']}"))
        for p in s.problems:
            lines.append(f"problem: {s.root}: {p}")
        if s.lock_holder:
            lines.append(f"problem: {s.root}: {s.lock_holder}")
        if s.cq_state in ("behind", "ahead"):
            lines.append(f"note: {s.root}: ConsumeQueues {s.cq_state}: {s.cq_detail}")
        if not s.clean_shutdown:
            lines.append(f"note: {s.root}: not shut down cleanly; recovery ends it at {s.max_offset} ({s.stop_reason})")
    return "\n".join(lines)


# ---- command line -------------------------------------------------------------------------------
HELP = "show what each store holds and whether master and slaves agree (read-only)"


def add_arguments(p: "argparse.ArgumentParser") -> None:
    p.add_argument("roots", nargs="+", metavar="STORE_ROOT", help="storePathRootDir of each store")
    p.add_argument("--conf", action="append", default=[], metavar="FILE",
                   help="a store's broker .conf (matched by its storePathRootDir; gives brokerRole and sizes)")
    p.add_argument("--master", metavar="STORE_ROOT", help="the master (default: the *_MASTER conf, else most data)")
    p.add_argument("--compare-last", type=int, metavar="N",
                   help="compare only the last N shared commitlog files (default: all shared data)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def run(args: "argparse.Namespace") -> int:
    import json

    from upgrade.node_conf import load_confs
    from upgrade.plan_model import PlanError

    missing = [r for r in args.roots if not Path(r).exists()]
    if missing:  # issue 13.8: not "an empty clean store"
        print(f"mqupgrade inspect: {missing[0]}: no such directory; give the storePathRootDir of each broker store "
              "(a new, empty node is listed in `mqupgrade plan --self-ids`, not inspected)", file=sys.stderr)
        return 1
    try:
        confs = load_confs(args.conf)
        insp = inspect_stores(args.roots, confs, args.master, args.compare_last)
    except (InspectError, PlanError) as exc:
        print(f"mqupgrade inspect: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(insp.to_dict(), indent=2) if args.json else render(insp))
    bad = any(s.problems or s.lock_holder for s in insp.stores) or any(
        not c.identical or c.behind_bytes < 0 for c in insp.comparisons)
    return 2 if bad else 0

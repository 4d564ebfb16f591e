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
- Across stores: the master is ``--master`` if given, else the one whose conf says *_MASTER
  (not counting DLedger-mode or Controller-mode stores: their confs' ``brokerRole`` names no
  master), else the one with the most data. Each other store with data is compared with it: how far
  behind it is, and whether the bytes they both hold are identical. Only files both hold are
  compared, the last shared file only up to the common end; the first differing byte is reported
  as file + file offset + absolute offset. ``compare_last=N`` limits this to the last N shared
  files (Apache's wiki compares the last two with md5sum); the default compares all shared data.

Theory of operation: :func:`inspect_store` builds a :class:`StoreInspection` by running three
tables of named steps, read top to bottom as what is looked at: :data:`LISTING` (the directory
listing), :data:`SHAPE_CHECKS` (the commitlog's files fit together; the first failing row is the
store's problem) and :data:`TAIL` (a few small reads near the end, :mod:`upgrade.inspect_tail`, and
the ConsumeQueues' last units); :func:`inspect_stores` adds the master choice and the
:class:`Comparison` of every replica. The data are plain dataclasses (:mod:`upgrade.inspect_model`)
with ``to_dict`` for ``--json`` and for the plan.
"""
from __future__ import annotations

import sys
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from broker.config.conf_file import ParsedConf
from broker.config.broker_config import BrokerRole
from broker.store.shape import DLEDGER, StoreShapeError, read_shape, shape_path
from upgrade import fileops, regions_file
from upgrade.inspect_dledger import count_messages, inspect_dledger
from upgrade.inspect_model import (DEFAULT_CQ_FILE_SIZE, DEFAULT_FILE_SIZE, Comparison, Inspection,  # noqa: F401 - API
                                   InspectError, StoreInspection)
from upgrade.inspect_tail import find_end
from upgrade.store_files import list_files
from upgrade.store_links import refuse_links
from upgrade.store_lock import lock_holder as _lock_holder

if TYPE_CHECKING:  # pragma: no cover
    import argparse


# ---- per store ----------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class _Probe:
    """How one store is read: its root, and where its sizes come from (a plan node's settings, a
    conf, or else the files themselves)."""

    root: Path
    conf: Optional[ParsedConf]  # None when the sizes come from settings
    settings: Optional[dict[str, Any]]

    @property
    def sized_by_files(self) -> bool:
        return self.conf is None and not self.settings


class _Reading(NamedTuple):
    name: str
    read: Callable[[StoreInspection, _Probe], None]


class _ShapeCheck(NamedTuple):
    name: str
    problem: Callable[[StoreInspection], Optional[str]]


def _new_inspection(rootp: Path, conf: Optional[ParsedConf], settings: Optional[dict[str, Any]]) -> StoreInspection:
    cl_dir = Path(conf.store.commit_log_dir) if conf else rootp / "commitlog"
    if settings and settings.get("store_path_commit_log"):
        cl_dir = Path(settings["store_path_commit_log"])
    s = StoreInspection(str(rootp), rootp.exists(), str(cl_dir))
    if settings:
        s.file_size = settings.get("mapped_file_size_commit_log", s.file_size)
        s.cq_file_size = settings.get("mapped_file_size_consume_queue", s.cq_file_size)
        s.file_size_source = "plan"
    elif conf is not None:
        s.conf, s.conf_role = conf.source, conf.store.broker_role.value
        s.file_size, s.file_size_source = conf.store.mapped_file_size_commit_log, "conf"
        s.cq_file_size = conf.store.mapped_file_size_consume_queue
    s.free_bytes = _free_bytes(rootp)
    return s


# ---- the listing: what the directory says, without reading records -----------------------------
def _read_files(s: StoreInspection, p: _Probe) -> None:
    s.files = list_files(Path(s.commit_log_dir))


def _read_shutdown(s: StoreInspection, p: _Probe) -> None:
    s.clean_shutdown = not (p.root / "abort").exists()


def _read_lock(s: StoreInspection, p: _Probe) -> None:
    s.lock_holder = _lock_holder(p.root)


def _read_config(s: StoreInspection, p: _Probe) -> None:
    cfg = p.root / "config"
    s.config_files = sorted(x.name for x in cfg.iterdir() if x.is_file()) if cfg.is_dir() else []


def _upgraded_dirs(root: Path, dirs: list[str]) -> list[str]:
    return [d for d in dirs if list_files(root / d / "data")]


def _read_dledger(s: StoreInspection, p: _Probe) -> None:
    """``dledger-*`` directories; those holding DLedger data mean the store is already upgraded. A
    ``commitlogRegions.json`` says more: the store was migrated to Controller mode (one problem line
    naming the file, instead of one per DLedger directory)."""
    s.dledger_dirs = sorted(x.name for x in p.root.glob("dledger-*") if x.is_dir())
    if regions_file.path_of(p.root).exists():
        s.problems.append(f"already upgraded: migrated to Controller mode ({regions_file.path_of(p.root)}); "
                          "`mqupgrade rollback PLAN` undoes it until the first write in the new mode")
        return
    s.problems.extend(f"already upgraded: {d}/data holds DLedger files" for d in _upgraded_dirs(p.root, s.dledger_dirs))


def _read_shape_record(s: StoreInspection, p: _Probe) -> None:
    if not any(x.startswith("already upgraded") for x in s.problems):
        s.problems.extend(_recorded_upgrade(p.root))


def _read_derived_sizes(s: StoreInspection, p: _Probe) -> None:
    """ConsumeQueue file size and IndexFile settings: from the conf, else from the files."""
    if p.sized_by_files:
        cq_files = sorted((p.root / "consumequeue").glob("*/*/" + "[0-9]" * 20))
        if cq_files:
            s.cq_file_size = cq_files[0].stat().st_size
        _infer_index_settings(s, p.root)
    elif p.conf is not None:
        store = p.conf.store
        s.index_settings = {"max_hash_slot_num": store.max_hash_slot_num, "max_index_num": store.max_index_num,
                            "message_index_enable": store.message_index_enable, "source": "conf"}


def _read_kind(s: StoreInspection, p: _Probe) -> None:
    from upgrade.inspect_kind import describe

    s.kind, s.kind_detail, s.next_step = describe(str(p.root), s.commit_log_dir)


LISTING: tuple[_Reading, ...] = (
    _Reading("commitlog files (names, sizes, allocated bytes)", _read_files),
    _Reading("clean shutdown (no abort file)", _read_shutdown),
    _Reading("lock holder (a running broker)", _read_lock),
    _Reading("config/ files", _read_config),
    _Reading("dledger-* directories (already upgraded?)", _read_dledger),
    _Reading("storeshape record (upgraded, DLedger log gone?)", _read_shape_record),
    _Reading("ConsumeQueue file size and IndexFile settings", _read_derived_sizes),
    _Reading("what the store is (classic, DLedger, migrated to Controller mode) and what to do next", _read_kind),
)


# ---- the commitlog's shape: the first failing check is the store's problem ---------------------
def _sizes_equal(s: StoreInspection) -> Optional[str]:
    odd = [f"{f.name} ({f.size} bytes)" for f in s.files if f.size != s.file_size]
    return f"mismatched file sizes: {', '.join(odd)} != mappedFileSizeCommitLog {s.file_size}" if odd else None


def _declared_gap(s: StoreInspection) -> int:
    """A migrated store's ``classicFrom`` (its new classic files start there, after a gap the regions
    file declares), else -1. An unreadable regions file declares nothing (the kind line says why)."""
    try:
        r = regions_file.read(s.root)
    except (OSError, regions_file.RegionsError):
        return -1
    return -1 if r is None else r.classic_from


def _no_gap(s: StoreInspection) -> Optional[str]:
    declared = _declared_gap(s)
    return next((f"gap in the commitlog: {b.name} does not follow {a.name}" for a, b in zip(s.files, s.files[1:])
                 if b.from_offset != a.from_offset + s.file_size
                 and not (a.from_offset < declared == b.from_offset)), None)


def _first_file_aligned(s: StoreInspection) -> Optional[str]:
    first = s.files[0]
    return f"{first.name} is not a multiple of the file size {s.file_size}" if first.from_offset % s.file_size else None


SHAPE_CHECKS: tuple[_ShapeCheck, ...] = (
    _ShapeCheck("every file has mappedFileSizeCommitLog bytes", _sizes_equal),
    _ShapeCheck("each file starts where the one before ends", _no_gap),
    _ShapeCheck("the first file starts at a multiple of the file size", _first_file_aligned),
)


# ---- the tail: the records near the end ---------------------------------------------------------
def _read_end(s: StoreInspection, p: _Probe) -> None:
    find_end(s, p.root)


def _read_messages(s: StoreInspection, p: _Probe) -> None:
    s.messages = count_messages(p.root, s.cq_file_size)


def _read_dledger_log(s: StoreInspection, p: _Probe) -> None:
    upgraded = _upgraded_dirs(p.root, s.dledger_dirs)
    if upgraded:
        inspect_dledger(s, p.root / upgraded[0])


TAIL: tuple[_Reading, ...] = (
    _Reading("the end: walk from the last ConsumeQueue unit (or the 3rd-last file)", _read_end),
    _Reading("messages the ConsumeQueues hold", _read_messages),
    _Reading("an upgraded store's DLedger log across the divide", _read_dledger_log),
)


def inspect_store(root: str | os.PathLike[str], conf: Optional[ParsedConf] = None, *,
                  settings: Optional[dict[str, Any]] = None) -> StoreInspection:
    """Inspect one store root. ``conf`` supplies commitlog dir, file sizes and brokerRole;
    ``settings`` (a plan node's ``store_settings``) supplies the same without a conf.

    The tables, in order: :data:`LISTING` (every row), :data:`SHAPE_CHECKS` (the first failing
    row is the store's problem and ends the inspection), then :data:`TAIL` unless a problem other
    than "already upgraded" stops it."""
    rootp = Path(root).resolve()
    if rootp.exists() and not rootp.is_dir():
        raise InspectError(f"{root}: not a directory")
    s = _new_inspection(rootp, conf, settings)
    if not rootp.exists():
        return s
    probe = _Probe(rootp, None if settings else conf, settings)
    for reading in LISTING:
        reading.read(s, probe)
    if not s.files:
        return s
    if probe.sized_by_files:
        sizes = {f.size for f in s.files}
        s.file_size, s.file_size_source = max(sizes, key=lambda z: sum(f.size == z for f in s.files)), "files"
    for check in SHAPE_CHECKS:
        problem = check.problem(s)
        if problem is not None:
            s.problems.append(problem)
            return s
    s.min_offset = s.files[0].from_offset
    if s.problems and not all(x.startswith("already upgraded") for x in s.problems):
        return s
    for reading in TAIL:
        reading.read(s, probe)
    return s


# ---- across stores ------------------------------------------------------------------------------
#: stores whose conf's brokerRole does not name the master: a DLedger group elects its leader, a
#: store migrated to Controller mode is told its role by the controller
_ROLE_FREE_KINDS = ("dledger", "controller")


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
                   and s.conf is not None and s.kind not in _ROLE_FREE_KINDS]
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
        if s.kind:
            lines.append(f"store: {s.root}: {s.kind_detail}; next: {s.next_step}")
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

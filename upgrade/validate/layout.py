"""Discovery of what a store root holds, as the validator sees it (driver side, metadata only).

Rules:
- A store root is usable iff it is a directory holding a ``commitlog/`` directory or a
  ``dledger-<selfId>/`` directory; anything else is :class:`UnusableInput` (exit 1, one line).
- Files are named by their 20-digit start offset; names that are not 20 digits are ignored
  (``.bak``/``.tmp`` files). Sizes are taken from ``stat``; the validator never writes.
- Committed prefix only: the DLedger ``checkpoint`` (Java properties, ``.bak`` fallback) gives
  ``committedIndex``; the index unit of that entry gives ``committed_pos = pos + size``. Bytes at
  or after ``committed_pos`` and index units after ``committedIndex`` are never read, so a store
  that a broker has open can be validated.
- A store without a DLedger directory whose last old file ends in a blank is taken as frozen by
  the upgrade, unless a newer file has appeared by the time that file was walked (a running
  broker closes a file with a blank and rolls to the next at once).
- Node labels are the DLedger ``selfId`` when every root has a distinct one, else the root's
  directory name (suffixed ``#k`` when still ambiguous); every violation names its node.
- A store migrated to Controller mode (``commitlogRegions.json``, read by ``regions``): ``old``
  holds the ``commitlog/`` files below ``classicFrom`` (the read-only classic region, and strays
  in the gap that the divide check reports), ``new`` the writable classic region (files from
  ``classicFrom`` on), the DLedger directory is the one the file names, and its walk is bounded
  by the region's ``end``. The epoch file, when there is one, is read for every store.

Theory of operation: ``discover(root)`` lists files and reads the two tiny text files and one
32-byte index unit; for a store without a DLedger directory it also walks the record headers
of the last old file to see whether the upgrade froze it (a blank up to the file end).
"""
from __future__ import annotations

import mmap
import os
import re
import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from dledger.store.properties import PropertiesError, parse_properties
from upgrade.validate.regions import REGIONS_FILE_NAME, EpochRead, Regions, RegionsUnusable, dledger_dir, read_epochs, read_regions

_NAME = re.compile(r"^\d{20}$")
INDEX_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term (dledger index unit)
INDEX_UNIT_SIZE = 32


class UnusableInput(Exception):
    """The input is not something we can validate (missing dir, not a store)."""


@dataclass(frozen=True)
class FileRef:
    path: str
    start: int  # absolute offset of byte 0 (from the file name)
    size: int  # bytes on disk (apparent size)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class QueueFiles:
    topic: str
    queue_id: int
    files: tuple[FileRef, ...]  # start/size in bytes of the logical unit space (unit q at q*20)


@dataclass(frozen=True)
class DLedgerLayout:
    self_id: str
    dir: str
    data: tuple[FileRef, ...]
    index: tuple[FileRef, ...]
    committed_index: int  # -1 when nothing is committed
    end_index: int
    committed_pos: int  # absolute end of the committed prefix (divided offset when empty)
    committed_unit_ok: bool  # the checkpoint's committed index has a sane index unit
    checkpoint_source: str  # "checkpoint", "checkpoint.bak" or "missing"
    # a migrated store: the regions file's end is the committed end (mqupgrade takes the group's);
    # the member's own checkpoint (committedIndex, its end) is kept here, and ``region_end_entry``
    # says whether an index unit ends exactly at the region's end
    own_checkpoint: tuple[int, int] | None = None
    region_end_entry: bool = True


@dataclass(frozen=True)
class StoreLayout:
    root: str
    node: str
    old: tuple[FileRef, ...]
    old_file_size: int  # the common size of the old commitlog files (0 when none)
    dledger: DLedgerLayout | None
    queues: tuple[QueueFiles, ...] = field(default_factory=tuple)
    frozen: bool = False  # no DLedger dir yet, but the last old file is closed by a blank
    regions: Regions | None = None  # commitlogRegions.json: a store migrated to Controller mode
    new: tuple[FileRef, ...] = ()  # the writable classic region (files from classicFrom on)
    epochs: EpochRead | None = None  # epochFileCheckpoint, when the store has one

    @property
    def migrated(self) -> bool:
        return self.regions is not None

    @property
    def classic_from(self) -> int | None:
        return self.regions.classic_from if self.regions is not None else None

    @property
    def region_end(self) -> int | None:
        """A migrated store's DLedger region end (the walk's bound), else None."""
        if self.regions is None:
            return None
        dls = self.regions.of_kind("dledger")
        return dls[0].end if dls else None

    @property
    def divided_offset(self) -> int | None:
        """``dividedCommitlogOffset``: the first DLedger data file's start; before DLedger has
        created one (a store just frozen by the upgrade), the end of the last old file, as
        RocketMQ computes it (also for a store frozen by ``mqupgrade apply --freeze`` that has
        no DLedger directory yet); None for a classic store."""
        if self.dledger is None:
            return self.old[-1].end if self.frozen and self.old else None
        if self.dledger.data:
            return self.dledger.data[0].start
        return self.old[-1].end if self.old else None


def _numbered_files(d: Path) -> tuple[FileRef, ...]:
    if not d.is_dir():
        return ()
    out = []
    for entry in os.scandir(d):
        if entry.is_file() and _NAME.fullmatch(entry.name):
            out.append(FileRef(entry.path, int(entry.name), entry.stat().st_size))
    return tuple(sorted(out, key=lambda f: f.start))


def read_properties(path: Path) -> dict[str, str] | None:
    """A DLedger state file (``checkpoint``, ``currterm``) as Java properties; ``None`` when it
    cannot be read or parsed (the caller then tries the ``.bak`` copy)."""
    try:
        return parse_properties(path.read_bytes().decode("utf-8"), str(path))
    except (OSError, UnicodeDecodeError, PropertiesError):
        return None


def _committed(dl_dir: Path) -> tuple[int, int, str]:
    for name in ("checkpoint", "checkpoint.bak"):
        props = read_properties(dl_dir / name)
        if props and "committedIndex" in props:
            try:
                return int(props["committedIndex"]), int(props.get("endIndex", "-1")), name
            except ValueError:
                continue
    return -1, -1, "missing"


def read_index_unit(index_files: tuple[FileRef, ...], entry_index: int) -> tuple[int, int, int, int, int] | None:
    """The 32-byte DLedger index unit of ``entry_index`` (magic, pos, size, index, term)."""
    at = entry_index * INDEX_UNIT_SIZE
    for f in index_files:
        if f.start <= at and at + INDEX_UNIT_SIZE <= f.end:
            with open(f.path, "rb") as fh:
                fh.seek(at - f.start)
                raw = fh.read(INDEX_UNIT_SIZE)
            return INDEX_UNIT.unpack(raw) if len(raw) == INDEX_UNIT_SIZE else None
    return None


def _dledger(root: Path, named: str | None = None) -> DLedgerLayout | None:
    if named is not None:  # a migrated store: the regions file names the DLedger store dir
        if not Path(named).is_dir():
            raise UnusableInput(f"{root}: {REGIONS_FILE_NAME} names the DLedger region {named}, which is not a directory")
        dirs = [Path(named)]
    else:
        dirs = sorted(p for p in root.glob("dledger-*") if p.is_dir())
    if not dirs:
        return None
    if len(dirs) > 1:
        raise UnusableInput(f"{root}: more than one DLedger directory ({', '.join(d.name for d in dirs)})")
    d = dirs[0]
    data = _numbered_files(d / "data")
    index = _numbered_files(d / "index")
    committed_index, end_index, source = _committed(d)
    divided = data[0].start if data else 0
    committed_pos, ok = divided, True
    if committed_index >= 0:
        unit = read_index_unit(index, committed_index)
        ok = unit is not None and unit[0] == 1 and unit[3] == committed_index and unit[2] > 48
        if ok and unit is not None:
            committed_pos = unit[1] + unit[2]
        elif data:
            committed_pos = data[-1].end  # unknown: scan everything, check 4 reports the unit
    return DLedgerLayout(d.name[len("dledger-"):], str(d), data, index, committed_index, end_index,
                         committed_pos, ok, source)


def _entry_ending_at(index: tuple[FileRef, ...], end: int, units: int) -> int | None:
    """The index of the entry whose ``pos + size == end`` among the first ``units`` (binary
    search by pos: written units ascend and are followed by zeros), or None."""
    lo, hi = (index[0].start // INDEX_UNIT_SIZE if index else 0), units  # retention may have deleted the first files
    while lo < hi:
        mid = (lo + hi) // 2
        u = read_index_unit(index, mid)
        if u is not None and u[0] == 1 and u[1] + u[2] < end:  # written units first, then zeros
            lo = mid + 1
        else:
            hi = mid
    u = read_index_unit(index, lo) if lo < units else None
    return lo if u is not None and u[0] == 1 and u[3] == lo and u[1] + u[2] == end else None


def _bounded_by_region(dl: DLedgerLayout, end: int) -> DLedgerLayout:
    """A migrated store's DLedger layout up to its region's end (see ``own_checkpoint``)."""
    if dl.committed_unit_ok and dl.committed_pos == end:
        return dl
    units = max(f.end for f in dl.index) // INDEX_UNIT_SIZE if dl.index else 0
    found = _entry_ending_at(dl.index, end, units)
    own = (dl.committed_index, dl.committed_pos)
    if found is None:
        return replace(dl, own_checkpoint=own, region_end_entry=False)
    return replace(dl, committed_index=found, committed_pos=end, committed_unit_ok=True, own_checkpoint=own)


def _queues(root: Path) -> tuple[QueueFiles, ...]:
    cq = root / "consumequeue"
    out: list[QueueFiles] = []
    if not cq.is_dir():
        return ()
    for topic_dir in sorted(p for p in cq.iterdir() if p.is_dir()):
        for qdir in sorted((p for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)):
            files = _numbered_files(qdir)
            if files:
                out.append(QueueFiles(topic_dir.name, int(qdir.name), files))
    return tuple(out)


def discover(root: str | os.PathLike[str], node: str | None = None) -> StoreLayout:
    """Describe the store at ``root``; raises :class:`UnusableInput` if it is not one."""
    path = Path(root)
    if not path.exists():
        raise UnusableInput(f"{root}: no such directory")
    if not path.is_dir():
        raise UnusableInput(f"{root}: not a directory")
    has_old = (path / "commitlog").is_dir()
    try:
        regions = read_regions(path)
    except RegionsUnusable as e:
        raise UnusableInput(str(e)) from None
    dl = _dledger(path, dledger_dir(regions) if regions is not None else None)
    if not has_old and dl is None:
        raise UnusableInput(f"{root}: not a RocketMQ store (no commitlog/ and no dledger-*/ directory)")
    old = _numbered_files(path / "commitlog")
    new: tuple[FileRef, ...] = ()
    if regions is not None:
        new = tuple(f for f in old if f.start >= regions.classic_from)
        old = tuple(f for f in old if f.start < regions.classic_from)
    sizes = Counter(f.size for f in old)
    old_size = sizes.most_common(1)[0][0] if sizes else 0
    if dl is not None and not dl.data and old:  # frozen, DLedger not started yet: nothing committed
        dl = replace(dl, committed_pos=old[-1].end)
    if dl is not None and regions is not None and regions.of_kind("dledger"):
        dl = _bounded_by_region(dl, regions.of_kind("dledger")[0].end)
    label = node or (dl.self_id if dl else path.name)
    frozen = dl is None and _ends_in_blank(old)
    if frozen and len(_numbered_files(path / "commitlog")) > len(old):
        frozen = False  # a running broker closed that file with a blank and rolled to a new one
    return StoreLayout(str(path.resolve()), label, old, old_size, dl, _queues(path), frozen, regions, new,
                       read_epochs(path))


def _ends_in_blank(old: tuple[FileRef, ...]) -> bool:
    """A classic writer never leaves its last file ending in a blank (it opens the next file at
    once), so a last file closed by a blank means the store was frozen for the upgrade."""
    if not old or old[-1].size < 8:
        return False
    from upgrade.validate.records import walk_classic  # the same walk the tasks use

    with open(old[-1].path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        _starts, kind, end = walk_classic(mm, 0, len(mm), len(mm))
        return kind == "blank" and struct.unpack_from(">i", mm, end)[0] == len(mm) - end


def discover_all(roots: list[str]) -> list[StoreLayout]:
    """Discover every root and give each a unique node label (see module rules)."""
    layouts = [discover(r) for r in roots]
    ids = [lay.dledger.self_id if lay.dledger else None for lay in layouts]
    if all(ids) and len(set(ids)) == len(ids):
        labels = [str(i) for i in ids]
    else:
        labels = [Path(lay.root).name for lay in layouts]
    seen: Counter[str] = Counter()
    out = []
    for lay, label in zip(layouts, labels):
        seen[label] += 1
        final = label if seen[label] == 1 else f"{label}#{seen[label]}"
        out.append(replace(lay, node=final))
    return out

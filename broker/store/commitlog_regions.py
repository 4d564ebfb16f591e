"""The frozen regions of a store migrated from DLedger mode to Controller mode ("a second divide").

Rules (the shared spec; ``mqupgrade apply`` writes the file, the broker never does):
- ``<storePathRootDir>/commitlogRegions.json`` says the store is migrated; its format and rules
  are :mod:`broker.store.regions_file`'s (the one place that states them). Every defect is a :class:`RegionsFileError` with one sentence
  naming it and the fix: a structural one, the first broken rule of the format (an unknown
  version gets its own fix), and the broker's own checks: ``mappedFileSizeCommitLog`` must be
  the conf's, every region's directory must exist, its files may be missing only as retention
  deletes them (oldest first), and no commitlog file below ``classicFrom`` may lie outside every
  classic region.
- DLedger mode on a store with the file is refused (:func:`refuse_dledger_mode`): the DLedger log
  is frozen, DLedger would write past it. Classic mode (with or without the controller) opens
  it: the classic :class:`~broker.store.commitlog.CommitLog` is given the router
  (:class:`CommitLogRegions`) and owns only the files at and above ``classicFrom``.
- Reads by physical offset below ``classicFrom`` go to the region holding the offset; below the
  first held byte (retention) or in a gap: not found. HA never reads here (the commitlog refuses
  ``get_data`` below ``classicFrom``).
- Start-up (:meth:`CommitLogRegions.recover`, from the classic recovery): the frozen regions are
  CRC-checked from the checkpoint's verified offset (0 = never: all of them, once); the
  ConsumeQueues and the index are brought up to the regions' end by re-dispatching from where
  they stop (the dispatch gap a kill -9 in DLedger mode leaves), with the walker and checks of
  every other dispatch path; after a crash whose safe instant (the checkpoint's) precedes every
  writable file, re-dispatch starts at the newest frozen file stored no later than it, as the
  classic and DLedger crash rules do; and where the index stops when that is below the regions'
  end (after a crash the IndexService drops every index file newer than the checkpoint's index
  time, Apache's rule, which in a migrated store may hold every frozen key).
- Retention deletes whole frozen files, oldest first, while they are older than
  ``fileReservedTime`` (or at once when forced), before any writable file; the store's low mark is
  raised first (``before_delete``).

Theory of operation: :func:`open_regions` validates the file and builds one read-only view per
region (``frozen_regions``); the router only finds the view of an offset and walks them in order.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from broker.store.dispatch import locate
from broker.store.errors import StoreCorruptionError, StoreError, StoreLayoutError
from broker.store.frozen_regions import FrozenClassicRegion, FrozenDLedgerRegion, FrozenRegion
from broker.store.message import MessageExt, decode_message
from broker.store.record_walk import BAD, RECORD, ROLL, SKIP, walk
from broker.store.regions_file import REGIONS_FILE, VERSION, Region, RegionsError, RegionsVersionError, from_text, path_of
from broker.store.verify import CorruptionLog, Progress

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.commitlog import SelectMappedBufferResult
    from broker.store.dispatch import DispatchRequest
    from broker.store.store_host import StoreHost

log = logging.getLogger(__name__)

__all__ = ["REGIONS_FILE", "RegionsFileError", "RegionsManifest", "CommitLogRegions", "read_manifest",
           "refuse_dledger_mode", "open_regions", "regions_path"]

_FIX = "it is written by `mqupgrade apply` only: run `mqupgrade plan`/`apply` again, or `mqupgrade rollback`"
_VERSION_FIX = "upgrade the broker, or run `mqupgrade rollback` with the mqupgrade that wrote it"


class RegionsFileError(StoreError):
    """The regions file, or the files it names, break the spec (one sentence naming the defect)."""


@dataclass(frozen=True)
class RegionsManifest:
    path: Path
    mapped_file_size: int
    classic_from: int
    regions: tuple[Region, ...]  # paths resolved against the store root


regions_path = path_of


def read_manifest(root: str | Path, mapped_file_size: int) -> RegionsManifest | None:
    """The validated regions file of the store at ``root`` (None when there is none): the
    format's rules (``regions_file``: the first broken one is refused), the conf's file size and
    the regions' directories; the files in them are :func:`open_regions`' to check."""
    path = regions_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        doc = from_text(text)
    except RegionsVersionError as exc:
        raise RegionsFileError(f"{path}: {exc}; {_VERSION_FIX}") from None
    except RegionsError as exc:
        raise RegionsFileError(f"{path}: {exc}; {_FIX}") from None
    problems = doc.problems()
    if problems and doc.version != VERSION:  # the version's problem is the first
        raise RegionsFileError(f"{path}: {problems[0]}; {_VERSION_FIX}")
    size = doc.mapped_file_size_commit_log
    if 0 < size != mapped_file_size:  # a size <= 0 is the format's problem (below)
        raise RegionsFileError(f"{path}: mappedFileSizeCommitLog {size} is not the broker conf's {mapped_file_size}; "
                               f"start the broker with mappedFileSizeCommitLog={size}")
    if problems:
        raise RegionsFileError(f"{path}: {problems[0]}; {_FIX}")
    regions = doc.resolved(root).regions
    for i, r in enumerate(regions):
        if not Path(r.path).is_dir():
            raise RegionsFileError(f"{path}: regions[{i}] ({r.kind}) directory {r.path} does not exist; restore "
                                   "it (or `mqupgrade reseed` from a healthy replica)")
    return RegionsManifest(path, size, doc.classic_from, regions)


def refuse_dledger_mode(root: str | Path) -> None:
    """Raise if the store at ``root`` was migrated to Controller mode (its regions file exists)."""
    path = regions_path(root)
    if path.exists():
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(path.stat().st_mtime))
        raise RegionsFileError(
            f"{root} was migrated to Controller mode by mqupgrade on {when} ({path}); start it with "
            "enableControllerMode=true and enableDLegerCommitLog=false, or run `mqupgrade rollback` first")


def open_regions(root: str | Path, commitlog_dir: str | Path, mapped_file_size: int,
                 delay_levels: Sequence[int]) -> CommitLogRegions | None:
    """Validate the regions file and open every region read-only (None when the store has none)."""
    manifest = read_manifest(root, mapped_file_size)
    if manifest is None:
        return None
    views: list[FrozenRegion] = []
    try:
        for i, spec in enumerate(manifest.regions):
            try:
                if spec.kind == "classic":
                    views.append(FrozenClassicRegion(Path(spec.path), spec.start, spec.end, mapped_file_size,
                                                     delay_levels))
                else:
                    views.append(FrozenDLedgerRegion(Path(spec.path), spec.start, spec.end, mapped_file_size,
                                                     delay_levels))
            except StoreLayoutError as exc:
                raise RegionsFileError(f"{manifest.path}: regions[{i}] ({spec.kind}): {exc}") from None
        _check_retention_order(manifest, views)
        _check_stray_files(manifest, Path(commitlog_dir))
    except BaseException:
        for v in views:
            v.close()
        raise
    return CommitLogRegions(manifest, views)


def _check_retention_order(manifest: RegionsManifest, views: Sequence[FrozenRegion]) -> None:
    """Frozen files may be missing only as retention deletes them: oldest first, so below the
    first file held, and every region after a held one holds its files from its start."""
    held = -1
    for i, v in enumerate(views):
        if not v.files:
            if held >= 0:
                raise RegionsFileError(f"{manifest.path}: regions[{i}] ({v.kind}) holds no file although the older "
                                       f"regions[{held}] does (retention deletes oldest first); restore its files "
                                       "(or `mqupgrade reseed` from a healthy replica)")
            continue
        if held >= 0 and v.min_offset > v.start:
            raise RegionsFileError(f"{manifest.path}: regions[{i}] ({v.kind}) misses its files from {v.start} to "
                                   f"{v.min_offset} although the older regions[{held}] is held; restore them "
                                   "(or `mqupgrade reseed` from a healthy replica)")
        held = i


def _check_stray_files(manifest: RegionsManifest, commitlog_dir: Path) -> None:
    """Every commitlog file named below classicFrom belongs to a classic region in that directory."""
    if not commitlog_dir.is_dir():
        return
    size = manifest.mapped_file_size
    held = [(s.start - s.start % size, s.end) for s in manifest.regions
            if s.kind == "classic" and Path(s.path).resolve() == commitlog_dir.resolve()]
    for p in sorted(commitlog_dir.iterdir()):
        if len(p.name) != 20 or not p.name.isdigit() or int(p.name) >= manifest.classic_from:
            continue
        if not any(lo <= int(p.name) < hi for lo, hi in held):
            raise RegionsFileError(f"{manifest.path}: commitlog file {p} lies below classicFrom {manifest.classic_from} "
                                   "but in no classic region; move it away (it is in no region of the migrated store)")


class CommitLogRegions:
    """The router over the frozen regions (module rules)."""

    def __init__(self, manifest: RegionsManifest, views: Sequence[FrozenRegion]) -> None:
        self.manifest = manifest
        self.views = list(views)
        self.classic_from = manifest.classic_from
        self.end = manifest.regions[-1].end
        # where the store's index stops (the store sets it once its IndexService is loaded): a crash
        # drops every index file newer than the checkpoint's index time, frozen keys with it
        self.index_end: Callable[[], int] | None = None

    # --- reads --------------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """The first byte still held (-1 once retention deleted every frozen file)."""
        for v in self.views:
            if v.files:
                return v.min_offset
        return -1

    def route(self, offset: int) -> FrozenRegion | None:
        for v in self.views:
            if v.start <= offset < v.end:
                return v
        return None

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None:
        v = self.route(offset)
        return v.get_message(offset, size, checked_pages) if v is not None else None

    def get_record(self, offset: int) -> memoryview | None:
        v = self.route(offset)
        return v.get_record(offset) if v is not None else None

    def look_message_by_offset(self, offset: int, size: int | None = None) -> MessageExt | None:
        view = self.get_record(offset) if size is None else self.get_message(offset, size)
        return decode_message(view) if view is not None and len(view) >= 8 else None

    def configure_reads(self, verify: bool, node_label: str, corruption: CorruptionLog) -> None:
        for v in self.views:
            v.configure_reads(verify, node_label, corruption)

    # --- start-up -----------------------------------------------------------------------------
    def recover(self, store: StoreHost, max_phy_of_cq: int, crashed: bool, writable_safe: bool) -> int:
        """Verify, then re-dispatch what the ConsumeQueues miss (module rules); returns the count."""
        cp = store.checkpoint
        if cp is not None and store.settings.check_crc_on_recover and cp.physic_verified_offset < self.end:
            self.verify(cp.physic_verified_offset)
        low = self.min_offset
        if low < 0:
            return 0
        start = self.end if max_phy_of_cq >= self.end else max(max_phy_of_cq, low)
        if crashed and not writable_safe and cp is not None:
            start = min(start, self.safe_start(cp.min_timestamp_index if store.settings.message_index_safe
                                               else cp.min_timestamp))
        indexed = self.index_end() if self.index_end is not None else self.end
        if indexed < self.end:  # the index misses frozen keys (index files dropped after a crash)
            start = min(start, max(indexed, low))
        if start >= self.end:
            return 0
        log.info("dispatching the frozen regions from %d to %d (the ConsumeQueues stop at %d%s)", start, self.end,
                 max_phy_of_cq, ", after a crash" if crashed else "")
        count = self.redispatch(start, store)
        log.info("dispatched %d messages of the frozen regions", count)
        return count

    def verify(self, start: int) -> int:
        progress = Progress(self.end)
        count = 0
        for v in self.views:
            if v.end > start and v.files:
                count += v.verify(max(start, v.min_offset), progress)
        if count:
            log.info("verified %d records of the frozen regions by CRC from %d to %d", count, start, self.end)
        return count

    def safe_start(self, safe_instant: int) -> int:
        """Where a crash's re-dispatch starts: the newest frozen file whose first message was
        stored no later than ``safe_instant`` (the first held byte if none was)."""
        for v in reversed(self.views):
            for f in reversed(v.files):
                ts = v.first_store_timestamp(f)
                if 0 < ts <= safe_instant:
                    return max(f.from_offset, v.start)
        return max(self.min_offset, 0)

    def steps(self, start: int) -> Iterator[tuple[str, int, DispatchRequest, str, SelectMappedBufferResult, int]]:
        """``(kind, offset, request, why, slice, position)`` of every RECORD and SKIP step
        (``record_walk``) of the frozen regions from ``start`` to the end, in offset order; bytes
        that are not a record raise StoreCorruptionError (a frozen region is complete)."""
        offset = start
        for v in self.views:
            if v.end <= offset or not v.files:
                continue
            offset = max(offset, v.min_offset)
            while offset < v.end:
                res = v.get_data(offset)
                if res is None:
                    raise StoreCorruptionError(str(self.manifest.path), -1, offset,
                                               f"the frozen {v.kind} region [{v.start}, {v.end}) has no readable "
                                               f"record at {offset}")
                buf, base, pos, rolled = res.buffer, res.start_offset, 0, False
                for kind, at, size, req, why in walk(buf, 0, len(buf), v.parse_record, check_crc=True,
                                                     check_names=True, entry_size_at=v.entry_size_at, base=base):
                    pos = at + size
                    if kind == RECORD:
                        yield kind, base + at, req, why, res, at
                    elif kind == SKIP:
                        yield kind, base + at, req, why if req.success else f"{why}: {v.explain_record(buf, at)}", res, at
                    elif kind == ROLL:
                        rolled = True
                    elif kind == BAD:
                        path, file_pos = locate(res.mapped_file, base + pos)
                        raise StoreCorruptionError(path, file_pos, base + pos,
                                                   f"frozen {v.kind} region data does not parse: "
                                                   f"{v.explain_record(buf, pos)}")
                offset = v.roll_next_file(base + pos) if rolled else base + pos
                if not rolled and pos == 0:
                    break

    def redispatch(self, start: int, store: StoreHost) -> int:
        """Dispatch every frozen message from ``start`` to the end (:meth:`steps`: the walker and
        checks of the other dispatch paths; a bad name is reported and skipped)."""
        count = 0
        for kind, offset, req, why, res, _ in self.steps(start):
            if kind == RECORD:
                store.do_dispatch(req)
                count += 1
            else:
                path, file_pos = locate(res.mapped_file, offset)
                store.skipped.report(path, file_pos, offset, why)
        return count

    def messages(self, start: int = 0) -> Iterator[tuple[int, MessageExt]]:
        """(physical offset, message) of every frozen message from ``start`` (tools, tests)."""
        for kind, _, req, _, res, at in self.steps(start):
            if kind == RECORD:
                skip = max(req.buffer_size - req.msg_size, 0)  # a DLedger entry's 48-byte header
                yield req.commitlog_offset, decode_message(res.buffer[at + skip:at + skip + req.msg_size])

    # --- retention ----------------------------------------------------------------------------
    def delete_expired(self, expired_seconds: float, max_delete: int, clean_immediately: bool, now: float | None,
                       after_all: int, before_delete: Callable[[int], None] | None) -> int:
        """Delete up to ``max_delete`` whole frozen files, oldest first, while expired; returns
        the count. ``after_all``: the min offset once no frozen file is left."""
        order = [(v, f) for v in self.views for f in v.files]
        n = 0
        while n < min(max_delete, len(order)):
            if not (clean_immediately or order[n][1].age_seconds(now) >= expired_seconds):
                break
            n += 1
        if not n:
            return 0
        if before_delete is not None:
            if n < len(order):
                nv, nf = order[n]
                before_delete(max(nf.from_offset, nv.start))
            else:
                before_delete(after_all)
        for v, f in order[:n]:
            log.info("delete expired frozen %s file %s", v.kind, f.path)
            v.drop_oldest()
        return n

    def close(self) -> None:
        for v in self.views:
            v.close()

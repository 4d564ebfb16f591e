"""``mqupgrade reseed`` for a member of a group migrated to Controller mode (layout A), and the
verified one-file copy both reseed paths share.

Rules
-----
- A source store with ``commitlogRegions.json`` (read and checked by :mod:`upgrade.regions_file`,
  every rule of the format) is migrated: AutoSwitch HA replicates its commitlog only from
  ``classicFrom`` up (the master refuses a slave asking below it), so a new or replaced node gets
  from this command exactly what HA cannot give it:

  - every file of every frozen region the source still holds (retention may have deleted the
    oldest): a ``classic`` region's 20-digit commitlog files named below its ``end``; a
    ``dledger`` region's ``data/`` files named below its ``end``, its ``index/`` files and the
    member dir's own small files (``checkpoint``, ``currterm``): the store's read-only view
    needs ``data/`` and ``index/``, the validator reads the index and the committed index;
  - ``config/`` (topics, consumer offsets, subscription groups: HA does not replicate them);
  - ``commitlogRegions.json`` itself, **last**, after every region file is copied and verified
    (written atomically): a killed run never leaves a store that claims regions it lacks.

  Not copied: the writable classic files at and above ``classicFrom`` (HA ships them once the node
  joins: with no epoch file its max offset is ``classicFrom``, which is what it asks the master
  for, and the master's "below classicFrom" refusal does not apply), the epoch file
  (``epochFileCheckpoint``) and the broker identity files (``brokerIdentity``, its ``-temp``): the
  new node applies for its own id at its first start (Apache's ReplicasManager rule), and
  ``storeshape`` (the new node's own record), ConsumeQueues and the index (re-dispatched from the
  frozen regions at the first start: the store's rule for a ConsumeQueue behind the regions' end).
- A region path that is absolute (a ``storePathCommitLog`` outside the store root) names the
  directory the new node's broker will read: the files go there; ``--from-commitlog`` says where
  the source's copy is readable from here (refused when both are the same directory).
- The same guarantees as the DLedger-mode reseed: the source may run (frozen files are immutable:
  only retention deletes them, oldest first); the destination's broker must be stopped, and its
  ``lock`` is held for the whole run so it cannot start meanwhile; each file goes through
  ``.upgrade-tmp`` + fsync + digest check against the source + rename (:func:`copy_verified`); a
  file already holding the source's bytes is kept (idempotent re-run); one that differs is refused
  unless ``--overwrite``. A destination whose own regions file differs from the source's is refused
  naming both layouts (another migration, or another group's store), ``--overwrite`` or not; so is
  one holding writable classic files (at or above ``classicFrom``) but no epoch file: with an
  empty epoch cache the slave would ask the master from the end of those files, unchecked. A node
  that ran in the group (epoch file there) keeps its writable files: HA's truncation handshake
  checks them.
- The DLedger region is copied first: a run killed before the end leaves DLedger data files and no
  regions file, which the store refuses to start in Controller mode (``broker.store.shape``), so a
  half-seeded node cannot join the group; running the command again finishes it.

Theory of operation
-------------------
:func:`reseed_migrated` lists (source file, destination file) pairs per region, runs
:func:`copy_verified` on each, copies ``config/`` as a tree (``.upgrade-tmp`` + rename), then
writes the regions file with :func:`upgrade.regions_file.write`. ``--verify-only`` runs the same
listing and comparison without writing. :mod:`upgrade.reseed` routes here when the source has a
regions file and prints the report.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from broker.store.lockfile import StoreLock, StoreLockedError
from upgrade import regions_file
from upgrade.fileops import TMP_SUFFIX, atomic_copy_file, content_digest, first_difference
from upgrade.store_links import refuse_links

#: files of the store root a reseed never copies: the node's own epoch history and identity
NOT_COPIED = ("epochFileCheckpoint", "brokerIdentity", "brokerIdentity-temp", "storeshape")


class ReseedError(Exception):
    """A user-facing refusal (one line)."""


@dataclass
class ReseedReport:
    divided_offset: Optional[int]
    copied: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)
    #: a migrated source's layout (None: a DLedger-mode or classic source)
    regions: Optional[regions_file.Regions] = None
    #: the destination's regions file: "written", "identical", "missing" or "differs" (verify-only)
    regions_state: str = ""


def numbered(directory: Path) -> list[Path]:
    """The 20-digit (offset-named) files of ``directory``, ascending (none when it is absent)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.is_file() and len(p.name) == 20 and p.name.isdigit())


def copy_verified(src: Path, dst: Path, label: str, report: ReseedReport, *, overwrite: bool,
                  verify_only: bool) -> None:
    """One file: kept when ``dst`` holds the same bytes; else (unless ``verify_only``) copied via
    ``.upgrade-tmp`` + fsync + digest check + rename; a differing ``dst`` is refused unless ``overwrite``."""
    try:
        n = src.stat().st_size
    except FileNotFoundError:
        raise ReseedError(f"{src} vanished from the source while reseeding (retention deleted it); "
                          "run the command again") from None
    if dst.exists():
        if dst.stat().st_size == n and content_digest(dst, 0, n) == content_digest(src, 0, n):
            report.kept.append(label)
            return
        report.differ.append(label)
        if verify_only:
            return
        if not overwrite:
            diff, _ = first_difference(src, dst, 0, min(n, dst.stat().st_size))
            where = f"first difference at byte {diff}" if diff is not None else "sizes differ"
            raise ReseedError(f"{dst} differs from {src} ({where}); pass --overwrite to replace it with the "
                              "source's copy")
    else:
        report.missing.append(label)
        if verify_only:
            return
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_copy_file(src, dst, n)  # .upgrade-tmp, fsync, digest check, rename
    except FileNotFoundError:
        raise ReseedError(f"{src} vanished from the source while reseeding (retention deleted it); "
                          "run the command again") from None
    report.copied.append(label)


def copy_tree(src: Path, dst: Path) -> None:
    """``src`` as ``dst``, whole: copied to ``dst.upgrade-tmp``, then renamed over ``dst``."""
    tmp = dst.with_name(dst.name + TMP_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dst.exists():
        shutil.rmtree(dst)
    tmp.rename(dst)


# --- the migrated store ---------------------------------------------------------------------------
def _region_dirs(r: regions_file.Region, src_root: Path, dst_root: Path,
                 src_commitlog: Optional[Path]) -> tuple[Path, Path]:
    p = Path(r.path)
    if not p.is_absolute():
        return src_root / p, dst_root / p
    if r.kind != "classic":
        raise ReseedError(f"the {r.kind} region's directory {p} is absolute (mqupgrade apply writes it relative to "
                          "the store root); reseed copies an absolute path for the classic region only")
    src = src_commitlog if src_commitlog is not None else p
    if src.resolve() == p.resolve():
        raise ReseedError(f"the classic region's directory {p} is absolute: the new node's broker reads it there, "
                          "so its files are copied there; give --from-commitlog with the directory where the "
                          "source's copy of it is readable from this machine")
    return src, p


def _pairs(regions: regions_file.Regions, src_root: Path, dst_root: Path,
           src_commitlog: Optional[Path]) -> Iterator[tuple[Path, Path, str]]:
    """(source file, destination file, label) of every frozen file, the DLedger region's first."""
    size = regions.mapped_file_size_commit_log
    ordered = sorted(regions.regions, key=lambda r: r.kind != "dledger")
    for r in ordered:
        src_dir, dst_dir = _region_dirs(r, src_root, dst_root, src_commitlog)
        if not src_dir.is_dir():
            raise ReseedError(f"the source's {r.kind} region directory {src_dir} does not exist "
                              f"({regions_file.REGIONS_FILE} names {r.path})")

        def label(p: Path) -> str:
            return str(Path(r.path) / p.relative_to(src_dir))
        data = src_dir / "data" if r.kind == "dledger" else src_dir
        for f in numbered(data):
            if int(f.name) < r.end and int(f.name) + size > r.start:
                yield f, dst_dir / f.relative_to(src_dir), label(f)
        if r.kind == "dledger":
            for f in numbered(src_dir / "index"):
                yield f, dst_dir / "index" / f.name, label(f)
            for f in sorted(src_dir.iterdir()):
                if f.is_file() and not f.name.endswith(TMP_SUFFIX):
                    yield f, dst_dir / f.name, label(f)


def _check_destination(regions: regions_file.Regions, dst_root: Path, classic_dirs: list[Path],
                       overwrite: bool) -> Optional[str]:
    """The destination regions file's state ("missing", "identical", "differs"); refuses one that
    names another layout, and writable classic files with no epoch file to check them by."""
    try:
        have = regions_file.read(dst_root)
    except regions_file.RegionsError as exc:
        if not overwrite:
            raise ReseedError(f"the destination's regions file is broken ({exc}); pass --overwrite to replace it "
                              "with the source's") from None
        return "differs"
    if have is not None and have != regions:
        raise ReseedError(f"the destination already holds another {regions_file.REGIONS_FILE} ({have.describe()}) "
                          f"than the source's ({regions.describe()}); it is another migration's or another group's "
                          "store: move it away, then run the command again")
    writable = [f for d in [dst_root / "commitlog", *classic_dirs] for f in numbered(d)
                if int(f.name) >= regions.classic_from]
    if writable and not (dst_root / "epochFileCheckpoint").exists():
        raise ReseedError(f"the destination holds writable commitlog files from classicFrom {regions.classic_from} "
                          f"({writable[0]}, ...) but no epoch file, so HA cannot check them against the master's "
                          "history; move them away (HA ships that part), then run the command again")
    return "missing" if have is None else "identical"


def reseed_migrated(src_root: Path, dst_root: Path, regions: regions_file.Regions, *,
                    src_commitlog: Optional[Path] = None, overwrite: bool = False,
                    verify_only: bool = False) -> ReseedReport:
    """Copy (or with ``verify_only`` compare) what HA cannot give a new member (module rules)."""
    report = ReseedReport(None, regions=regions)
    dirs = [_region_dirs(r, src_root, dst_root, src_commitlog) for r in regions.regions]
    refuse_links([d for pair in dirs for d in pair], ReseedError)  # issue 23.8: never through a link
    state = _check_destination(regions, dst_root, [d for r, (_, d) in zip(regions.regions, dirs)
                                                    if r.kind == "classic"], overwrite)
    pairs = list(_pairs(regions, src_root, dst_root, src_commitlog))
    if verify_only:
        for src, dst, label in pairs:
            copy_verified(src, dst, label, report, overwrite=False, verify_only=True)
        report.regions_state = state or "missing"
        return report
    dst_root.mkdir(parents=True, exist_ok=True)
    lock = StoreLock(dst_root)
    try:
        lock.acquire()
    except StoreLockedError as exc:
        raise ReseedError(f"the destination store is in use ({exc}); stop its broker first") from None
    try:
        for src, dst, label in pairs:
            copy_verified(src, dst, label, report, overwrite=overwrite, verify_only=False)
        if (src_root / "config").is_dir():
            copy_tree(src_root / "config", dst_root / "config")
            report.trees.append("config")
        if state == "identical":
            report.regions_state = "identical"
        else:
            regions_file.write(dst_root, regions)  # last: tmp + fsync + rename + dir fsync
            report.regions_state = "written"
    finally:
        lock.release()
    return report


def describe_skipped(regions: regions_file.Regions) -> str:
    """The sentence on what the command leaves to HA and to the new node (for the output)."""
    return (f"not copied: the writable classic commitlog from classicFrom {regions.classic_from} (AutoSwitch HA "
            f"replicates it once the node joins as a slave: its max offset is {regions.classic_from}), "
            f"{', '.join(NOT_COPIED)} (the node applies for its own broker id at its first start), "
            "consumequeue/ and index/ (re-dispatched from the frozen regions at its first start)")


__all__ = ["NOT_COPIED", "ReseedError", "ReseedReport", "copy_tree", "copy_verified", "describe_skipped",
           "numbered", "reseed_migrated"]

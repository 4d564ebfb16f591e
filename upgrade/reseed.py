"""``mqupgrade reseed``: give a DLedger follower the old commitlog region Raft does not replicate.

Rules
-----
- A broker in DLedger mode reads offsets below ``dividedCommitlogOffset`` from the old, frozen
  classic commitlog (``storePathCommitLog``); Raft replicates only the DLedger log above it. A
  follower whose store was moved away (the recovery ``EntryCorruptionError`` prescribes), or a
  new node, gets the DLedger log back from the leader automatically (the reject hint and the
  begin reset of ``dledger.core``), but never the old region. This command copies it.
- ``--from`` is the store root (``storePathRootDir``) of a healthy member, usually the leader; it
  may be running: the old files are immutable in DLedger mode (only deletion touches them) and
  every copy is verified by content digest against the source after it is written.
  ``--to`` is the follower's store root; its broker must be stopped (its ``lock`` is probed).
- Copied: every old commitlog file of the source (20-digit names, each ending at or below the
  source's divided offset = the start of its first DLedger data file), and ``config/`` (topics,
  offsets, subscription groups: Raft does not replicate them either). Each file goes through
  ``<name>.upgrade-tmp`` + fsync + digest check + rename (``upgrade.fileops``), so a killed run
  leaves nothing half-copied and is simply run again. ConsumeQueues and IndexFiles are not
  copied by default: the follower's ReputMessageService rebuilds them at start from the copied
  old region and its DLedger log (``--seed-consumequeue copy`` copies ``consumequeue/``,
  ``index/`` and ``checkpoint`` as ``mqupgrade plan`` seeds a new node; refused while the source
  is running, because those files change under a live broker).
- A destination file that already holds the same bytes is kept (idempotent re-run); one that
  differs is refused, naming it, unless ``--overwrite`` (then it is replaced by the source's).
- ``--verify-only`` copies nothing and reports which old files are missing or differ (exit 2 if
  any). Every user error is one line ``mqupgrade reseed: error: ...`` with exit 2, no traceback.
- A source with ``commitlogRegions.json`` was migrated to Controller mode: the command copies its
  frozen regions, ``config/`` and the regions file (last) with the same guarantees
  (:mod:`upgrade.reseed_regions`: what is copied, what HA gives instead); the options that only
  mean something in DLedger mode are refused there. A migrated destination is never reseeded from
  a source that is not.

Theory of operation
-------------------
Why one command and not an automatic re-seed: the old region can be many GiB, it is copied once
per replaced node, and the broker's peer channel is the DLedger frame transport (entries, not
files). A command reuses the upgrade tool's sparse-aware, verified, crash-safe copies and leaves
the operator in control of when the disk and network are spent; an automatic transfer would need
a new authenticated bulk-file protocol on the DLedger port. The order for a replaced follower:
stop its broker, move its store away, ``mqupgrade reseed --from <leader root> --to <new root>``,
start it; the DLedger log then arrives from the leader by itself.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Optional

from upgrade import regions_file
from upgrade.reseed_regions import (ReseedError, ReseedReport, copy_tree, copy_verified, describe_skipped,
                                    numbered, reseed_migrated)

__all__ = ["HELP", "ReseedError", "ReseedReport", "add_arguments", "divided_offset", "reseed", "run"]

HELP = ("copy what replication does not give a new member, verified: the old commitlog region below "
        "dividedCommitlogOffset (DLedger mode) or the frozen regions below classicFrom (a store migrated to "
        "Controller mode), and config/")

_old_files = numbered


def divided_offset(root: Path, dledger_data: Optional[Path] = None) -> Optional[int]:
    """Start of the first DLedger data file under ``root`` (None: the store is not upgraded)."""
    dirs = [dledger_data] if dledger_data else sorted(root.glob("dledger-*/data"))
    starts = [int(f.name) for d in dirs if d is not None for f in _old_files(d)]
    return min(starts) if starts else None


def _lock_holder(root: Path) -> Optional[str]:
    from upgrade.inspect import _lock_holder as holder

    return holder(root)


def reseed(src_root: Path, dst_root: Path, *, src_commitlog: Optional[Path] = None,
           dst_commitlog: Optional[Path] = None, src_dledger_data: Optional[Path] = None,
           seed_consumequeue: str = "rebuild", overwrite: bool = False, verify_only: bool = False) -> ReseedReport:
    src_root, dst_root = Path(src_root), Path(dst_root)
    if not src_root.is_dir():
        raise ReseedError(f"--from {src_root} is not a directory (give the source broker's storePathRootDir)")
    if src_root.resolve() == dst_root.resolve():
        raise ReseedError("--from and --to are the same store")
    src_cl = src_commitlog or src_root / "commitlog"
    dst_cl = dst_commitlog or dst_root / "commitlog"
    from upgrade.store_links import refuse_links  # issue 23.8: never through a link out of a store

    refuse_links([src_root, dst_root, src_cl, dst_cl, src_dledger_data], ReseedError)
    migrated = _regions(src_root)
    if migrated is not None:
        return _reseed_migrated(src_root, dst_root, migrated, src_commitlog, dst_commitlog, src_dledger_data,
                                seed_consumequeue, overwrite, verify_only)
    if regions_file.path_of(dst_root).exists():
        raise ReseedError(f"the destination {dst_root} was migrated to Controller mode "
                          f"({regions_file.REGIONS_FILE}) but the source {src_root} was not: --from names no member "
                          "of the destination's group")
    files = _old_files(src_cl)
    divided = divided_offset(src_root, src_dledger_data)
    if not files and divided is None:
        raise ReseedError(f"no commitlog files in {src_cl} and no DLedger data under {src_root} (give the source "
                          f"broker's storePathRootDir; --from-commitlog if storePathCommitLog is elsewhere)")
    if not verify_only:
        held = _lock_holder(dst_root) if dst_root.exists() else None
        if held:
            raise ReseedError(f"the destination store is in use ({held}); stop its broker first")
    size = files[0].stat().st_size if files else 0
    wanted = [p for p in files if divided is None or int(p.name) + size <= divided]
    report = ReseedReport(divided)
    for src in wanted:
        copy_verified(src, dst_cl / src.name, src.name, report, overwrite=overwrite, verify_only=verify_only)
    if verify_only:
        return report
    trees = ["config"] + (["consumequeue", "index"] if seed_consumequeue == "copy" else [])
    if seed_consumequeue == "copy" and _lock_holder(src_root):
        raise ReseedError("--seed-consumequeue copy needs the source broker stopped (its ConsumeQueues change "
                          "while it runs); use the default --seed-consumequeue rebuild")
    for tree in trees:
        s, d = src_root / tree, dst_root / tree
        if s.is_dir():
            copy_tree(s, d)
            report.trees.append(tree)
    if seed_consumequeue == "copy" and (src_root / "checkpoint").is_file():
        shutil.copyfile(src_root / "checkpoint", dst_root / "checkpoint")
    return report


def _regions(src_root: Path) -> Optional[regions_file.Regions]:
    """The source's layout when it was migrated to Controller mode (every rule of the file checked)."""
    try:
        return regions_file.read(src_root)
    except regions_file.RegionsError as exc:
        raise ReseedError(f"the source's regions file is broken ({exc}); reseed from a healthy member") from None


def _reseed_migrated(src_root: Path, dst_root: Path, regions: regions_file.Regions, src_commitlog: Optional[Path],
                     dst_commitlog: Optional[Path], src_dledger_data: Optional[Path], seed_consumequeue: str,
                     overwrite: bool, verify_only: bool) -> ReseedReport:
    """A migrated source (``upgrade.reseed_regions``); the options of the DLedger-mode path that
    mean nothing there are refused rather than ignored."""
    named = regions_file.REGIONS_FILE
    if dst_commitlog is not None:
        raise ReseedError(f"--to-commitlog: the source is migrated to Controller mode and its {named} names the "
                          "frozen regions' directories, which the new node reads; leave --to-commitlog out")
    if src_dledger_data is not None:
        raise ReseedError(f"--from-dledger-data: the source is migrated to Controller mode; its {named} names the "
                          "DLedger region; leave --from-dledger-data out")
    if seed_consumequeue == "copy":
        raise ReseedError("--seed-consumequeue copy: the source is migrated to Controller mode; the new node "
                          "re-dispatches its ConsumeQueues from the frozen regions at its first start (the default)")
    return reseed_migrated(src_root, dst_root, regions, src_commitlog=src_commitlog, overwrite=overwrite,
                           verify_only=verify_only)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="src", required=True, metavar="STORE_ROOT",
                   help="storePathRootDir of a healthy member (usually the leader; may be running)")
    p.add_argument("--to", dest="dst", required=True, metavar="STORE_ROOT",
                   help="storePathRootDir of the follower to re-seed (its broker must be stopped)")
    p.add_argument("--from-commitlog", metavar="DIR",
                   help="the source's storePathCommitLog (default ROOT/commitlog); for a migrated source whose "
                        "classic region path is absolute: where that directory is readable from here")
    p.add_argument("--to-commitlog", metavar="DIR", help="the destination's storePathCommitLog (default ROOT/commitlog)")
    p.add_argument("--from-dledger-data", metavar="DIR",
                   help="the source's DLedger data dir (default ROOT/dledger-*/data): gives dividedCommitlogOffset")
    p.add_argument("--seed-consumequeue", choices=("rebuild", "copy"), default="rebuild",
                   help="rebuild (default: the follower's reput replays the commitlog) or copy from a stopped source")
    p.add_argument("--overwrite", action="store_true", help="replace destination files that differ from the source")
    p.add_argument("--verify-only", action="store_true", help="copy nothing; exit 2 if any old file is missing or differs")


def run(args: argparse.Namespace) -> int:
    opt = lambda v: Path(v) if v else None  # noqa: E731
    try:
        rep = reseed(Path(args.src), Path(args.dst), src_commitlog=opt(args.from_commitlog),
                     dst_commitlog=opt(args.to_commitlog), src_dledger_data=opt(args.from_dledger_data),
                     seed_consumequeue=args.seed_consumequeue, overwrite=args.overwrite,
                     verify_only=args.verify_only)
    except (ReseedError, OSError) as exc:
        print(f"mqupgrade reseed: error: {exc}", file=sys.stderr)
        return 2
    if rep.regions is not None:
        return _print_migrated(rep, args.verify_only)
    div = "none (not upgraded: every file)" if rep.divided_offset is None else str(rep.divided_offset)
    print(f"dividedCommitlogOffset {div}")
    if args.verify_only:
        print(f"verified: {len(rep.kept)} identical, {len(rep.missing)} missing, {len(rep.differ)} differ")
        for name in rep.missing:
            print(f"  missing {name}")
        for name in rep.differ:
            print(f"  differs {name}")
        return 2 if rep.missing or rep.differ else 0
    print(f"copied {len(rep.copied)} old commitlog files (verified), kept {len(rep.kept)} identical; "
          f"trees: {', '.join(rep.trees) or 'none'}")
    return 0


def _print_migrated(rep: ReseedReport, verify_only: bool) -> int:
    assert rep.regions is not None
    named = regions_file.REGIONS_FILE
    print(f"migrated to Controller mode ({named}): {rep.regions.describe()}")
    if verify_only:
        print(f"verified: {len(rep.kept)} identical, {len(rep.missing)} missing, {len(rep.differ)} differ; "
              f"{named} {rep.regions_state}")
        for name in rep.missing:
            print(f"  missing {name}")
        for name in rep.differ:
            print(f"  differs {name}")
        return 2 if rep.missing or rep.differ or rep.regions_state != "identical" else 0
    print(f"copied {len(rep.copied)} frozen-region files (verified), kept {len(rep.kept)} identical; trees: "
          f"{', '.join(rep.trees) or 'none'}; {named} {rep.regions_state} (last)")
    print(describe_skipped(rep.regions))
    return 0

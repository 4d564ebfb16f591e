"""A store migrated to Controller mode, as the validator reads it: ``commitlogRegions.json`` and
the epoch file (driver side, metadata only).

Rules (the shared spec of issue 27, "a second divide"):
- ``<storePathRootDir>/commitlogRegions.json`` lists the read-only regions (``classic``: commitlog
  files whose offsets lie in ``[start, end)``; ``dledger``: a DLedger store dir whose readable
  messages end at ``end``) and ``classicFrom``, where the writable classic commitlog starts (the
  smallest multiple of ``mappedFileSizeCommitLog`` at or above the last region's end). Files of
  ``commitlog/`` named ``>= classicFrom`` are the writable classic region; ``(last end,
  classicFrom)`` is the gap: nothing is stored there and nothing may point into it.
- A file that is not JSON, or lacks a field, makes the store :class:`UnusableInput` (we cannot
  tell which bytes belong to which region); a file that parses but breaks a rule of the spec
  (order, overlap, an end above ``classicFrom``, ``classicFrom`` not the smallest aligned offset,
  an unknown kind or version) is read as written and each broken rule is a ``problem`` that the
  divide check reports.
- The epoch file (``<storePathRootDir>/epochFileCheckpoint``) is read with the broker's own
  :class:`~broker.ha.autoswitch.checkpoint_file.CheckpointFile` and
  :class:`~broker.ha.autoswitch.epoch_file.EpochEntryCodec` (its ``.bak`` fallback included);
  the order rules are checked by the validator, not by the loader, so that every broken entry
  becomes a finding instead of one exception. No file: nothing to check (the report says so).

Theory of operation: two small file reads per store root, pure data out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from broker.ha.autoswitch.checkpoint_file import CheckpointFile, CheckpointFileError
from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntryCodec

REGIONS_FILE_NAME = "commitlogRegions.json"
KINDS = ("classic", "dledger")


class RegionsUnusable(Exception):
    """The regions file cannot be read as the spec's JSON (one sentence naming the file)."""


@dataclass(frozen=True)
class Region:
    kind: str  # "classic" | "dledger"
    path: str  # absolute
    start: int
    end: int


@dataclass(frozen=True)
class Regions:
    file: str
    version: int
    file_size: int  # mappedFileSizeCommitLog
    classic_from: int
    regions: tuple[Region, ...]
    problems: tuple[str, ...]  # rules of the spec the file breaks (reported by the divide check)

    @property
    def last_end(self) -> int:
        """Where the gap starts: the last region's end (``classicFrom`` without regions)."""
        return self.regions[-1].end if self.regions else self.classic_from

    def of_kind(self, kind: str) -> tuple[Region, ...]:
        return tuple(r for r in self.regions if r.kind == kind)


@dataclass(frozen=True)
class EpochRead:
    file: str
    entries: tuple[tuple[int, int], ...]  # (epoch, startOffset) in file order
    source: str  # "main", "bak" or "none" (CheckpointRead.source), "error" when unreadable
    error: str | None = None


def _int(doc: dict, key: str, where: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegionsUnusable(f"{where}: field {key!r} is {value!r}, not an integer")
    return value


def read_regions(root: Path) -> Regions | None:
    """The regions file of ``root`` (None when there is none); see the module rules."""
    path = root / REGIONS_FILE_NAME
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise RegionsUnusable(f"{path}: not readable as JSON ({e}); restore it from the mqupgrade apply that "
                              f"wrote it") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("regions"), list):
        raise RegionsUnusable(f"{path}: no 'regions' list")
    version = _int(doc, "version", str(path))
    size = _int(doc, "mappedFileSizeCommitLog", str(path))
    classic_from = _int(doc, "classicFrom", str(path))
    problems: list[str] = []
    if version != 1:
        problems.append(f"{REGIONS_FILE_NAME} has version {version}; this validator knows version 1")
    regions = []
    for i, r in enumerate(doc["regions"]):
        where = f"{path}: region {i}"
        if not isinstance(r, dict) or not isinstance(r.get("path"), str):
            raise RegionsUnusable(f"{where}: not an object with a 'path'")
        kind = r.get("kind")
        if kind not in KINDS:
            problems.append(f"region {i} has kind {kind!r} (not one of {', '.join(KINDS)})")
        p = Path(r["path"])
        regions.append(Region(str(kind), str(p if p.is_absolute() else root / p), _int(r, "start", where),
                              _int(r, "end", where)))
    if not regions:
        problems.append("the regions list is empty (a migrated store keeps at least its DLedger region)")
    for i, r in enumerate(regions):
        if r.end < r.start:
            problems.append(f"region {i} ({r.kind}) ends at {r.end}, before its start {r.start}")
        if r.end > classic_from:
            problems.append(f"region {i} ({r.kind}) ends at {r.end}, above classicFrom {classic_from}")
    for i, (a, b) in enumerate(zip(regions, regions[1:])):
        if b.start < a.end:
            problems.append(f"region {i + 1} ({b.kind}, start {b.start}) overlaps or precedes region {i} "
                            f"({a.kind}, [{a.start}, {a.end}))")
    if size <= 0:
        problems.append(f"mappedFileSizeCommitLog is {size}")
    elif regions:
        want = -(-max(r.end for r in regions) // size) * size
        if classic_from != want:
            problems.append(f"classicFrom is {classic_from}; the smallest multiple of mappedFileSizeCommitLog "
                            f"{size} at or above the last region's end {regions[-1].end} is {want}")
    return Regions(str(path), version, size, classic_from, tuple(regions), tuple(problems))


def read_epochs(root: Path) -> EpochRead | None:
    """The epoch file of ``root`` through the broker's reader (None when neither it nor its .bak
    exists)."""
    path = root / EPOCH_FILE_NAME
    if not path.exists() and not Path(str(path) + ".bak").exists():
        return None
    try:
        got = CheckpointFile(path, EpochEntryCodec()).read()
    except (CheckpointFileError, OSError) as e:
        return EpochRead(str(path), (), "error", str(e))
    return EpochRead(str(path), tuple((e.epoch, e.start_offset) for e in got.entries), got.source)


def dledger_dir(regions: Regions) -> str | None:
    """The DLedger region's store dir (the spec's store has at most one), when the file names one."""
    dls = regions.of_kind("dledger")
    return dls[0].path if dls else None

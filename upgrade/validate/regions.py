"""A store migrated to Controller mode, as the validator reads it: ``commitlogRegions.json`` and
the epoch file (driver side, metadata only).

Rules (the shared spec of issue 27, "a second divide"):
- ``<storePathRootDir>/commitlogRegions.json`` lists the read-only regions and ``classicFrom``,
  where the writable classic commitlog starts; its format and rules are
  :mod:`broker.store.regions_file`'s (the one place that states them). Files of ``commitlog/``
  named ``>= classicFrom`` are the writable classic region; ``(last end, classicFrom)`` is the
  gap: nothing is stored there and nothing may point into it.
- A structural defect (not JSON, a missing, unknown or mistyped field, another version's shape)
  makes the store :class:`UnusableInput` (we cannot tell which bytes belong to which region); a
  file that parses but breaks rules of the spec is read as written (paths made absolute) and
  every broken rule (``Regions.problems`` of the format module) is a ``problem`` that the divide
  check reports.
- The epoch file (``<storePathRootDir>/epochFileCheckpoint``) is read with the broker's own
  :class:`~broker.ha.autoswitch.checkpoint_file.CheckpointFile` and
  :class:`~broker.ha.autoswitch.epoch_file.EpochEntryCodec` (its ``.bak`` fallback included);
  the order rules are checked by the validator, not by the loader, so that every broken entry
  becomes a finding instead of one exception. No file: nothing to check (the report says so).

Theory of operation: two small file reads per store root, pure data out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker.ha.autoswitch.checkpoint_file import CheckpointFile, CheckpointFileError
from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntryCodec
from broker.store.regions_file import KINDS, REGIONS_FILE, Region, RegionsError, from_text

__all__ = ["KINDS", "REGIONS_FILE_NAME", "Region", "Regions", "RegionsUnusable", "EpochRead", "read_regions",
           "read_epochs", "dledger_dir"]

REGIONS_FILE_NAME = REGIONS_FILE
_RESTORE = "restore it from the mqupgrade apply that wrote it"


class RegionsUnusable(Exception):
    """The regions file cannot be read as the spec's JSON (one sentence naming the file)."""


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


def read_regions(root: Path) -> Regions | None:
    """The regions file of ``root`` (None when there is none); see the module rules."""
    path = root / REGIONS_FILE_NAME
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RegionsUnusable(f"{path}: not readable ({e}); {_RESTORE}") from None
    try:
        doc = from_text(text)
    except RegionsError as e:
        raise RegionsUnusable(f"{path}: {e}; {_RESTORE}") from None
    return Regions(str(path), doc.version, doc.mapped_file_size_commit_log, doc.classic_from,
                   doc.resolved(root).regions, tuple(doc.problems()))


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

"""``commitlogRegions.json``: how a store migrated from DLedger mode to Controller mode is laid out.

Rules (the shared spec, layout A "a second divide"; this module writes and reads exactly it):
- One file, ``<storePathRootDir>/commitlogRegions.json``, written by ``mqupgrade apply`` (never by
  the broker) atomically: ``.upgrade-tmp`` + fsync + rename + directory fsync
  (:func:`upgrade.fileops.atomic_write_text`). Its keys, and no others: ``version`` (1),
  ``writtenBy`` ("mqupgrade"), ``mappedFileSizeCommitLog``, ``classicFrom``, ``regions``.
- ``regions``: read-only, ascending by ``start``, non-overlapping, each ``start < end``, every
  ``end <= classicFrom``; ``kind`` is ``classic`` (20-digit commitlog files whose offsets lie in
  ``[start, end)``) or ``dledger`` (a DLedger member dir holding ``data/`` and ``index/``; ``end``
  is the physical end of the last COMMITTED entry's message). ``path`` is relative to the store
  root (or absolute).
- ``classicFrom`` is the smallest multiple of ``mappedFileSizeCommitLog`` that is ``>=`` the last
  region's ``end``: the first name of the writable classic commitlog.
- The text is deterministic for the same layout (fixed key order, 2-space indent, trailing
  newline), so apply can tell "already written" from "somebody else's file" by comparing text.

Theory of operation: :class:`Regions` is the file as data; :meth:`Regions.to_text` and
:func:`parse` are inverses (``parse`` checks every rule above and raises :class:`RegionsError`
naming the broken one); :func:`write` and :func:`read` put it on and off a store.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from upgrade.fileops import atomic_write_text

REGIONS_FILE = "commitlogRegions.json"
VERSION = 1
WRITTEN_BY = "mqupgrade"
KINDS = ("classic", "dledger")


class RegionsError(ValueError):
    """A regions file that breaks the spec (one line naming the rule)."""


@dataclass(frozen=True)
class Region:
    kind: str  # classic | dledger
    path: str  # relative to storePathRootDir, or absolute
    start: int
    end: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "start": self.start, "end": self.end}


def class_from(end: int, file_size: int) -> int:
    """The smallest multiple of ``file_size`` that is ``>= end``."""
    return -(-end // file_size) * file_size


@dataclass(frozen=True)
class Regions:
    mapped_file_size_commit_log: int
    classic_from: int
    regions: tuple[Region, ...]

    @classmethod
    def of(cls, regions: list[Region], file_size: int) -> "Regions":
        """The layout whose ``classicFrom`` follows the last region (validated)."""
        r = cls(file_size, class_from(regions[-1].end, file_size), tuple(regions))
        r.check()
        return r

    def check(self) -> None:
        fs = self.mapped_file_size_commit_log
        if fs <= 0:
            raise RegionsError(f"mappedFileSizeCommitLog must be > 0, not {fs}")
        if not self.regions:
            raise RegionsError("regions is empty")
        prev_end = -1
        for r in self.regions:
            if r.kind not in KINDS:
                raise RegionsError(f"region kind {r.kind!r} is not one of {', '.join(KINDS)}")
            if not r.path:
                raise RegionsError(f"the {r.kind} region has no path")
            if not 0 <= r.start < r.end:
                raise RegionsError(f"region {r.path} [{r.start}, {r.end}) is empty or negative")
            if r.start < prev_end:
                raise RegionsError(f"region {r.path} starts at {r.start}, inside the one before (ends at {prev_end})")
            prev_end = r.end
        if self.classic_from % fs or self.classic_from != class_from(prev_end, fs):
            raise RegionsError(f"classicFrom {self.classic_from} is not the first multiple of {fs} at or above "
                               f"the last region's end {prev_end} ({class_from(prev_end, fs)})")

    def to_dict(self) -> dict[str, Any]:
        return {"version": VERSION, "writtenBy": WRITTEN_BY, "mappedFileSizeCommitLog": self.mapped_file_size_commit_log,
                "classicFrom": self.classic_from, "regions": [r.to_dict() for r in self.regions]}

    def to_text(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def describe(self) -> str:
        parts = [f"{r.kind} {r.path} [{r.start}, {r.end})" for r in self.regions]
        return f"{'; '.join(parts)}; classicFrom {self.classic_from}"


def parse(text: str, source: str = REGIONS_FILE) -> Regions:
    """The file's text as :class:`Regions` (every rule checked)."""
    try:
        d = json.loads(text)
    except ValueError as exc:
        raise RegionsError(f"{source}: not JSON ({exc})") from None
    keys = {"version", "writtenBy", "mappedFileSizeCommitLog", "classicFrom", "regions"}
    if not isinstance(d, dict) or set(d) != keys:
        raise RegionsError(f"{source}: keys must be exactly {sorted(keys)}")
    if d["version"] != VERSION:
        raise RegionsError(f"{source}: version {d['version']!r} is not {VERSION}")
    try:
        regions = tuple(Region(str(x["kind"]), str(x["path"]), int(x["start"]), int(x["end"])) for x in d["regions"])
        out = Regions(int(d["mappedFileSizeCommitLog"]), int(d["classicFrom"]), regions)
    except (TypeError, KeyError, ValueError) as exc:
        raise RegionsError(f"{source}: malformed region ({exc})") from None
    try:
        out.check()
    except RegionsError as exc:
        raise RegionsError(f"{source}: {exc}") from None
    return out


def path_of(root: str | os.PathLike[str]) -> Path:
    return Path(root) / REGIONS_FILE


def write(root: str | os.PathLike[str], regions: Regions) -> Path:
    """Write the file atomically (tmp + fsync + rename + dir fsync)."""
    regions.check()
    p = path_of(root)
    atomic_write_text(p, regions.to_text())
    return p


def read(root: str | os.PathLike[str]) -> Optional[Regions]:
    """The store's regions, or None when the store has no regions file."""
    p = path_of(root)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse(text, str(p))

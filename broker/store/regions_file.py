"""``commitlogRegions.json``: the format of a store migrated from DLedger mode to Controller mode,
and every rule it must keep, in one place.

Rules (the shared spec, layout A "a second divide"):
- One file, ``<storePathRootDir>/commitlogRegions.json`` (:data:`REGIONS_FILE`), written by
  ``mqupgrade apply`` only (``upgrade.regions_file.write``: atomically), read by the broker
  (``commitlog_regions``), mqupgrade and the validator (``upgrade.validate.regions``). Its keys,
  and no others: ``version`` (1), ``writtenBy`` (a string, "mqupgrade"), ``mappedFileSizeCommitLog``,
  ``classicFrom``, ``regions``; each region's: ``kind``, ``path``, ``start``, ``end``.
- ``regions``: at least one, read-only, ascending by ``start``, non-overlapping, each
  ``0 <= start < end``, every ``end <= classicFrom``; ``kind`` is ``classic`` (20-digit
  commitlog files whose offsets lie in ``[start, end)``) or ``dledger`` (a DLedger member dir
  holding ``data/`` and ``index/``; ``end`` is the physical end of the last COMMITTED entry's
  message); ``path`` is relative to the store root, or absolute.
- ``classicFrom`` is the smallest multiple of ``mappedFileSizeCommitLog`` (> 0) at or above
  where the regions end: the first name of the writable classic commitlog.
- Two kinds of defect. A *structural* one (not JSON, not an object, a missing, unknown or
  mistyped field) means the file cannot be read as data at all: :func:`from_text` raises
  :class:`RegionsError` naming it (:class:`RegionsVersionError` when the document is of another
  version: a version-2 file is named by its version first, then by the field version 1 lacks). A broken
  *rule* (every other sentence above) leaves the data readable as written:
  :meth:`Regions.problems` returns every broken rule as one sentence each, in a fixed order (the
  version's first, then the file size, then region by region, then ``classicFrom``), so that each
  reader decides what a problem means: the broker refuses to start on the first, mqupgrade's
  :meth:`Regions.check` raises it, the validator reports them all. Reader-specific checks (the
  conf's file size, the directories and files named) stay with their reader.
- The text is deterministic for the same layout (:meth:`Regions.to_text`: fixed key order,
  2-space indent, trailing newline), so ``apply`` can tell "already written" from "somebody
  else's file" by comparing text; :meth:`Regions.to_text` and :func:`from_text` are inverses.

Theory of operation: plain frozen dataclasses; the structural pass walks the JSON document once
with typed getters; the rule pass walks the data once, appending sentences. No I/O: the readers
read the file and add their own context (the file name, the fix).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

REGIONS_FILE = "commitlogRegions.json"
VERSION = 1
WRITTEN_BY = "mqupgrade"
KINDS = ("classic", "dledger")
KEYS = ("version", "writtenBy", "mappedFileSizeCommitLog", "classicFrom", "regions")
REGION_KEYS = ("kind", "path", "start", "end")


class RegionsError(ValueError):
    """The file breaks the spec: a structural defect, or (from :meth:`Regions.check`) its first
    broken rule; one sentence naming it."""


class RegionsVersionError(RegionsError):
    """A document of another version that version 1's structure does not fit."""


def class_from(end: int, file_size: int) -> int:
    """The smallest multiple of ``file_size`` that is ``>= end``."""
    return -(-end // file_size) * file_size


def path_of(root: str | os.PathLike[str]) -> Path:
    return Path(root) / REGIONS_FILE


@dataclass(frozen=True)
class Region:
    kind: str  # classic | dledger
    path: str  # relative to storePathRootDir, or absolute
    start: int
    end: int

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "path": self.path, "start": self.start, "end": self.end}

    def resolved(self, root: str | os.PathLike[str]) -> Region:
        """This region with its path made absolute against the store root."""
        p = Path(self.path)
        return replace(self, path=str(p if p.is_absolute() else Path(root) / p))


@dataclass(frozen=True)
class Regions:
    mapped_file_size_commit_log: int
    classic_from: int
    regions: tuple[Region, ...]
    version: int = VERSION

    @classmethod
    def of(cls, regions: list[Region], file_size: int) -> Regions:
        """The layout whose ``classicFrom`` follows the last region (checked)."""
        r = cls(file_size, class_from(regions[-1].end, file_size), tuple(regions))
        r.check()
        return r

    def resolved(self, root: str | os.PathLike[str]) -> Regions:
        """The same layout with every region's path absolute (against the store root)."""
        return replace(self, regions=tuple(r.resolved(root) for r in self.regions))

    def problems(self) -> list[str]:
        """Every rule of the spec this layout breaks, one sentence each (module rules: order)."""
        out: list[str] = []
        if self.version != VERSION:
            out.append(f"unknown version {self.version} (known: {VERSION})")
        fs, cf = self.mapped_file_size_commit_log, self.classic_from
        if fs <= 0:
            out.append(f"mappedFileSizeCommitLog is {fs}, not positive")
        if not self.regions:
            out.append("regions is [], not a non-empty list (a migrated store keeps at least its DLedger region)")
        prev: Region | None = None
        for i, r in enumerate(self.regions):
            if r.kind not in KINDS:
                out.append(f"regions[{i}] has unknown kind {r.kind!r} (known: {', '.join(KINDS)})")
            if not r.path:
                out.append(f"regions[{i}] ({r.kind}) has an empty path")
            if r.start < 0:
                out.append(f"regions[{i}] ({r.kind}) starts at {r.start}, below 0")
            if r.end < r.start:
                out.append(f"regions[{i}] ({r.kind}) ends at {r.end}, before its start {r.start}")
            elif r.end == r.start:
                out.append(f"regions[{i}] ({r.kind}) [{r.start}, {r.end}) is empty")
            if prev is not None and r.start < prev.end:
                out.append(f"regions[{i}] ({r.kind}, [{r.start}, {r.end})) overlaps or precedes regions[{i - 1}] "
                           f"({prev.kind}, [{prev.start}, {prev.end})) (regions ascend without overlap)")
            if r.end > cf:
                out.append(f"regions[{i}] ({r.kind}) ends at {r.end}, above classicFrom {cf}")
            prev = r
        if fs > 0 and self.regions:
            end = max(r.end for r in self.regions)
            want = class_from(end, fs)
            if cf % fs:
                out.append(f"classicFrom {cf} is not a multiple of mappedFileSizeCommitLog {fs} (the writable "
                           f"commitlog's first file name; expected {want})")
            elif cf != want:
                out.append(f"classicFrom {cf} is not the first file boundary at or above the regions' end {end} "
                           f"(expected {want})")
        return out

    def check(self) -> None:
        """Raise :class:`RegionsError` naming the first broken rule, if any."""
        found = self.problems()
        if found:
            raise RegionsError(found[0])

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "writtenBy": WRITTEN_BY,
                "mappedFileSizeCommitLog": self.mapped_file_size_commit_log, "classicFrom": self.classic_from,
                "regions": [r.to_dict() for r in self.regions]}

    def to_text(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def describe(self) -> str:
        parts = [f"{r.kind} {r.path} [{r.start}, {r.end})" for r in self.regions]
        return f"{'; '.join(parts)}; classicFrom {self.classic_from}"


# --- the document -> data (structural defects) -------------------------------------------------
def from_text(text: str) -> Regions:
    """The file's text as :class:`Regions`, read as written (rules unchecked: :meth:`Regions.problems`)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise RegionsError(f"not valid JSON ({exc})") from None
    return from_document(doc)


def from_document(doc: object) -> Regions:
    """The parsed JSON document as :class:`Regions` (structural defects raise, module rules)."""
    if not isinstance(doc, dict):
        raise RegionsError("not a JSON object")
    try:
        return _regions(doc)
    except RegionsError as exc:
        version = doc.get("version")
        if version != VERSION:
            named = "no version" if version is None else f"unknown version {version!r}"
            raise RegionsVersionError(f"{named} (known: {VERSION}), not readable as version {VERSION}: {exc}") from None
        raise


def _field(obj: Mapping[str, object], key: str, where: str) -> object:
    if key not in obj:
        raise RegionsError(f"field {key!r}{where} is missing")
    return obj[key]


def _int(obj: Mapping[str, object], key: str, where: str = "") -> int:
    value = _field(obj, key, where)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RegionsError(f"field {key!r}{where} is {value!r}, not an integer")
    return value


def _str(obj: Mapping[str, object], key: str, where: str = "") -> str:
    value = _field(obj, key, where)
    if not isinstance(value, str):
        raise RegionsError(f"field {key!r}{where} is {value!r}, not a string")
    return value


def _known_keys(obj: Mapping[str, object], keys: tuple[str, ...], where: str = "") -> None:
    unknown = sorted(set(obj) - set(keys))
    if unknown:
        raise RegionsError(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}{where} "
                           f"(the spec's: {', '.join(keys)})")


def _regions(doc: Mapping[str, object]) -> Regions:
    version = _int(doc, "version")
    _known_keys(doc, KEYS)
    _str(doc, "writtenBy")
    size, classic_from = _int(doc, "mappedFileSizeCommitLog"), _int(doc, "classicFrom")
    raw = _field(doc, "regions", "")
    if not isinstance(raw, list):
        raise RegionsError(f"field 'regions' is {raw!r}, not a list")
    out: list[Region] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise RegionsError(f"regions[{i}] is {item!r}, not an object")
        where = f" of regions[{i}]"
        _known_keys(item, REGION_KEYS, where)
        out.append(Region(_str(item, "kind", where), _str(item, "path", where), _int(item, "start", where),
                          _int(item, "end", where)))
    return Regions(size, classic_from, tuple(out), version)

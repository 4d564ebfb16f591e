"""``commitlogRegions.json`` as mqupgrade writes and reads it.

Rules:
- The format and every rule of it are :mod:`broker.store.regions_file`'s (the broker is the
  reader that matters; upgrade may import broker, never the reverse): :class:`Region`,
  :class:`Regions` (``check()`` raises the first broken rule, ``to_text()`` is deterministic),
  :func:`class_from`, :func:`path_of`, :data:`REGIONS_FILE`, :class:`RegionsError` are
  re-exported from there.
- mqupgrade writes the file atomically, ``.upgrade-tmp`` + fsync + rename + directory fsync
  (:func:`upgrade.fileops.atomic_write_text`), and only a layout that breaks no rule; it reads
  a file back as written only when it breaks no rule either (:func:`parse` raises the first
  defect, structural or a rule, prefixed with the file's name).

Theory of operation: :func:`parse` = the broker module's ``from_text`` + ``check``;
:func:`write` and :func:`read` put it on and off a store.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from broker.store.regions_file import (KINDS, REGIONS_FILE, VERSION, WRITTEN_BY, Region, Regions, RegionsError,
                                       class_from, from_text, path_of)
from upgrade.fileops import atomic_write_text

__all__ = ["KINDS", "REGIONS_FILE", "VERSION", "WRITTEN_BY", "Region", "Regions", "RegionsError", "class_from",
           "parse", "path_of", "write", "read"]


def parse(text: str, source: str = REGIONS_FILE) -> Regions:
    """The file's text as :class:`Regions` (every rule checked)."""
    try:
        out = from_text(text)
        out.check()
    except RegionsError as exc:
        raise RegionsError(f"{source}: {exc}") from None
    return out


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

"""The DLedger index as a position oracle for DLedger data ranges.

Rules:
- Index unit *u* (``>iqiqq``: magic, pos, size, index, term) sits at byte ``u*32`` of the index
  file list; only units ``<= committedIndex`` are read (committed prefix).
- The index is a hint, never trusted blindly: :func:`index_starts` returns entry positions for
  a byte range only when they start exactly at the chained first position, tile without gap
  or overlap (``pos[i+1] == pos[i] + size[i]``) and every data header there has magic 1, the
  same size and a pos field equal to its offset (checked here, or by the caller from the block
  it reads anyway: ``verify=False``). Otherwise the caller walks the data itself
  (and check 4 compares every unit with its entry anyway).

Theory of operation: two binary searches over units (a few 32-byte reads) bound the range,
one ``np.fromfile`` per index file reads the units in it, numpy verifies the tiling; this
replaces the per-entry Python size walk in the DLedger region.
"""
from __future__ import annotations

import numpy as np

from upgrade.validate import records as rec
from upgrade.validate.layout import FileRef, read_index_unit
from upgrade.validate.plan import NodeContext
from upgrade.validate.summary import IDX_UNIT


def unit_at_or_after(ctx: NodeContext, at: int) -> int | None:
    """Smallest committed unit number whose pos is >= ``at`` (``committed_index + 1`` if none)."""
    n = ctx.committed_index + 1
    if not ctx.index or n <= 0:
        return None
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        u = read_index_unit(ctx.index, mid)
        if u is None or u[0] != rec.DL_MAGIC:
            return None
        if u[1] < at:
            lo = mid + 1
        else:
            hi = mid
    return lo


def read_units(index: tuple[FileRef, ...], first: int, last: int) -> np.ndarray:
    """Units ``first .. last-1`` as a structured array (``summary.IDX_UNIT``)."""
    parts = []
    for f in index:
        lo = max(first * 32, f.start)
        hi = min(last * 32, f.end)
        if hi > lo:
            parts.append(np.fromfile(f.path, dtype=IDX_UNIT, count=(hi - lo) // 32, offset=lo - f.start))
    if not parts:
        return np.zeros(0, dtype=IDX_UNIT)
    return parts[0] if len(parts) == 1 else np.concatenate(parts).astype(IDX_UNIT)


def first_entry(ctx: NodeContext, at: int) -> int | None:
    """Absolute pos of the first committed entry at or after ``at``."""
    u = unit_at_or_after(ctx, at)
    if u is None or u > ctx.committed_index:
        return None
    unit = read_index_unit(ctx.index, u)
    return None if unit is None else unit[1]


def index_starts(ctx: NodeContext, a: np.ndarray, abs0: int, p: int, hi: int,
                 verify: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """(starts, sizes) in buffer positions of the entries starting in [p, hi), or None.

    ``verify=False`` leaves the data-header comparison (magic, size, pos field) to the caller,
    which reads those headers anyway (``tasks.scan_dl`` does, in the same block read).
    """
    first = unit_at_or_after(ctx, abs0 + p)
    last = unit_at_or_after(ctx, abs0 + hi)
    if first is None or last is None or last <= first:
        return None
    units = read_units(ctx.index, first, last)
    pos = units["pos"].astype(np.int64) - abs0
    size = units["size"].astype(np.int64)
    if len(pos) != last - first or pos[0] != p or (units["magic"] != rec.DL_MAGIC).any():
        return None
    if (np.diff(pos) != size[:-1]).any() or (size <= rec.DL_HEADER).any() or pos[-1] + size[-1] > len(a):
        return None
    if not verify:
        return pos, size
    if (rec.gather(a, pos, 4) != rec.DL_MAGIC).any() or (rec.gather(a, pos + 4, 4) != size).any():
        return None
    if (rec.gather(a, pos + rec.DL_POS_OFFSET, 8) != pos + abs0).any():
        return None
    return pos, size

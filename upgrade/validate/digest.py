"""Order-free digests that let the CQ and DLedger-index checks skip reading messages twice.

Rules:
- Check 5 (every ConsumeQueue unit matches its message) and check 4's "every index unit matches
  its entry" are decided by comparing two multisets: the tuples the *data scan* sees and the
  tuples the *unit scan* reads. Both sides reduce their tuples to per-bucket digests
  ``(count, sum of mix64(tuple) mod 2**64)``; the driver compares the digests bucket by bucket.
- CQ tuples are ``(queueOffset, phyOffset, size, tagsCode)``, keyed by ``(topic, queueId)`` and
  bucketed by ``queueOffset // CQ_BUCKET``. The data side uses the message's own QUEUEOFFSET,
  offset, TOTALSIZE and the tags code of its ``TAGS`` property (Java ``String.hashCode``) for
  every dispatchable message (not PREPARED/ROLLBACK, not a barrier); the unit side uses the
  unit's index, offset, size and tags code for every live unit inside the committed prefix.
  Messages of ``SCHEDULE_TOPIC_XXXX`` (tags code = delivery time) and CQs of that topic or of the
  barrier topic never use digests: those CQ ranges always run the detailed per-unit check.
- Index tuples are ``(magic, pos, size, index, term)``, bucketed by ``index // IDX_BUCKET``: the
  data side reads them from every entry header it owns, the index side from its units.
- A digest match proves (up to a 2**-64 collision) that every unit of the bucket points at a
  message/entry with exactly its fields. A mismatch proves nothing by itself: the driver then
  re-runs the *detailed* per-unit check (the shared codec) on every unit range overlapping the
  bucket, which locates and words each bad unit exactly as before. Differences in coverage (a CQ
  behind its commitlog, expired files) only cost a detailed rescan of the edge buckets.
- Tags codes are computed vectorised when the ``TAGS`` key and its ASCII value lie in the first
  PROPS_WINDOW bytes of the properties (this project's producers write it first, Apache 4.9.8
  after ``KEYS``); any other record goes through the same per-blob parse the detailed check's
  fast path uses (``cq.tags_code_of``).

Theory of operation: numpy only - one window ``take`` per record for the tags, a splitmix64
finaliser over the tuple words, ``lexsort`` + ``add.reduceat`` per key. A digest row is
``[bucket, count, sum]`` (unit side) or ``[topic, queueId, bucket, count, sum]`` (data side).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

import numpy as np

CQ_BUCKET = 4096  # queue offsets per digest bucket
IDX_BUCKET = 1 << 16  # entry indexes per digest bucket
PROPS_WINDOW = 112  # properties bytes searched for the TAGS key vectorised

_U64 = np.uint64
_M1, _M2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_K = [_U64(k) for k in (0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3)]
_TAGS = np.frombuffer(b"TAGS\x01", np.uint8)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _U64(30))) * _M1
        x = (x ^ (x >> _U64(27))) * _M2
        return x ^ (x >> _U64(31))


def tuple_hash(*cols: np.ndarray) -> np.ndarray:
    """mix64 of a keyed linear combination of integer columns (taken as 64-bit two's complement).

    Each column is multiplied by its own odd constant (a bijection mod 2**64, so a change of one
    field always changes the sum) before the non-linear finaliser spreads it over all bits.
    """
    h = np.zeros(len(cols[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k, c in zip(_K, cols):
            h += np.asarray(c).astype(np.int64).view(np.uint64) * k
    return mix64(h)


def _reduce(keys: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique keys, count per key, wrapping uint64 sum per key); keys are int64 rows or 1-D."""
    order = np.argsort(keys, kind="stable") if keys.ndim == 1 else np.lexsort(keys.T[::-1])
    k, hv = keys[order], h[order]
    new = np.ones(len(k), dtype=bool)
    if len(k) > 1:
        new[1:] = (k[1:] != k[:-1]) if k.ndim == 1 else (k[1:] != k[:-1]).any(axis=1)
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(k)))
    sums = np.add.reduceat(hv, starts) if len(hv) else np.zeros(0, _U64)
    return k[starts], counts, sums


def unit_digest(buckets: np.ndarray, h: np.ndarray) -> list[list[int]]:
    """``[[bucket, count, sum], ...]`` for one queue (or the index)."""
    if len(h) == 0:
        return []
    k, c, s = _reduce(buckets.astype(np.int64), h)
    return [[b, n, v] for b, n, v in zip(k.tolist(), c.tolist(), s.tolist())]


def keyed_digest(keys: np.ndarray, buckets: np.ndarray, h: np.ndarray) -> list[tuple[int, int, int, int]]:
    """``[(key, bucket, count, sum), ...]`` for many queues (``keys``: int64 per tuple)."""
    if len(h) == 0:
        return []
    k, c, s = _reduce(np.stack([keys.astype(np.int64), buckets.astype(np.int64)], axis=1), h)
    return [(a, b, n, v) for (a, b), n, v in zip(k.tolist(), c.tolist(), s.tolist())]


def tags_codes(mm: Any, props_off: np.ndarray, props_len: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Tags code (Java hash of the ``TAGS`` property, 0 when absent) of each properties blob.

    ``window`` holds the first ``PROPS_WINDOW`` bytes of each blob (``MessageFields.props_window``;
    bytes past a blob's end are ignored). Vectorised like ``cq.tags_code_of``: the first
    ``TAGS\x01`` at the blob start or after a ``\x02`` (candidates are the ``T`` bytes, checked
    in bulk); the tag ends at the next ``\x02`` or the blob end and is hashed column by column
    (Horner mod 2**32) while it is ASCII. A blob with no TAGS key inside the window is 0 when the
    window holds all of it. Anything else - a non-ASCII tag, a tag or key past the window - goes
    through the per-blob parse.
    """
    from upgrade.validate.cq import tags_code_of  # the per-blob parse (the detailed path's)

    n = len(props_off)
    out = np.zeros(n, dtype=np.int64)
    if n == 0:
        return out
    plen = props_len.astype(np.int64)
    width = window.shape[1]
    flat = np.ascontiguousarray(window).reshape(-1)
    cr, cc = np.nonzero(window[:, :width - 4] == _TAGS[0])
    at = cr * width + cc
    hit = (cc + 5 <= plen[cr]) & (np.where(cc > 0, flat[np.maximum(at - 1, 0)], 2) == 2)
    for k in range(1, 5):
        hit &= flat[at + k] == _TAGS[k]
    rows, first = np.unique(cr[hit], return_index=True)  # nonzero is row-major: first hit per row
    start = np.full(n, -1, dtype=np.int64)
    start[rows] = cc[hit][first] + 5
    found = start >= 0
    absent = ~found & (plen <= width)  # the whole blob seen, no TAGS key: code 0
    active = found.copy()
    fast = found | absent
    room = plen - start
    base = np.arange(n, dtype=np.int64) * width
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(width):
            if not active.any():
                break
            col = start + j
            c = flat[base + np.clip(col, 0, width - 1)]
            ended = active & ((room <= j) | (c == 2))
            active &= ~ended
            lost = active & ((col >= width) | (c >= 0x80))  # past the window, or non-ASCII (UTF-16 units)
            fast &= ~lost
            active &= ~lost
            h = np.where(active, h * _U64(31) + c, h)
    h &= _U64(0xFFFFFFFF)
    sel = found & fast
    out[sel] = h[sel].astype(np.int64) - np.where(h[sel] >= _U64(1 << 31), 1 << 32, 0)
    slow = np.flatnonzero(~fast & (plen > 0))
    for i, o, ln in zip(slow.tolist(), props_off[slow].tolist(), plen[slow].tolist()):
        out[i] = tags_code_of(bytes(mm[o:o + ln]))
    return out


def merge_keyed(rows: Iterable[Iterable[Any]]) -> dict[tuple, list[int]]:
    """Add up digest rows ``[*key, bucket, count, sum]`` by ``(*key, bucket)``: ``[count, sum]``."""
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        *key, count, total = row
        acc = out[tuple(key)]
        acc[0] += count
        acc[1] = (acc[1] + total) & 0xFFFFFFFFFFFFFFFF
    return out


def mismatched(left: dict[tuple, list[int]], right: dict[tuple, list[int]]) -> set[tuple]:
    """Keys whose ``[count, sum]`` differ (a key missing on one side counts as ``[0, 0]``)."""
    return {k for k in set(left) | set(right) if left.get(k, [0, 0]) != right.get(k, [0, 0])}


def detail_rescans(plan: Any, summaries: dict[int, dict]) -> list[Any]:
    """CQ and index ranges (as ``detail=True`` ScanRanges) whose buckets' digests disagree.

    Call after chaining (``checks.reconcile``): discarded data summaries do not count. A unit
    range is rescanned when its span of unit numbers overlaps a mismatched bucket of its queue
    (or of the index); a bucket no unit range covers (e.g. a CQ behind its commitlog) asks for
    nothing - the coverage checks in ``checks`` speak for it.
    """
    ranges = {r.rid: r for r in plan.ranges}
    out = []
    for node in plan.contexts:
        mine = [s for s in summaries.values() if s["node"] == node]
        data = [s for s in mine if s["kind"] in ("old", "new", "dl") and not s.get("discarded")]
        cq = [s for s in mine if s["kind"] == "cq" and s.get("digest") is not None]
        idx = [s for s in mine if s["kind"] == "idx" and s.get("digest") is not None]
        bad_cq = mismatched(merge_keyed(row for s in data for row in s["cq_digest"]),
                            merge_keyed([s["topic"], s["queue_id"], *row] for s in cq for row in s["digest"]))
        bad_idx = mismatched(merge_keyed(row for s in data for row in s["idx_digest"]),
                             merge_keyed(row for s in idx for row in s["digest"]))
        for s in cq:
            lo, hi = s["start"] // 20 // CQ_BUCKET, (s["end"] // 20 - 1) // CQ_BUCKET
            if any((s["topic"], s["queue_id"], b) in bad_cq for b in range(lo, hi + 1)):
                out.append(ranges[s["rid"]].detailed())
        for s in idx:
            lo, hi = s["start"] // 32 // IDX_BUCKET, (s["end"] // 32 - 1) // IDX_BUCKET
            if any((b,) in bad_idx for b in range(lo, hi + 1)):
                out.append(ranges[s["rid"]].detailed())
    return out

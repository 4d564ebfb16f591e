"""ConsumeQueue range task: every unit must point at a message with its size, topic, queue,
queue offset and tags code (check 5).

Rules:
- Units are read vectorised (``>qiq``); an all-zero unit ends the queue, ``(0, 0x7FFFFFFF, 0)``
  is RocketMQ's pre-blank fill; an empty unit followed by live ones is a hole.
- A unit's offset is routed like ``DLedgerCommitLog.getData``: below the divide to the old
  commitlog, at or above it to the DLedger data files; units at or beyond the committed prefix
  are counted (``beyond_committed``) and not read (the broker may be running); in a classic
  store so are units at or past the dispatch frontier taken when planning (``ctx.vouched``).
- On a store migrated to Controller mode the route has four stops: the old classic region (below
  the DLedger region's start), the DLedger region (up to its ``end``), the gap up to
  ``classicFrom`` (a unit there is a violation: nothing is stored there) and the writable classic
  region (units at or past its dispatch frontier, ``ctx.vouched``, are counted, not read).
- Digest path (default): units are reduced to per-bucket digests (``digest``) without reading
  any message; the driver compares them with the data scan's and sends ranges whose buckets
  differ back with ``detail=True``. The detailed path below decides and words every violation.
- Detailed fast path: header fields of all pointed-at messages are gathered with numpy and compared at
  once; tags codes come from the ``TAGS`` property hashed with Java's ``String.hashCode``
  (cached per tag). Any unit that fails the fast path - and every unit of ``SCHEDULE_TOPIC_XXXX``,
  whose tags code is a delivery time - is re-checked with the shared codec
  (``check_message_and_return_size``), which is the authority and words the violation.

Theory of operation: group live units by target file with ``searchsorted``, map each file
once, screen, then loop in Python only over units that need the codec.
"""
from __future__ import annotations

import numpy as np

from broker.store import message as codec
from broker.store.java_hash import java_string_hash
from upgrade.validate import digest
from upgrade.validate import records as rec
from upgrade.validate.layout import FileRef
from upgrade.validate.plan import NodeContext, ScanRange
from upgrade.validate.summary import BARRIER_TOPIC, CQ_UNIT, TX_SKIP, Mapped, Summary, new_summary

_TAGS_AT_START = b"TAGS\x01"
_TAGS_INSIDE = b"\x02TAGS\x01"
_tags_cache: dict[bytes, int] = {}
_ALWAYS_DETAILED = (codec.RMQ_SYS_SCHEDULE_TOPIC, BARRIER_TOPIC.decode())


def tags_code_of(props: bytes) -> int:
    """Java hash of the TAGS property in a raw properties blob (0 when absent or empty)."""
    if props.startswith(_TAGS_AT_START):
        i = 5
    else:
        j = props.find(_TAGS_INSIDE)
        if j < 0:
            return 0
        i = j + 6
    e = props.find(b"\x02", i)
    raw = props[i:] if e < 0 else props[i:e]
    code = _tags_cache.get(raw)
    if code is None:
        code = java_string_hash(raw.decode("utf-8", "replace")) if raw else 0
        if len(_tags_cache) < 100_000:
            _tags_cache[raw] = code
    return code


def _slow(s: Summary, r: ScanRange, dm: Mapped, f: FileRef, o: int, qo: int, size: int, tags: int, where: int,
          queue: str) -> None:
    """The codec's verdict on one unit; records a violation or counts a good unit."""
    p = o - f.start
    req = codec.check_message_and_return_size(dm.mm, p, False)
    if not req.success or req.msg_size <= 0:
        s.violation("consumequeue", where, f"unit at queue offset {qo} points at {o} ({f.name}+{p}): no valid message "
                    f"there ({codec.explain_invalid_record(dm.mm, p)})", queue=queue)
        return
    diffs = []
    if req.msg_size != size:
        diffs.append(f"size {size} != message size {req.msg_size}")
    if req.topic != r.topic:
        diffs.append(f"topic {r.topic!r} != message topic {req.topic!r}")
    if req.queue_id != r.queue_id:
        diffs.append(f"queue {r.queue_id} != message queue {req.queue_id}")
    if req.tags_code != tags:
        diffs.append(f"tags code {tags} != message tags code {req.tags_code}")
    if req.consume_queue_offset != qo:
        diffs.append(f"message queue offset is {req.consume_queue_offset}")
    if (req.sys_flag & codec.TRANSACTION_ROLLBACK_TYPE) in TX_SKIP or req.topic.encode() == BARRIER_TOPIC:
        diffs.append("message is transactional PREPARED/ROLLBACK or a barrier and must not be dispatched")
    if diffs:
        s.violation("consumequeue", where, f"unit at queue offset {qo} -> {o}: " + "; ".join(diffs), queue=queue)
    else:
        s["messages"] += 1
        s["screen_disagreements"] += 0 if r.topic == codec.RMQ_SYS_SCHEDULE_TOPIC else 1


def _fast(dm: Mapped, r: ScanRange, p: np.ndarray, size: np.ndarray, qo: np.ndarray, tags: np.ndarray) -> np.ndarray:
    """Vectorised screen of the messages at file positions ``p``: True where everything matches."""
    f = rec.message_fields(dm.a, p, dm.limit, check_crc=False)
    topic = r.topic.encode("utf-8")
    ok = f.parsed & (f.total == size) & (f.queue_id == r.queue_id) & (f.queue_offset == qo)
    ok &= (f.topic_len == len(topic)) & ~np.isin(f.sys_flag & codec.TRANSACTION_ROLLBACK_TYPE, TX_SKIP)
    rows = np.flatnonzero(ok)
    if len(rows) and len(topic):
        got = np.take(dm.a, f.topic_off[rows][:, None] + np.arange(len(topic)))
        ok[rows] &= (got == np.frombuffer(topic, np.uint8)).all(axis=1)
    if r.topic == codec.RMQ_SYS_SCHEDULE_TOPIC or topic == BARRIER_TOPIC:
        ok[:] = False  # delivery-time tags codes and barriers: the codec decides
        return ok
    rows = np.flatnonzero(ok)
    if len(rows):
        poff = f.topic_off[rows] + f.topic_len[rows]
        mm = dm.mm  # per-blob parse measured faster than a numpy window search (0.7 vs 1.7 us/unit)
        codes = np.array([tags_code_of(mm[o + 2:o + 2 + n]) if n > 0 else 0
                          for o, n in zip(poff.tolist(), rec.gather(dm.a, poff, 2).tolist())], dtype=np.int64)
        ok[rows] &= codes == tags[rows]
    return ok


def region_name(ctx: NodeContext, offset: int) -> str:
    """Which region of a (migrated) store holds ``offset``, in words."""
    if ctx.classic_from is not None and offset >= ctx.classic_from:
        return "writable classic region"
    if ctx.gap_start is not None and offset >= ctx.gap_start:
        return "gap below classicFrom"
    if ctx.divided is not None and offset >= ctx.divided:
        return "DLedger region"
    return "classic region"


def scan_cq(r: ScanRange) -> Summary:
    s = new_summary(r)
    queue = f"{r.topic}:{r.queue_id}"
    s["topic"], s["queue_id"] = r.topic, r.queue_id
    s["prefill"] = s["beyond_committed"] = 0
    m = Mapped(r.path, r.start)
    opened: dict[str, Mapped] = {}
    try:
        lo, hi = r.start - m.base, r.end - m.base
        units = np.frombuffer(m.mm, dtype=CQ_UNIT, count=(hi - lo) // 20, offset=lo).copy()
        q0 = r.abs_start // 20
        off = units["off"].astype(np.int64)
        size = units["size"].astype(np.int64)
        tags = units["tags"].astype(np.int64)
        zero = (off == 0) & (size == 0) & (tags == 0)
        prefill = (off == 0) & (size == 0x7FFFFFFF) & (tags == 0)
        live = ~zero & ~prefill
        s["prefill"] = int(prefill.sum())
        nz = np.flatnonzero(live)
        if len(nz) == 0:
            return s
        last = int(nz[-1])
        for i in np.flatnonzero(zero[:last] | (prefill[:last] & (np.arange(last) > int(nz[0])))).tolist():
            s.violation("consumequeue", r.abs_start + 20 * i,
                        f"hole at queue offset {q0 + i} (empty unit before unit {q0 + last})", queue=queue)
        s["first_index"], s["last_index"] = q0 + int(nz[0]), q0 + last
        ctx = r.ctx
        o = off[nz]
        new = (o >= ctx.divided) if ctx.divided is not None else np.zeros(len(nz), dtype=bool)
        gap = np.zeros(len(nz), dtype=bool)
        upper = np.zeros(len(nz), dtype=bool)
        if ctx.classic_from is not None:  # migrated: old | DLedger | gap | writable classic region
            upper = o >= ctx.classic_from
            gap = ~upper & (o >= (ctx.gap_start if ctx.gap_start is not None else ctx.classic_from))
            new &= ~upper & ~gap
            beyond = upper & (o >= ctx.vouched) if ctx.vouched is not None else np.zeros(len(nz), dtype=bool)
        else:
            beyond = new & (o >= ctx.committed_pos) if ctx.committed_pos is not None else np.zeros(len(nz), dtype=bool)
            if ctx.vouched is not None:  # a live classic store: units dispatched after planning
                beyond |= o >= ctx.vouched
        s["beyond_committed"] = int(beyond.sum())
        if not r.detail and r.topic not in _ALWAYS_DETAILED:  # the data scan's digest decides
            inside = nz[~beyond]
            qo = q0 + inside
            s["digest"] = digest.unit_digest(qo // digest.CQ_BUCKET,
                                             digest.tuple_hash(qo, off[inside], size[inside], tags[inside]))
            s["records"] = s["messages"] = len(inside)
            return s
        placed = np.zeros(len(nz), dtype=bool)
        below = ~new & ~gap & ~upper & ~beyond
        for files, region in ((ctx.old, below), (ctx.data, new & ~beyond), (ctx.new, upper & ~beyond)):
            if not files:
                continue
            starts = np.array([f.start for f in files], dtype=np.int64)
            ends = np.array([f.end for f in files], dtype=np.int64)
            fi = np.searchsorted(starts, o, side="right") - 1
            inside = region & (fi >= 0) & (o < ends[np.maximum(fi, 0)])
            for k in np.unique(fi[inside]).tolist():
                sel = np.flatnonzero(inside & (fi == k))
                f = files[k]
                dm = opened.get(f.path)
                if dm is None:
                    dm = opened[f.path] = Mapped(f.path, 0)
                idx = nz[sel]
                good = _fast(dm, r, o[sel] - f.start, size[idx], q0 + idx, tags[idx])
                s["records"] += len(sel)
                s["messages"] += int(good.sum())
                for j in np.flatnonzero(~good).tolist():
                    i = int(idx[j])
                    _slow(s, r, dm, f, int(off[i]), q0 + i, int(size[i]), int(tags[i]), r.abs_start + 20 * i, queue)
                placed[sel] = True
        for j in np.flatnonzero(gap).tolist():
            i = int(nz[j])
            s.violation("consumequeue", r.abs_start + 20 * i,
                        f"unit at queue offset {q0 + i} points at {int(off[i])}, into the gap [{ctx.gap_start}, "
                        f"{ctx.classic_from}) between the last read-only region and the writable classic region "
                        f"(classicFrom): nothing is stored there", queue=queue)
        for j in np.flatnonzero(~placed & ~beyond & ~gap).tolist():
            i = int(nz[j])
            where = "" if ctx.classic_from is None else f" of the {region_name(ctx, int(off[i]))}"
            s.violation("consumequeue", r.abs_start + 20 * i,
                        f"unit at queue offset {q0 + i} points at {int(off[i])}, in no commitlog file{where}",
                        queue=queue)
    finally:
        for dm in opened.values():
            dm.close()
        m.close()
    return s

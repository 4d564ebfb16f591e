"""Per-range tasks (run on executors): parse the records a range owns, return a small summary.

Rules:
- A task mmaps its own file read-only from the page-aligned range start to the file end (so it
  can finish the last record it owns) and never writes. It returns one summary dict: counts,
  the first/next record positions (for chaining ranges on the driver), per-queue runs of queue
  offsets, entry index/term bounds, a hash for replica comparison, and violation rows
  ``{check, node, file, offset, file_offset, queue, space, message}`` (at most MAX_VIOLATIONS per range,
  the rest counted). Never per-record rows.
- Offsets in summaries are absolute (physical offset, index-space or CQ-space bytes).
- A classic store may be written while we read it (committed point = the dispatch frontier
  ``ctx.vouched``): messages at or past it are counted as ``undispatched`` and kept out of the
  queue runs and CQ digests; an invalid record in the last file, past the frontier, followed only
  by zeros is an unfinished write - a ``tail`` note and the file's write end, not a violation -
  while one that more data follows stays a violation. A range of the last file that found any
  violation is scanned once more after ``LIVE_RETRY_SECONDS`` (the writer may have been inside
  that very record) and the second result counts.
- Classic ranges (old, and ``new``: the writable classic region of a migrated store) report which
  of the epoch file's start offsets (``ctx.epoch_offsets``) are record starts they own
  (``epoch_starts``): the driver checks the epoch file with them, never reading records itself.
- Data ranges also emit the digests of ``digest`` (CQ tuples of every dispatchable message,
  index tuples of every entry); CQ and index ranges run their detailed per-unit check only when
  sent back with ``detail=True``.
- Validity comes from the shared codecs (see ``records``); PHY_POS, pos fields, index/term
  continuity inside the range and CQ-unit matching are checked here; continuity across ranges,
  files, the divide and replicas is the driver's job (``checks``).

Theory of operation: find the first owned record (file start, a forced start from the driver,
the DLedger index, or header sync), walk sizes to collect record starts, screen all headers at
once with numpy, and summarise. ConsumeQueue ranges are handled by ``cq``.
"""
from __future__ import annotations

import hashlib
import struct
import time
from typing import Any

import numpy as np

from broker.store import message as codec
from upgrade.validate import digest, dlindex
from upgrade.validate import records as rec
from upgrade.validate.cq import scan_cq
from upgrade.validate.plan import ScanRange
from upgrade.validate.summary import BARRIER_TOPIC, CHECK_FOR_KIND, IDX_UNIT, TX_SKIP, Mapped, Summary, new_summary

SCHEDULE_TOPIC = codec.RMQ_SYS_SCHEDULE_TOPIC.encode()
LIVE_RETRY_SECONDS = 0.5


def _hash(m: Mapped, r: ScanRange, s: Summary) -> None:
    if r.hash_limit is None:
        return
    lo = r.start - m.base
    hi = min(r.end, r.hash_limit - r.file_start) - m.base
    if hi <= lo:
        return
    h = hashlib.sha1()
    h.update(memoryview(m.mm)[lo:hi])
    s["hash"] = [r.abs_start, r.abs_start + (hi - lo), h.hexdigest()]


def _messages(m: Mapped, r: ScanRange, s: Summary, starts: np.ndarray, ends: np.ndarray | int,
              phy_expect: np.ndarray, phy_check: str, abs_of: Any, head: np.ndarray | None = None) -> None:
    """Screen the messages at buffer positions ``starts``; count, run-summarise, report."""
    if len(starts) == 0:
        return
    f = rec.message_fields(m.a, starts, ends, r.ctx.check_crc, m.mm, head)
    valid = f.valid.copy()
    parsed = f.parsed.copy()
    for i in np.flatnonzero(~valid).tolist():
        p = int(starts[i])
        ok, why = rec.codec_verdict(m.mm, p, r.ctx.check_crc)
        if ok:  # the codec is the authority
            valid[i] = parsed[i] = True
            s["screen_disagreements"] += 1
            continue
        if i == len(starts) - 1 and _unfinished_tail(m, r, s, p, f"invalid message: {why}"):
            parsed[i] = False
            continue
        s.violation("structure", abs_of(p), f"invalid message: {why}")
        parsed[i] = rec.codec_verdict(m.mm, p, False)[0]  # a CRC-only failure keeps a usable header
    s["messages"] += int(parsed.sum())
    bad_phy = parsed & (f.phy != phy_expect)
    for i in np.flatnonzero(bad_phy).tolist():
        s.violation(phy_check, abs_of(int(starts[i])),
                    f"PHY_POS field is {int(f.phy[i])}, expected {int(phy_expect[i])}")
    rows = np.flatnonzero(parsed)
    tids, names = rec.topic_ids(m.a, m.mm, f.topic_off[rows], f.topic_len[rows], f.tail[rows],
                                f.props_col[rows] - 2 - f.topic_len[rows])
    tx = (f.sys_flag[rows] & codec.TRANSACTION_ROLLBACK_TYPE)
    skip = np.isin(tx, TX_SKIP)
    barrier = np.isin(tids, [i for i, t in enumerate(names) if t == BARRIER_TOPIC])
    s["tx_skipped"] += int(skip.sum())
    s["barriers"] += int((barrier & ~skip).sum())
    disp = ~skip & ~barrier
    offs = abs_of(starts[rows])
    if r.ctx.vouched is not None:  # past the dispatch frontier: not (yet) in any ConsumeQueue
        late = disp & (offs >= r.ctx.vouched)
        s["undispatched"] += int(late.sum())
        disp &= ~late
    s["dispatchable"] += int(disp.sum())
    if not disp.any():
        return
    qids = f.queue_id[rows]
    keys = tids * (1 << 32) + (qids & 0xFFFFFFFF)

    def queue_of(key: int) -> tuple[str, int]:
        return names[key >> 32].decode("utf-8", "replace"), int(np.int32(np.uint32(key & 0xFFFFFFFF)))

    for key, q0, q1, n, o0, o1 in rec.runs_by_key(keys[disp], f.queue_offset[rows][disp], offs[disp]):
        s["runs"].append([*queue_of(key), q0, q1, n, o0, o1])
    dig = disp & ~np.isin(tids, [i for i, t in enumerate(names) if t == SCHEDULE_TOPIC])  # tags = delivery time
    d = rows[dig]
    qo = f.queue_offset[d]
    h = digest.tuple_hash(qo, offs[dig], f.total[d], digest.tags_codes(m.mm, f.props_off[d], f.props_len[d],
                                                                       f.props_window(m.a, d, digest.PROPS_WINDOW)))
    for key, b, n, v in digest.keyed_digest(keys[dig], qo // digest.CQ_BUCKET, h):
        s["cq_digest"].append([*queue_of(key), b, n, v])


def _walk(m: Mapped, r: ScanRange, s: Summary, p: int | None, stop: int, dledger: bool) -> list[int]:
    """Collect owned record starts from ``p``; resync after unparseable bytes."""
    starts: list[int] = []
    walk = rec.walk_dledger if dledger else rec.walk_classic
    abs0 = r.file_start + m.base
    while p is not None and p < stop:
        got, kind, q = walk(m.mm, p, stop, m.limit)
        starts.extend(got)
        s["end_kind"], s["end_pos"] = kind, abs0 + q
        if kind in ("break", "overrun"):
            if not dledger and _unfinished_tail(m, r, s, q, "unparseable record header"):
                s["next"] = None
                return starts
            if dledger:
                _ok, why = rec.entry_verdict(m.mm, q, abs0)
            else:
                why = codec.explain_invalid_record(m.mm, q) if q + 8 <= m.limit else "fewer than 8 bytes before the file end"
            s.violation("structure", abs0 + q, f"unparseable record header: {why}")
            nxt = (rec.sync_dledger(m.mm, q + 1, stop, m.limit, abs0) if dledger
                   else rec.sync_classic(m.mm, q + 1, stop, m.limit))
            if nxt is None:
                s["next"] = None
                return starts
            s.violation(CHECK_FOR_KIND["dl" if dledger else "old"], abs0 + q,
                        f"{nxt - q} unparseable bytes before the next record at {abs0 + nxt}")
            p = nxt
            continue
        if kind == "blank":
            size_or_magic = rec.PAIR.unpack_from(m.mm, q)
            remaining = size_or_magic[1] if dledger else size_or_magic[0]
            if q + remaining != m.limit:
                s.violation("structure", abs0 + q,
                            f"end-of-file blank says {remaining} bytes remain, the file has {m.limit - q}")
            s["next"] = abs0 + m.limit
        else:
            s["next"] = abs0 + q
        return starts
    if p is not None:
        s["next"] = abs0 + p
    return starts


def _unfinished_tail(m: Mapped, r: ScanRange, s: Summary, q: int, why: str) -> bool:
    """An invalid record at buffer position ``q`` is an unfinished write (a note, not a
    violation) iff the store is classic, ``q`` is in its last file, at or past the dispatch
    frontier (no ConsumeQueue vouches for it), and every byte after the record (its declared
    extent when that is sane, else its 8-byte head) up to the file end is zero."""
    abs_q = r.file_start + m.base + q
    if r.ctx.live_tail != r.path or (r.ctx.vouched is not None and abs_q < r.ctx.vouched):
        return False
    size = rec.PAIR.unpack_from(m.mm, q)[0] if q + 8 <= m.limit else 0
    end = q + size if rec.MIN_RECORD <= size and q + size <= m.limit else min(q + 8, m.limit)
    if m.a[end:].any():
        return False
    s["tail"] = {"offset": abs_q, "file_offset": abs_q - r.file_start, "file": r.name,
                 "message": f"tail not yet written: the record at {abs_q} is incomplete ({why}) and only zeros "
                            f"follow it; a broker writing the store finishes it (not vouched for by any ConsumeQueue)"}
    s["end_kind"], s["end_pos"] = "tail", abs_q
    return True


def scan_old(r: ScanRange) -> Summary:
    s = _scan_old(r)
    if r.ctx.live_tail == r.path and s["violation_count"]:
        time.sleep(LIVE_RETRY_SECONDS)  # a broker may have been writing that very record: look again
        s = _scan_old(r)
    return s


def _scan_old(r: ScanRange) -> Summary:
    s = new_summary(r)
    m = Mapped(r.path, r.start)
    try:
        abs0 = r.file_start + m.base
        lo, hi = r.start - m.base, r.end - m.base
        p: int | None
        if r.forced_start is not None:
            p = r.forced_start - m.base
        elif r.start == 0:
            p = 0
        else:
            p = rec.sync_classic(m.mm, lo, hi, m.limit)
        s["first"] = None if p is None else abs0 + p
        starts = np.array(_walk(m, r, s, p, hi, dledger=False), dtype=np.int64)
        s["records"] = len(starts)
        if r.ctx.epoch_offsets and len(starts):  # which epoch start offsets are record starts here
            wanted = np.array(r.ctx.epoch_offsets, dtype=np.int64)
            s["epoch_starts"] = wanted[np.isin(wanted, abs0 + starts)].tolist()
        if len(starts):
            s["bytes"] = int(starts[-1] - starts[0])
            _messages(m, r, s, starts, m.limit, abs0 + starts, "old_continuity", lambda x: abs0 + x)
        _hash(m, r, s)
    finally:
        m.close()
    return s


def scan_dl(r: ScanRange) -> Summary:
    s = new_summary(r)
    m = Mapped(r.path, r.start)
    try:
        abs0 = r.file_start + m.base
        climit = min(m.limit, (r.ctx.committed_pos or 0) - abs0)
        lo, hi = r.start - m.base, min(r.end - m.base, climit)
        if r.forced_start is not None:
            p: int | None = r.forced_start - m.base
        elif r.start == 0:
            p = 0
        else:
            hint = dlindex.first_entry(r.ctx, r.abs_start)
            p = hint - abs0 if hint is not None and r.abs_start <= hint < r.abs_end else None
            if p is None or rec.PAIR.unpack_from(m.mm, p)[0] != rec.DL_MAGIC:
                p = rec.sync_dledger(m.mm, lo, hi, m.limit, abs0)
        s["first"] = None if p is None else abs0 + p
        known = dlindex.index_starts(r.ctx, m.a, abs0, p, hi, verify=False) if p is not None and p < hi else None
        e = None
        if known is not None:  # the index tiles the range; its entries' headers must agree (one block read)
            e = rec.entry_fields(m.a, known[0], m.limit, r.ctx.check_crc, m.mm, extra=rec.HEAD)
            if not ((e.magic == rec.DL_MAGIC) & (e.size == known[1]) & (e.epos == abs0 + known[0])).all():
                known = e = None
        if known is None:  # walk the data itself
            starts = np.array(_walk(m, r, s, p, hi, dledger=True), dtype=np.int64)
        else:  # walk only what follows the index's last entry
            starts, sizes = known
            nxt = int(starts[-1] + sizes[-1])
            s["end_kind"], s["next"], s["end_pos"] = "range", abs0 + nxt, abs0 + nxt
            if nxt < hi:
                starts = np.concatenate((starts, np.array(_walk(m, r, s, nxt, hi, dledger=True), dtype=np.int64)))
                e = None
        if s["end_kind"] == "range" and s["next"] is not None and s["next"] >= abs0 + climit:
            s["end_kind"] = "committed"
        if s["end_kind"] == "zeros" and s["end_pos"] < abs0 + climit:
            s.violation("dledger_continuity", s["end_pos"],
                        f"data ends (zeros) at {s['end_pos']} but the committed prefix "
                        f"(committedIndex {r.ctx.committed_index}) ends at {r.ctx.committed_pos}")
        s["records"] = len(starts)
        if len(starts):
            if e is None:
                e = rec.entry_fields(m.a, starts, m.limit, r.ctx.check_crc, m.mm, extra=rec.HEAD)
            for i in np.flatnonzero(~e.valid).tolist():
                _ok, why = rec.entry_verdict(m.mm, int(starts[i]), abs0, r.ctx.check_crc)
                s.violation("structure", abs0 + int(starts[i]), f"invalid DLedger entry: {why}")
            for i in np.flatnonzero(e.epos != abs0 + starts).tolist():
                s.violation("dledger_continuity", abs0 + int(starts[i]),
                            f"entry pos field is {int(e.epos[i])}, entry is at {abs0 + int(starts[i])}")
            di = np.flatnonzero(np.diff(e.index) != 1)
            for i in di.tolist():
                s.violation("dledger_continuity", abs0 + int(starts[i + 1]),
                            f"entry index {int(e.index[i + 1])} follows {int(e.index[i])}")
            for i in np.flatnonzero(np.diff(e.term) < 0).tolist():
                s.violation("dledger_continuity", abs0 + int(starts[i + 1]),
                            f"term went backwards: {int(e.term[i + 1])} after {int(e.term[i])}")
            s["first_index"], s["last_index"] = int(e.index[0]), int(e.index[-1])
            own = e.epos == abs0 + starts  # an index unit must find its pos field equal to its pos
            h = digest.tuple_hash(e.magic[own], e.epos[own], e.size[own], e.index[own], e.term[own])
            s["idx_digest"] = digest.unit_digest(e.index[own] // digest.IDX_BUCKET, h)
            s["first_term"], s["last_term"] = int(e.term[0]), int(e.term[-1])
            s["bytes"] = int(starts[-1] + e.size[-1] - starts[0])
            mstart = starts + rec.DL_HEADER
            size_bad = e.valid & (e.body_size != rec.be(e.block, rec.DL_HEADER, 4))
            for i in np.flatnonzero(size_bad).tolist():
                s.violation("structure", abs0 + int(starts[i]), "entry bodySize differs from the message TOTALSIZE")
            _messages(m, r, s, mstart, starts + e.size, abs0 + mstart, "dledger_continuity",
                      lambda x: abs0 + x, e.block[:, rec.DL_HEADER:])
        _hash(m, r, s)
    finally:
        m.close()
    return s


def scan_idx(r: ScanRange) -> Summary:
    s = new_summary(r)
    m = Mapped(r.path, r.start)
    opened: dict[str, Mapped] = {}
    try:
        lo, hi = r.start - m.base, r.end - m.base
        units = np.frombuffer(m.mm, dtype=IDX_UNIT, count=(hi - lo) // 32, offset=lo).copy()
        numbers = (r.abs_start // 32) + np.arange(len(units), dtype=np.int64)
        s["records"] = len(units)
        begin = _begin_index(r)
        keep = numbers >= begin
        units, numbers = units[keep], numbers[keep]

        def where(i: int) -> int:
            return int(numbers[i]) * 32

        for i in np.flatnonzero((units["magic"] != rec.DL_MAGIC) | (units["index"] != numbers)).tolist():
            s.violation("dledger_continuity", where(i),
                        f"index unit {int(numbers[i])}: magic {int(units['magic'][i])}, index field {int(units['index'][i])}")
        for i in np.flatnonzero(np.diff(units["term"]) < 0).tolist():
            s.violation("dledger_continuity", where(i + 1), f"index unit {int(numbers[i + 1])}: term went backwards")
        if len(units):
            s["first_index"], s["last_index"] = int(numbers[0]), int(numbers[-1])
            s["first_term"], s["last_term"] = int(units["term"][0]), int(units["term"][-1])
            s["first"], s["next"] = int(units["pos"][0]), int(units["pos"][-1] + units["size"][-1])
        pos = units["pos"].astype(np.int64)
        if not r.detail:  # the data scan's digest decides; a mismatch brings this range back detailed
            h = digest.tuple_hash(units["magic"], pos, units["size"], units["index"], units["term"])
            s["digest"] = digest.unit_digest(numbers // digest.IDX_BUCKET, h)
            _hash(m, r, s)
            return s
        matched = np.zeros(len(units), dtype=bool)
        for f in r.ctx.data:
            sel = np.flatnonzero((pos >= f.start) & (pos + 48 <= f.end))
            if len(sel) == 0:
                continue
            dm = opened.get(f.path)
            if dm is None:
                dm = opened[f.path] = Mapped(f.path, 0)
            p = pos[sel] - f.start
            fields = [rec.gather(dm.a, p + k, w) for k, w in ((0, 4), (4, 4), (8, 8), (16, 8), (24, 8))]
            want = [units["magic"][sel], units["size"][sel], units["index"][sel], units["term"][sel], pos[sel]]
            bad = np.zeros(len(sel), dtype=bool)
            for got, exp in zip(fields, want):
                bad |= got != exp.astype(np.int64)
            matched[sel] = True
            for j in np.flatnonzero(bad).tolist():
                i = int(sel[j])
                s.violation("dledger_continuity", where(i),
                            f"index unit {int(numbers[i])} (pos {int(pos[i])}, size {int(units['size'][i])}, "
                            f"term {int(units['term'][i])}) does not match the data entry there "
                            f"(magic {int(fields[0][j])}, size {int(fields[1][j])}, index {int(fields[2][j])}, "
                            f"term {int(fields[3][j])}, pos {int(fields[4][j])}) in {f.name}")
        for i in np.flatnonzero(~matched).tolist():
            s.violation("dledger_continuity", where(i), f"index unit {int(numbers[i])} points at {int(pos[i])}, in no data file")
        _hash(m, r, s)
    finally:
        for dm in opened.values():
            dm.close()
        m.close()
    return s


def _begin_index(r: ScanRange) -> int:
    """Index of the first entry of the first data file (``reviseLedgerBeginIndex``)."""
    if not r.ctx.data:
        return 0
    f = r.ctx.data[0]
    with open(f.path, "rb") as fh:
        raw = fh.read(48)
    if len(raw) < 48:
        return 0
    magic, _size, index = struct.unpack_from(">iiq", raw)
    return index if magic == rec.DL_MAGIC else 0


SCANNERS = {"old": scan_old, "new": scan_old, "dl": scan_dl, "idx": scan_idx, "cq": scan_cq}


def run_range(r: ScanRange) -> Summary:
    """Entry point for executors (records the CPU seconds the range took, for the bench)."""
    t0 = time.process_time()
    try:
        s = SCANNERS[r.kind](r)
    except Exception as exc:  # noqa: BLE001 - a task must report, not kill the job
        s = new_summary(r)
        s.violation("structure", r.abs_start, f"cannot scan range: {type(exc).__name__}: {exc}")
        s["end_kind"] = "error"
    s["cpu_seconds"] = time.process_time() - t0
    return s


def diff_bytes(a_path: str, a_start: int, b_path: str, b_start: int, length: int) -> int | None:
    """First differing byte (relative) between two file ranges, None when identical."""
    chunk = 8 << 20
    with open(a_path, "rb") as fa, open(b_path, "rb") as fb:
        fa.seek(a_start)
        fb.seek(b_start)
        done = 0
        while done < length:
            n = min(chunk, length - done)
            x, y = fa.read(n), fb.read(n)
            if x != y:
                xa, ya = np.frombuffer(x, np.uint8), np.frombuffer(y, np.uint8)
                k = min(len(xa), len(ya))
                d = np.flatnonzero(xa[:k] != ya[:k])
                return done + (int(d[0]) if len(d) else k)
            done += n
    return None


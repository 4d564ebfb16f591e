"""Vectorised record parsing for the validator: walk record chains, then check headers in bulk.

Rules:
- The shared codecs are the authority: ``broker.store.message.check_message_and_return_size``
  decides whether a commitlog record is valid. :func:`message_fields` is a numpy screening of
  the same rules (magic, TOTALSIZE == calMsgLength, lengths inside the record, body CRC); a
  record it rejects is re-checked by the codec, which also supplies the human reason, and the
  codec's verdict wins. Tests compare the two on the Apache fixtures and on corrupted records.
- DLedger entries likewise: ``dledger.entry.check_header`` is the authority on an entry header
  (magic, size == 48 + bodySize, body CRC when non-zero); :func:`entry_fields` screens in bulk.
- A chain walk only follows sizes; it never trusts a record it has not bounds-checked. It stops
  at a classic blank ``[remaining][0xCBD43194]``, a DLedger blank ``[0xFFFFFFFF][remaining]``,
  zeros (the write end), an unparseable header, or the caller's stop position.
- Offsets handed to the gather helpers are positions in the mapped buffer ``a`` (a uint8 numpy
  view of an mmap); callers translate to file and absolute offsets.

Theory of operation: the only per-record Python work is the size-chasing walk (one
``unpack_from`` per record; DLedger regions skip even that when positions come from the index)
and one ``zlib.crc32`` per body (over a memoryview slice of the mmap: no copy). Every other
field comes from two block reads per record - HEAD bytes at the record start (for DLedger, the
entry header and the message header in one block) and TAIL bytes at the topic length - copied
row by row out of a zero-copy ``sliding_window_view`` of the mapping (measured ~20x cheaper than
``np.take`` with an (n, w) index matrix), then sliced into big-endian integer columns.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from broker.store import message as codec
from dledger import entry as dl_codec

V1 = codec.MESSAGE_MAGIC_CODE
V2 = codec.MESSAGE_MAGIC_CODE_V2
BLANK = codec.BLANK_MAGIC_CODE
MIN_RECORD = 91  # smallest possible v1 record (84 fixed + 4 bodylen + 1 topiclen + 2 proplen)
DL_MAGIC = dl_codec.CURRENT_MAGIC
DL_BLANK = -1  # DLedger data-file blank magic (MmapFileList.BLANK_MAGIC_CODE), reference §3.4
DL_HEADER = dl_codec.BODY_OFFSET
DL_POS_OFFSET = dl_codec.POS_OFFSET

PAIR = struct.Struct(">ii")  # the first 8 bytes of any record: (size, magic) or (magic, size)

_MAGIC_BYTES = (struct.pack(">i", V1), struct.pack(">i", V2), struct.pack(">i", BLANK))
_U32 = np.uint32


def gather(a: np.ndarray, offs: np.ndarray, width: int) -> np.ndarray:
    """Signed big-endian ints of ``width`` bytes (2, 4, 8) at ``offs`` (caller bounds-checks)."""
    if len(offs) == 0:
        return np.zeros(0, dtype=np.int64)
    return block(a, offs, width).view(f">i{width}").ravel().astype(np.int64)


@dataclass(frozen=True)
class Frame:
    """How one kind of file frames its records, for :func:`walk`: the order of the first two ints
    (a classic record: TOTALSIZE then magic; a DLedger entry: magic then size), the magics of a
    record, the end-of-file blank's magic, and the smallest valid size."""

    size_first: bool
    magics: tuple[int, int]
    blank: int
    min_size: int


CLASSIC = Frame(size_first=True, magics=(V1, V2), blank=BLANK, min_size=MIN_RECORD)
DLEDGER = Frame(size_first=False, magics=(DL_MAGIC, DL_MAGIC), blank=DL_BLANK, min_size=DL_HEADER + 1)


def walk(mm: Any, p: int, stop: int, limit: int, frame: Frame) -> tuple[list[int], str, int]:
    """Record (or entry) starts from ``p`` while ``p < stop``; returns (starts, end_kind, end_pos).

    end_kind: ``range`` (reached stop), ``blank``, ``zeros``, ``break`` (unparseable header at
    end_pos) or ``overrun`` (fewer than 8 bytes left before ``limit``, the file end). The one
    walker of the validator: the file kind is the :class:`Frame` it is given.
    """
    starts: list[int] = []
    unpack = PAIR.unpack_from
    append = starts.append
    size_first, blank, min_size = frame.size_first, frame.blank, frame.min_size
    m1, m2 = frame.magics  # two record magics (a DLedger entry has one: given twice)
    while p < stop:
        if p + 8 > limit:
            return starts, "overrun", p
        if size_first:
            size, magic = unpack(mm, p)
        else:
            magic, size = unpack(mm, p)
        if magic == m1 or magic == m2:
            if size < min_size or p + size > limit:
                return starts, "break", p
            append(p)
            p += size
        elif magic == blank:
            return starts, "blank", p
        elif size == 0 and magic == 0:
            return starts, "zeros", p
        else:
            return starts, "break", p
    return starts, "range", p


def walk_classic(mm: Any, p: int, stop: int, limit: int) -> tuple[list[int], str, int]:
    """:func:`walk` over a classic commitlog file."""
    return walk(mm, p, stop, limit, CLASSIC)


def walk_dledger(mm: Any, p: int, stop: int, limit: int) -> tuple[list[int], str, int]:
    """:func:`walk` over a DLedger data file."""
    return walk(mm, p, stop, limit, DLEDGER)


def _chain_ok(mm: Any, p: int, limit: int, depth: int = 3) -> bool:
    """``depth`` records chain from ``p`` (or the chain ends cleanly in a blank/zeros before)."""
    for _ in range(depth):
        if p + 8 > limit:
            return p == limit
        size, magic = PAIR.unpack_from(mm, p)
        if magic == BLANK:
            return p + size == limit
        if magic != V1 and magic != V2:
            return size == 0 and magic == 0
        if size < MIN_RECORD or p + size > limit:
            return False
        p += size
    return True


def sync_classic(mm: Any, p: int, stop: int, limit: int) -> int | None:
    """First position in [p, stop) where a classic record chain starts, found by header checks.

    A candidate has a message or blank magic at +4; a blank must reach exactly the file end
    (``limit``); a message must start a chain of three records (or end cleanly in a blank or
    zeros). Returns None when no record starts in the range.
    """
    i = p + 4
    while True:
        h = -1
        for magic in _MAGIC_BYTES:  # each search stops at the best hit so far: misses stay cheap
            got = mm.find(magic, i, (h if h >= 0 else stop + 4) + 4)
            if got >= 0 and (h < 0 or got < h):
                h = got
        if h < 0:
            return None
        cand = h - 4
        if cand >= p:
            size, magic = PAIR.unpack_from(mm, cand)
            if magic == BLANK:
                if cand + size == limit:
                    return cand
            elif MIN_RECORD <= size and cand + size <= limit and _chain_ok(mm, cand, limit):
                return cand
        i = h + 1


def sync_dledger(mm: Any, p: int, stop: int, limit: int, abs_base: int) -> int | None:
    """First position in [p, stop) with a DLedger entry header whose pos field is its offset."""
    q = p
    needle = struct.pack(">i", DL_MAGIC)
    while q < stop:
        h = mm.find(needle, q, stop + 4)
        if h < 0:
            break
        if h + DL_HEADER <= limit:
            magic, size, _index, _term, pos = struct.unpack_from(">iiqqq", mm, h)
            if pos == abs_base + h and DL_HEADER < size and h + size <= limit:
                return h
        q = h + 1
    q = p  # a DLedger blank in the range
    needle = struct.pack(">i", DL_BLANK)
    while q < stop:
        h = mm.find(needle, q, stop + 4)
        if h < 0:
            return None
        if h + 8 <= limit and PAIR.unpack_from(mm, h)[1] == limit - h:
            return h
        q = h + 1
    return None


HEAD = 88  # bytes of a record's header read in one block: TOTALSIZE .. BODYLEN (IPv4 hosts)
TAIL = 160  # bytes read in one block at the topic length: topic, props length, props head


def block(a: np.ndarray, offs: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each of ``offs`` as an (n, width) uint8 matrix; bytes past the buffer
    end read as its last byte (callers mask rows whose fields run past a limit).

    Rows are copied out of a zero-copy sliding-window view of ``a`` (one memcpy per row): about
    20x cheaper than ``take`` with an (n, width) index matrix, which dominated the scan.
    """
    n = len(offs)
    if n == 0 or len(a) == 0:
        return np.zeros((n, width), dtype=np.uint8)
    offs = offs.astype(np.int64, copy=False)
    last = len(a) - width
    if last < 0:
        return np.take(a, np.minimum(offs[:, None] + np.arange(width, dtype=np.int64), len(a) - 1))
    out = sliding_window_view(a, width)[np.minimum(offs, last)]
    over = np.flatnonzero(offs > last)
    if len(over):
        out[over] = np.take(a, np.minimum(offs[over][:, None] + np.arange(width, dtype=np.int64), len(a) - 1))
    return out


def sub_block(b: np.ndarray, rows: np.ndarray, col: np.ndarray, width: int) -> np.ndarray:
    """``b[rows[i], col[i]:col[i] + width]`` for every i (an (n, width) copy); a window that runs
    past its row reads the next row's bytes (callers mask them), never past the block."""
    flat = np.ascontiguousarray(b).reshape(-1)
    if len(rows) == 0 or len(flat) < width:
        return np.zeros((len(rows), width), dtype=np.uint8)
    at = np.minimum(rows.astype(np.int64) * b.shape[1] + col, len(flat) - width)
    return sliding_window_view(flat, width)[at]


def be(b: np.ndarray, col: int, width: int) -> np.ndarray:
    """Signed big-endian ints of ``width`` bytes at column ``col`` of a block, as int64."""
    return np.ascontiguousarray(b[:, col:col + width]).view(f">i{width}").ravel().astype(np.int64)


@dataclass
class MessageFields:
    """Header fields of records at ``pos`` (arrays), plus ``valid`` per the codec's rules."""

    pos: np.ndarray
    total: np.ndarray
    magic: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    phy: np.ndarray
    sys_flag: np.ndarray
    body_off: np.ndarray
    body_len: np.ndarray
    topic_off: np.ndarray
    topic_len: np.ndarray
    valid: np.ndarray  # bool: every codec rule including the body CRC
    parsed: np.ndarray  # bool: every rule except the body CRC (the header can be trusted)
    props_off: np.ndarray
    props_len: np.ndarray
    tail: np.ndarray  # (n, TAIL) bytes from each record's topic length on
    props_col: np.ndarray  # column of the properties' first byte in ``tail``

    def props_window(self, a: np.ndarray, rows: np.ndarray, width: int) -> np.ndarray:
        """The first ``width`` properties bytes of ``rows`` (from ``tail`` when it holds them)."""
        col = self.props_col[rows]
        if (col + width <= TAIL).all():
            return sub_block(self.tail, rows, col, width)
        return block(a, self.props_off[rows], width)


def message_fields(a: np.ndarray, pos: np.ndarray, limit: np.ndarray | int, check_crc: bool = True,
                   mm: Any = None, head: np.ndarray | None = None) -> MessageFields:
    """Screen every record at ``pos`` (ends bounded by ``limit``) with the codec's rules.

    Two random reads per record: a HEAD block at the record start and a TAIL block at its topic
    length; fields come out of those blocks (rare IPv6 hosts and long topics read their own).
    """
    n = len(pos)
    pos = pos.astype(np.int64)
    blen = len(a)
    lim = np.minimum(np.broadcast_to(np.asarray(limit, dtype=np.int64), (n,)), blen)
    ok = pos + 84 <= lim
    h = block(a, pos, HEAD) if head is None else head  # (n, HEAD) bytes at pos, already read
    total = be(h, 0, 4)
    magic = be(h, 4, 4)
    ok &= ((magic == V1) | (magic == V2)) & (total >= MIN_RECORD) & (pos + total <= lim)
    end = np.where(ok, pos + total, 0)
    crc = be(h, 8, 4)
    queue_id = be(h, 12, 4)
    queue_offset = be(h, 20, 8)
    phy = be(h, 28, 8)
    sys_flag = be(h, 36, 4)
    hosts = np.where(sys_flag & codec.BORNHOST_V6_FLAG, 20, 8) + np.where(sys_flag & codec.STOREHOSTADDRESS_V6_FLAG, 20, 8)
    bl_off = pos + 68 + hosts
    ok &= bl_off + 4 <= end
    body_len = be(h, 84, 4)
    v6 = np.flatnonzero(ok & (hosts != 16))
    if len(v6):
        body_len[v6] = gather(a, bl_off[v6], 4)
    del h
    body_off = bl_off + 4
    ok &= (body_len >= 0) & (body_off + body_len + 3 <= end)
    tl_off = np.where(ok, body_off + body_len, 0)
    t = block(a, tl_off, TAIL)
    v1 = magic == V1
    tl1 = t[:, 0].astype(np.int64)
    topic_len = np.where(v1, tl1, be(t, 0, 2))
    tls = np.where(v1, 1, 2)
    ok &= ~(v1 & (tl1 > 127)) & (topic_len >= 0)
    topic_off = tl_off + tls
    ok &= topic_off + topic_len + 2 <= end
    pl_col = np.where(ok, tls + topic_len, 0)
    near = pl_col + 2 <= TAIL
    r = np.arange(n)
    pc = np.minimum(pl_col, TAIL - 2)
    props_len = (t[r, pc].astype(np.int64) << 8) | t[r, pc + 1]
    props_len -= np.where(props_len >= 0x8000, 0x10000, 0)
    far = np.flatnonzero(~near)
    if len(far):
        props_len[far] = gather(a, (topic_off + topic_len)[far], 2)
    expect = 84 + hosts - 16 + 4 + np.maximum(body_len, 0) + tls + topic_len + 2 + np.maximum(props_len, 0)
    ok &= expect == total
    parsed = ok.copy()
    if check_crc and n:
        view = memoryview(cast(Any, mm if mm is not None else a))  # an mmap or an ndarray: both buffers
        rows = np.flatnonzero(ok & (body_len > 0))
        crc32 = zlib.crc32
        bad = [i for i, o, e, c in zip(rows.tolist(), body_off[rows].tolist(), (body_off + body_len)[rows].tolist(),
                                       crc[rows].tolist())
               if (crc32(view[o:e]) & 0x7FFFFFFF) != c]
        ok[bad] = False
    return MessageFields(pos, total, magic, queue_id, queue_offset, phy, sys_flag, body_off, body_len,
                         topic_off, topic_len, ok, parsed, topic_off + topic_len + 2, props_len, t, pl_col + 2)


def topics_of(mm: Any, f: MessageFields, rows: np.ndarray) -> list[bytes]:
    """Raw topic bytes of the records at ``rows`` (indices into ``f``)."""
    offs = f.topic_off[rows].tolist()
    lens = f.topic_len[rows].tolist()
    return [mm[o:o + n] for o, n in zip(offs, lens)]


def topic_ids(a: np.ndarray, mm: Any, off: np.ndarray, length: np.ndarray, tail: np.ndarray | None = None,
              col: np.ndarray | None = None) -> tuple[np.ndarray, list[bytes]]:
    """Exact topic identity for many records at once: (id per record, topic bytes per id).

    Records are grouped by (length, first 8 bytes, last 8 bytes) with numpy; each group is then
    verified byte for byte against its first member, and a group that is not uniform (topics
    equal at both ends but different inside) is split exactly in Python. ``tail``/``col``: the
    records' TAIL blocks and the topic's column in them, when already read (no buffer access
    for topics that fit the block).
    """
    n = len(off)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    cols = np.arange(8, dtype=np.int64)
    tail_at = off + length - 8
    if tail is not None and col is not None and bool((col + length <= TAIL).all()):
        r = np.arange(n)
        head = np.where(cols[None, :] < length[:, None], sub_block(tail, r, col, 8), 0).view(np.int64).ravel()
        at = col + np.maximum(length - 8, 0)  # the last 8 bytes (all of a shorter topic: same as head)
        last = np.where(at[:, None] + cols < col[:, None] + length[:, None], sub_block(tail, r, at, 8), 0)
        keys = np.stack([length, head, last.view(np.int64).ravel()], axis=1)
        return _group_topics(a, mm, off, length, keys)
    head = block(a, off, 8)
    tail8 = block(a, np.maximum(tail_at, 0), 8)
    near0 = np.flatnonzero(tail_at < 0)  # a short topic at the very buffer start
    if len(near0):
        tail8[near0] = np.take(a, np.clip(tail_at[near0][:, None] + cols, 0, len(a) - 1))
    head = np.where(cols[None, :] < length[:, None], head, 0).view(np.int64).ravel()
    tail = np.where(tail_at[:, None] + cols >= off[:, None], tail8, 0).view(np.int64).ravel()
    keys = np.stack([length, head, tail], axis=1)
    return _group_topics(a, mm, off, length, keys)


def _group_topics(a: np.ndarray, mm: Any, off: np.ndarray, length: np.ndarray,
                  keys: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    _uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    ids = inverse.astype(np.int64)
    names: list[bytes] = [bytes(mm[int(off[i]):int(off[i] + length[i])]) for i in first.tolist()]
    for g, i0 in enumerate(first.tolist()):
        n_g = int(length[i0])
        if n_g <= 16:
            continue  # head and tail cover every byte
        members = np.flatnonzero(inverse == g)
        body = block(a, off[members] + 8, n_g - 16)
        same = (body == body[0]).all(axis=1)
        for i in members[~same].tolist():  # rare: split exactly
            t = bytes(mm[int(off[i]):int(off[i] + length[i])])
            if t not in names:
                names.append(t)
            ids[i] = names.index(t)
    return ids, names


def codec_verdict(mm: Any, p: int, check_crc: bool = True) -> tuple[bool, str]:
    """The shared codec's verdict on the record at ``p``: (valid, reason)."""
    req = codec.check_message_and_return_size(mm, p, check_crc)
    if req.success and req.msg_size > 0:
        return True, "record is valid"
    return False, codec.explain_invalid_record(mm, p)


def runs_by_key(keys: np.ndarray, qoffs: np.ndarray, offsets: np.ndarray) -> list[tuple[int, int, int, int, int, int]]:
    """Maximal +1 runs of queue offsets per key, in record order.

    Returns (key, first_qo, last_qo, count, first_offset, last_offset) tuples; a record whose
    queue offset is not the previous one + 1 (same key) starts a new run.
    """
    out: list[tuple[int, int, int, int, int, int]] = []
    if len(keys) == 0:
        return out
    order = np.lexsort((np.arange(len(keys)), keys))  # stable by key, record order inside
    k, q, o = keys[order], qoffs[order], offsets[order]
    new = np.ones(len(k), dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (q[1:] != q[:-1] + 1)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(k)) - 1
    for s, e in zip(starts.tolist(), ends.tolist()):
        out.append((int(k[s]), int(q[s]), int(q[e]), e - s + 1, int(o[s]), int(o[e])))
    return out


@dataclass
class EntryFields:
    """DLedger entry headers at ``pos`` (arrays), plus ``valid`` per ``dledger.entry`` rules."""

    pos: np.ndarray
    magic: np.ndarray
    size: np.ndarray
    index: np.ndarray
    term: np.ndarray
    epos: np.ndarray  # the pos field
    body_size: np.ndarray
    valid: np.ndarray
    block: np.ndarray  # (n, 48 + extra) bytes read at each entry


def entry_fields(a: np.ndarray, pos: np.ndarray, limit: int, check_crc: bool = True, mm: Any = None,
                 extra: int = 0) -> EntryFields:
    """Screen every DLedger entry at ``pos`` with ``check_header``'s rules, in bulk.

    One block read of ``48 + extra`` bytes per entry; ``extra = HEAD`` also reads the message
    header behind it (``EntryFields.block[:, 48:]``, for :func:`message_fields`).
    """
    pos = pos.astype(np.int64)
    ok = pos + DL_HEADER <= limit
    b = block(a, pos, DL_HEADER + extra)
    magic = be(b, 0, 4)
    size = be(b, 4, 4)
    index = be(b, 8, 8)
    term = be(b, 16, 8)
    epos = be(b, DL_POS_OFFSET, 8)
    body_crc = be(b, dl_codec.BODY_CRC_OFFSET, 4)
    body_size = be(b, 44, 4)
    ok &= (magic >= 1) & (magic <= DL_MAGIC) & (body_size >= 0) & (size == DL_HEADER + body_size) & (pos + size <= limit)
    if check_crc:
        view = memoryview(cast(Any, mm if mm is not None else a))  # an mmap or an ndarray: both buffers
        crc32 = zlib.crc32
        rows = np.flatnonzero(ok & (body_crc != 0))
        bad = [i for i, o, e, c in zip(rows.tolist(), (pos[rows] + DL_HEADER).tolist(), (pos + size)[rows].tolist(),
                                       (body_crc[rows] & 0xFFFFFFFF).tolist())
               if crc32(view[o:e]) != c]  # dl_codec.body_crc32, compared unsigned
        ok[bad] = False
    return EntryFields(pos, magic, size, index, term, epos, body_size, ok, b)


def entry_verdict(mm: Any, p: int, base_pos: int, check_crc: bool = True) -> tuple[bool, str]:
    """``dledger.entry.check_header``'s verdict on the entry at ``p``: (valid, reason)."""
    try:
        dl_codec.check_header(mm, p, verify_crc=check_crc, base_pos=base_pos)
    except dl_codec.EntryCorruptionError as exc:
        return False, str(exc)
    return True, "entry is valid"

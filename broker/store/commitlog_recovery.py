"""CommitLog recovery after a clean shutdown (normal) or a crash (abnormal).

Rules:
- Normal (no ``abort`` file): scan from the 3rd-last file with CRC checks, stop at the first
  record that is not valid, truncate everything after it (``CommitLog.recoverNormally``).
- Abnormal (``abort`` left behind): walk back from the newest file to the first whose first
  message was stored no later than the checkpoint's min timestamp (``isMappedFileMatchedRecover``),
  re-scan from there with CRC checks and re-dispatch every record (ConsumeQueue and IndexFile
  writes are idempotent), then truncate after the last valid record.
- Where RocketMQ would silently truncate at *any* invalid record, we first decide whether the
  invalid record is a torn tail or damage to acknowledged data (issue 13: durable facts first).
  The checkpoint's ``physic_flushed_offset`` is the offset the last commitlog flush made durable;
  the flush services publish it to the checkpoint page right after each flush, before any
  SYNC_FLUSH put it covers is acknowledged (0 = unknown, e.g. a checkpoint Apache wrote):
    * below it: damage, StoreCorruptionError, whatever the bytes look like;
    * at or past it: the last, unfinished write (one writer appends in order and a put is
      acknowledged only after its copy returns, so nothing after an unfinished write was
      acknowledged, and the copy's bytes land in no order we can rely on: glibc stores a long
      copy's head last, ``rep movsb`` stores whole lines out of order). Truncated with a warning;
      an ASYNC_FLUSH ack past the flushed offset was never durable, as RocketMQ documents.
  Without a flushed offset, byte patterns decide:
    * data in a later file: damage (a write never spans files);
    * a zero head (the copy's first bytes never landed): a torn tail, even with whole valid
      records after it, unless a following record was stored no later than
      ``physic_msg_timestamp`` (so flushed): damage;
    * a non-zero head: a torn tail only if nothing but zeros follows it and it was not stored
      before ``physic_msg_timestamp``; otherwise damage.
- After the scan every recovered file is fdatasync'ed once: bytes a killed process left in the
  page cache count as flushed from then on, so they must be durable before anything is
  acknowledged on top of them.
- Either way the caller truncates ConsumeQueue units that point at or past the recovered end.
- A store migrated from DLedger mode (``commitlog.regions``, ``commitlog_regions``): only the
  files from ``classic_from`` on are recovered here, exactly as above (an empty set recovers to
  ``classic_from``); the frozen regions are checked and the ConsumeQueues brought up to their end
  first (``regions.recover``: after a crash also from the newest frozen file older than the
  checkpoint's safe instant when no owned file is). The ConsumeQueues are never destroyed for
  lack of owned files there: they index the regions.

Theory of operation: one scanning loop, parametrised by the commitlog's ``parse_record`` (so a
DLedger commitlog's entry parser fits) and an optional dispatch callback, returns the offset
just after the last valid record.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Protocol

from broker.store.dispatch import DispatchRequest
from broker.store.errors import StoreCorruptionError
from broker.store.mapped_file import MappedFile
from broker.store.record_walk import END, RECORD, ROLL, walk
from broker.store.message import (
    BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, MESSAGE_PHYSIC_OFFSET_POSITION,
    STOREHOSTADDRESS_V6_FLAG, check_message_and_return_size, check_message_py, explain_invalid_record,
    record_store_timestamp,
)

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.commitlog import CommitLog
    from broker.store.store_host import StoreHost

log = logging.getLogger(__name__)

_ZERO_CHUNK = bytes(1 << 20)
Dispatch = Callable[[DispatchRequest], None]


class _Checkpoint(Protocol):
    physic_msg_timestamp: int

    @property
    def min_timestamp(self) -> int: ...

    @property
    def min_timestamp_index(self) -> int: ...


def _nonzero_from(mf: MappedFile, start: int) -> int:
    """File position of the first non-zero byte at or after ``start``, or -1."""
    view = mf.whole()
    for begin, stop in mf.data_extents(max(start, 0)):
        pos = max(begin, start)
        while pos < stop:
            end = min(pos + len(_ZERO_CHUNK), stop)
            chunk = bytes(view[pos:end])
            if chunk != _ZERO_CHUNK[:end - pos]:
                return pos + len(chunk) - len(chunk.lstrip(b"\x00"))
            pos = end
    return -1


_MAGICS = (MESSAGE_MAGIC_CODE.to_bytes(4, "big", signed=True), MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big", signed=True))


def _head_missing(view: memoryview, pos: int, physical: int) -> bool:
    """The record at ``pos`` is whole except its first 4-7 bytes, still zero: a copy that ran back
    to front (glibc's memmove ends with the unaligned head) and stopped just short of the start.
    TOTALSIZE reads 0, which no record has; proof that the rest landed: the PHYSICALOFFSET field
    holds the record's own offset and the part of the magic code that landed is the tail of a real
    one. (Eight missing bytes are a zero head; fewer than four cannot be told from a TOTALSIZE's own
    high zero bytes, and up to two of them leave a small record whole.)"""
    head = bytes(view[pos:pos + MESSAGE_PHYSIC_OFFSET_POSITION + 8])
    if len(head) < MESSAGE_PHYSIC_OFFSET_POSITION + 8 or head[:4] != b"\x00\x00\x00\x00":
        return False
    if int.from_bytes(head[MESSAGE_PHYSIC_OFFSET_POSITION:], "big", signed=True) != physical:
        return False
    missing = 8 - len(head[:8].lstrip(b"\x00"))  # 4..8
    return missing < 8 and any(head[missing:8] == magic[missing - 4:] for magic in _MAGICS)


def _size_from_fields(view: memoryview, pos: int) -> int:
    """The size the record at ``pos`` has by its own fields (hosts, BODYLEN, topic and properties
    lengths), TOTALSIZE aside; -1 unless they describe a record inside ``view``."""
    n = len(view)
    if pos + 40 > n or bytes(view[pos + 4:pos + 8]) not in _MAGICS:
        return -1
    v2 = bytes(view[pos + 4:pos + 8]) == _MAGICS[1]
    sys_flag = int.from_bytes(view[pos + 36:pos + 40], "big", signed=True)
    at = pos + 68 + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8)
    if at + 4 > n:
        return -1
    body_len = int.from_bytes(view[at:at + 4], "big", signed=True)
    at += 4 + body_len
    width = 2 if v2 else 1
    if body_len < 0 or at + width > n:
        return -1
    topic_len = int.from_bytes(view[at:at + width], "big", signed=True)
    at += width + topic_len
    if topic_len <= 0 or at + 2 > n:
        return -1
    props_len = int.from_bytes(view[at:at + 2], "big", signed=True)
    at += 2 + props_len
    return at - pos if props_len >= 0 and at <= n else -1


def _size_head_cut(view: memoryview, pos: int, physical: int) -> bool:
    """The record at ``pos`` is whole except the first 2-3 bytes of its TOTALSIZE, still zero: the
    back-to-front copy (see :func:`_head_missing`) stopped that short of the start, and TOTALSIZE
    reads only its low byte(s). Proof that the rest landed: PHYSICALOFFSET holds the record's own
    offset, the size its fields describe ends in the bytes that did land (and differs from what
    TOTALSIZE reads), and with that size the record passes every check, its body CRC included.
    (Seen in the kill -9 crash test: TOTALSIZE 111 for a record of 623 = 0x26F, 3 bytes short.)"""
    head = bytes(view[pos:pos + MESSAGE_PHYSIC_OFFSET_POSITION + 8])
    if len(head) < MESSAGE_PHYSIC_OFFSET_POSITION + 8:
        return False
    if int.from_bytes(head[MESSAGE_PHYSIC_OFFSET_POSITION:], "big", signed=True) != physical:
        return False
    total = int.from_bytes(head[:4], "big")
    size = _size_from_fields(view, pos)
    if size <= 0 or size == total:
        return False
    for missing in (2, 3):  # one missing byte: every record's top size byte is zero anyway
        landed = 4 - missing
        if head[:missing] == bytes(missing) and total == size % (1 << (8 * landed)):
            whole = bytearray(view[pos:pos + size])
            whole[:4] = size.to_bytes(4, "big")
            checked = check_message_py(bytes(whole), 0, True)
            return checked.success and checked.msg_size == size
    return False


def _valid_record_after(mf: MappedFile, start: int) -> int:
    """File position of the first valid record at or after ``start`` (its magic, sizes and CRC
    check out and its PHY_POS field equals its own physical offset), or -1. Candidates are
    found by searching the file's data extents for the magic bytes, so holes cost nothing."""
    view = mf.whole()
    start = max(start, 0)
    for begin, stop in mf.data_extents(start):
        lo = max(begin, start)
        while lo < stop:
            hi = min(lo + len(_ZERO_CHUNK), stop)
            data = bytes(view[lo:min(hi + 3, len(view))])  # +3: a magic straddling the edge
            found = []
            for magic in _MAGICS:
                h = data.find(magic)
                while 0 <= h < hi - lo:
                    q = lo + h - 4
                    if q >= start:
                        req = check_message_and_return_size(view, q, True)
                        if req.success and req.msg_size > 0 and req.commitlog_offset == mf.file_from_offset + q:
                            found.append(q)
                            break
                    h = data.find(magic, h + 1)
            if found:
                return min(found)
            lo = hi
    return -1


def _classify_failure(files: list[MappedFile], index: int, pos: int, physic_ts: int, flushed: int = 0) -> None:
    """Return if the invalid record at ``pos`` of ``files[index]`` is a torn tail, else raise.

    Durable facts first: below the checkpointed flushed offset a record was made durable by a
    flush that covered it, so it is damage, whatever its bytes look like. Past it, the record may
    be the last write, which never completed (one writer appends in order and a put is
    acknowledged only after its copy returns, so nothing after an unfinished write was
    acknowledged); its bytes then tell how far the copy got."""
    mf = files[index]
    view = mf.whole()
    reason = explain_invalid_record(view, pos)
    physical = mf.file_from_offset + pos
    if 0 < flushed and physical < flushed:
        raise StoreCorruptionError(
            str(mf.path), pos, physical,
            f"{reason}; the checkpoint says everything below offset {flushed} was flushed, so it was acknowledged")
    for later in files[index + 1:]:  # a write never spans files: a later file's data came after it
        at = _nonzero_from(later, 0)
        if at >= 0:
            raise StoreCorruptionError(
                str(mf.path), pos, physical, f"{reason}; later file {later.path.name} holds data at offset {at}")
    if 0 < flushed:
        # past the durable end: the last, unfinished write, whatever order its bytes landed in
        if _nonzero_from(mf, pos) >= 0:
            log.warning("truncating the unfinished last write of %s at file offset %d (physical %d, past the flushed "
                        "offset %d; nothing after it was acknowledged): %s", mf.path, pos, physical, flushed, reason)
        return
    total = int.from_bytes(view[pos:pos + 4], "big", signed=True) if pos + 4 <= len(view) else 0
    skip = total if 8 <= total <= len(view) - pos else 8
    if view[pos:pos + 8] == b"\x00" * min(8, len(view) - pos) or _head_missing(view, pos, physical) \
            or _size_head_cut(view, pos, physical):
        # the head of the copy never landed: what follows may be the copy's own tail, even whole
        # records of the batch (glibc's memmove stores the last bytes first)
        after = _valid_record_after(mf, pos + 8)
        if after < 0:
            return  # the plain end of the data, or a torn copy without a whole record
        after_ts = record_store_timestamp(view, after)
        if flushed <= 0 and physic_ts > 0 and after_ts is not None and 0 < after_ts <= physic_ts:
            raise StoreCorruptionError(
                str(mf.path), pos, physical,
                f"{reason}; a valid record follows at file offset {after}, stored at {after_ts}, no later than the "
                f"last flushed message ({physic_ts}), so this is not a torn tail")
        log.warning("truncating torn batch of %s at file offset %d (physical %d, flushed offset %d): its head never "
                    "landed, the valid record at file offset %d is part of the same unfinished write",
                    mf.path, pos, physical, flushed, after)
        return
    after = _nonzero_from(mf, pos + skip)
    if after >= 0:
        raise StoreCorruptionError(
            str(mf.path), pos, physical, f"{reason}; data follows at file offset {after}, so this is not a torn tail")
    store_ts = record_store_timestamp(view, pos)
    if store_ts is not None and physic_ts > 0 and 0 < store_ts < physic_ts:
        raise StoreCorruptionError(
            str(mf.path), pos, physical,
            f"{reason}; stored at {store_ts}, before the last flushed message ({physic_ts}), "
            "so it was acknowledged")
    log.warning("truncating torn tail of %s at file offset %d: %s", mf.path, pos, reason)


def scan(commitlog: CommitLog, start_index: int, check_crc: bool, dispatch: Dispatch | None,
         physic_ts: int, flushed: int = 0) -> int:
    """Scan from ``files[start_index]``; returns the offset just after the last valid record."""
    files: list[MappedFile] = commitlog.mapped_file_queue.mapped_files
    parse = commitlog.parse_record
    # what this scan checks by CRC is verified: broker.store.verify skips it (issue 13.3)
    commitlog.recovery_checked_from = files[start_index].file_from_offset if check_crc else None
    index = start_index
    pos = 0
    while True:
        mf = files[index]
        view = mf.whole()
        kind = END
        for kind, at, size, req, _ in walk(view, pos, len(view), parse, check_crc=check_crc):
            pos = at + size
            if kind == RECORD and dispatch is not None:
                dispatch(req)
        if kind != ROLL:  # a record that does not parse (or the file's end without a blank)
            _classify_failure(files, index, pos, physic_ts, flushed)
            break
        if index + 1 >= len(files):
            log.info("recovery met the end-of-file blank of the last file %s", mf.path)
            break
        index, pos = index + 1, 0
    return mf.file_from_offset + pos


def _flushed(checkpoint: _Checkpoint | None) -> int:
    """The checkpointed flushed offset, 0 when unknown (a checkpoint Apache wrote, or none)."""
    return int(getattr(checkpoint, "physic_flushed_offset", 0) or 0) if checkpoint is not None else 0


def _apply(commitlog: CommitLog, process_offset: int, start_index: int = 0) -> None:
    mfq = commitlog.mapped_file_queue
    mfq.flushed_where = process_offset
    mfq.committed_where = process_offset
    mfq.truncate_dirty_files(process_offset)
    # what a killed process left in the page cache is "flushed" from now on: make it so (issue 13.5)
    for mf in mfq.mapped_files[start_index:]:
        mf.force()
    commitlog.flush_service.recovered = True  # positions are real now: flushes may publish the flushed offset


def recover_normally(commitlog: CommitLog, checkpoint: _Checkpoint | None = None) -> int:
    """Recover after a clean shutdown; returns the recovered max offset (0, or ``classic_from``,
    if no files)."""
    files = commitlog.mapped_file_queue.mapped_files
    if not files:
        _apply(commitlog, commitlog.classic_from)
        return commitlog.classic_from
    physic_ts = checkpoint.physic_msg_timestamp if checkpoint is not None else 0
    start = max(0, len(files) - 3)
    offset = scan(commitlog, start, commitlog.check_crc_on_recover,
                  None, physic_ts, _flushed(checkpoint))
    _apply(commitlog, offset, start)
    return offset


def is_mapped_file_matched_recover(mf: MappedFile, checkpoint: _Checkpoint, index_safe: bool) -> bool:
    """Was the first message of this file stored before the checkpoint's safe instant?"""
    view = mf.whole()
    magic = int.from_bytes(view[4:8], "big", signed=True)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return False
    sys_flag = int.from_bytes(view[36:40], "big", signed=True)
    at = 56 + (12 if sys_flag & BORNHOST_V6_FLAG else 0)
    store_ts = int.from_bytes(view[at:at + 8], "big", signed=True)
    if store_ts == 0:
        return False
    limit = checkpoint.min_timestamp_index if index_safe else checkpoint.min_timestamp
    return store_ts <= limit


def recover_abnormally(commitlog: CommitLog, checkpoint: _Checkpoint, dispatch: Dispatch | None,
                       index_safe: bool = False) -> int:
    """Recover after a crash, re-dispatching from the last file known to be safe."""
    files = commitlog.mapped_file_queue.mapped_files
    if not files:
        _apply(commitlog, commitlog.classic_from)
        return commitlog.classic_from
    index = len(files) - 1
    while index >= 0 and not is_mapped_file_matched_recover(files[index], checkpoint, index_safe):
        index -= 1
    index = max(index, 0)
    log.info("abnormal recovery starts at %s", files[index].path)
    offset = scan(commitlog, index, commitlog.check_crc_on_recover, dispatch,
                  checkpoint.physic_msg_timestamp, _flushed(checkpoint))
    _apply(commitlog, offset, index)
    return offset


def recover_with_store(commitlog: CommitLog, store: StoreHost) -> None:
    """A classic store's recovery (``DefaultMessageStore.recover``): the ConsumeQueues first
    (where dispatch had got to), then the commitlog, normally after a clean stop or abnormally
    after a crash (re-dispatching what the ConsumeQueues miss); ConsumeQueue units beyond the
    recovered end are truncated."""
    cqs = store.consume_queue_store
    assert cqs is not None  # DefaultMessageStore.load made it
    max_phy_of_cq = cqs.recover()
    files = commitlog.mapped_file_queue.mapped_files
    if commitlog.regions is not None:  # a migrated store: the frozen regions first (module rules)
        assert store.checkpoint is not None
        cp, index_safe = store.checkpoint, store.settings.message_index_safe
        safe = store.last_exit_ok or any(is_mapped_file_matched_recover(f, cp, index_safe) for f in files)
        commitlog.regions.recover(store, max_phy_of_cq, not store.last_exit_ok, safe)
    elif not files and max_phy_of_cq >= 0:
        log.warning("the commitlog files are deleted; deleting the consume queues too")
        cqs.destroy()
        max_phy_of_cq = -1
    if store.last_exit_ok:
        end = recover_normally(commitlog, store.checkpoint)
    else:
        assert store.checkpoint is not None
        end = recover_abnormally(commitlog, store.checkpoint, store.do_dispatch, store.settings.message_index_safe)
    if max_phy_of_cq >= end:  # RocketMQ's condition; equality (a clean stop) truncates nothing
        if max_phy_of_cq > end:
            log.warning("consume queues reach %d beyond the commitlog end %d: truncating", max_phy_of_cq, end)
        cqs.truncate_dirty(end)

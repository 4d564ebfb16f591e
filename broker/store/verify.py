"""Record verification: what a read serves and what recovery accepts is checked by its CRCs.

Rules (issue 13.3):
- **Read guard.** With ``checkCRCOnRead`` (ours, default true) every record a read serves (a
  pull, a lookup by offset, msgId or key, in either region of either mode) is checked before it
  is returned: its TOTALSIZE is the size asked, its magic a message magic, its body length fits
  the record, the parts add up to TOTALSIZE, and BODYCRC matches the body. A DLedger entry whose
  own body CRC is set (our writer, ``dLegerEntryCrcEnable``) is checked by that CRC instead,
  which covers every byte of the message. Apache writes ``bodyCrc=0`` in DLedger entries and
  RocketMQ's message CRC covers only the body, so in such records a damaged topic or property
  is caught only when it breaks the structure: that is all the bytes allow.
- A record that fails is :class:`CorruptRecordError` (node, file, position, physical offset,
  reason, the fix), counted in :class:`CorruptionLog` (status and metrics); never data. A pull
  returns the good records before it and stops there; its next pull fails.
- **Verified checkpoint.** ``StoreCheckpoint.physic_verified_offset`` (@48, ours): every record
  below it has passed a CRC scan since it was written. Recovery (``store_verify.verify_after_recovery``)
  scans from there to the end of the recovered (DLedger: committed) data, both regions, skips
  what the classic recovery scan itself checked with CRCs, and moves the offset to the end;
  0 (a checkpoint Apache wrote, or none) means "never": the whole store is scanned once, with a
  progress line per file. A record that fails stops the start with the error (which names the
  fix, and ``checkCRCOnRecover=false`` to start anyway, reads still refusing that record).
- The verified offset never covers bytes that may still change: it is clamped to the recovered
  end at every recovery (a member dir moved away and replicated again is scanned again) and to
  the truncation point by every truncation.

Theory of operation: :func:`record_problem_at` is the cheap check (two struct unpacks and one
``crc32``, zlib's CRC-32); the reason text of a failure comes from the full decoder. The recovery scan walks
files with the same check, so read and recovery agree on what "corrupt" means.
"""
from __future__ import annotations

import collections
import logging
import struct
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from broker.store.crc import crc32
from broker.store.errors import StoreCorruptionError

from broker.store.message import (BLANK_MAGIC_CODE, BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2,
                                  STOREHOSTADDRESS_V6_FLAG, explain_invalid_record)
from broker.store.store_types import Buffer, JsonObject

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.mapped_file import MappedFile
    from dledger.store.file_store import DLedgerMmapFileStore

log = logging.getLogger(__name__)

DLEDGER_BODY_OFFSET = 48
_HEAD = struct.Struct(">iii")  # TOTALSIZE MAGIC BODYCRC
_I = struct.Struct(">i")
_II = struct.Struct(">ii")
_H = struct.Struct(">H")
_ENTRY = struct.Struct(">iiqqqiiii")  # DLedger entry header


class CorruptRecordError(StoreCorruptionError):
    """A committed record failed its CRC or structure check: names node, file, offset and fix."""

    def __init__(self, node: str, path: str, file_offset: int, physical_offset: int, reason: str,
                 fix: str) -> None:
        self.node = node
        self.fix = fix
        super().__init__(path, file_offset, physical_offset, reason)
        self.args = (f"node {node}: corrupt record in {path} at file offset {file_offset} (physical offset "
                     f"{physical_offset}): {reason}; {fix}",)

    def __str__(self) -> str:
        return str(self.args[0])


def record_problem_at(buf: Buffer, pos: int, size: int | None = None) -> str | None:
    """None if the classic record at ``buf[pos:]`` (of ``size`` bytes when given) is intact,
    else why not. Never raises for bad bytes."""
    limit = len(buf)
    if pos < 0 or pos + 91 > limit:
        return f"only {max(0, limit - pos)} bytes where a record of at least 91 is expected"
    total, magic, crc = _HEAD.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2:
        return explain_invalid_record(buf, pos)
    if (size is not None and total != size) or total < 91 or pos + total > limit:
        return (f"TOTALSIZE field {total} does not match the {size} bytes the queue recorded" if size is not None
                and total != size else f"TOTALSIZE field {total} does not fit the {limit - pos} bytes there")
    sys_flag = _I.unpack_from(buf, pos + 36)[0]
    at = pos + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8 + (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8)
    end = pos + total
    if at + 16 > end:
        return explain_invalid_record(buf, pos)
    body_len = _I.unpack_from(buf, at + 12)[0]
    body_at = at + 16
    if body_len < 0 or body_at + body_len + 3 > end:
        return explain_invalid_record(buf, pos)
    if body_len > 0 and (crc32(memoryview(buf)[body_at:body_at + body_len]) & 0x7FFFFFFF) != crc:
        return explain_invalid_record(buf, pos)
    at = body_at + body_len
    if magic == MESSAGE_MAGIC_CODE:
        topic_len, at = buf[at], at + 1
    else:
        topic_len, at = _H.unpack_from(buf, at)[0], at + 2
    if at + topic_len + 2 > end:
        return explain_invalid_record(buf, pos)
    props_len = _H.unpack_from(buf, at + topic_len)[0]
    if at + topic_len + 2 + props_len != end:
        return explain_invalid_record(buf, pos)
    return None


def dledger_record_problem(buf: Buffer, entry_pos: int, msg_size: int) -> str | None:
    """None if the message of the DLedger entry at ``buf[entry_pos:]`` is intact, else why not.

    An entry whose own body CRC is set is checked by it alone: it covers every byte of the body
    as written (a body that is not a message was appended as such and dispatch reports it).
    Apache's entries carry 0 there and get the record check."""
    if entry_pos < 0 or entry_pos + DLEDGER_BODY_OFFSET + msg_size > len(buf):
        return f"the entry at {entry_pos} does not fit the {len(buf)} bytes of its file"
    body_crc = _ENTRY.unpack_from(buf, entry_pos)[7]
    body_at = entry_pos + DLEDGER_BODY_OFFSET
    if body_crc == 0:
        return record_problem_at(buf, body_at, msg_size)
    actual = crc32(memoryview(buf)[body_at:body_at + msg_size])
    actual = actual - 0x1_0000_0000 if actual >= 0x8000_0000 else actual
    return None if actual == body_crc else f"DLedger entry body CRC mismatch: stored {body_crc}, computed {actual}"


class CorruptionLog:
    """Corrupt records met by reads and recovery: a counter, the last few, one log line each."""

    RECENT = 16

    def __init__(self) -> None:
        self.count = 0
        self.recent: collections.deque[JsonObject] = collections.deque(maxlen=self.RECENT)
        self._lock = threading.Lock()

    def report(self, exc: CorruptRecordError) -> None:
        with self._lock:
            self.count += 1
            self.recent.append({"node": exc.node, "file": exc.path, "filePos": exc.file_offset,
                                "offset": exc.physical_offset, "reason": exc.reason})
        log.error("%s", exc)

    def status(self) -> JsonObject:
        with self._lock:
            return {"corruptRecords": self.count, "lastCorrupt": list(self.recent)}


def fix_for_classic(store_dir: str) -> str:
    return (f"this copy is damaged: stop the broker and restore the file from the other broker of the pair "
            f"(or from a backup) into {store_dir}; the other copy is intact if its reads of this offset succeed")


def fix_for_old_region() -> str:
    return ("this copy of the old (pre-upgrade) commitlog is damaged: stop this broker and run "
            "'mqupgrade reseed' from a healthy member of the group to copy the region again")


def fix_for_dledger(member_dir: str) -> str:
    return (f"this copy of the DLedger log is damaged: stop this broker, move {member_dir} away and restart "
            "it; the leader re-replicates the log (then 'mqupgrade validate' to check it)")


# --- recovery ---------------------------------------------------------------------------------

def _classic_records(files: Sequence[MappedFile], start: int, end: int) -> Iterator[tuple[MappedFile, int, int]]:
    """(mapped file, position, physical offset) of each classic record ending after ``start``
    and starting before ``end``. Each file is walked from its first record (a hop per record),
    so ``start`` need not be a record boundary."""
    for mf in files:
        base, size = mf.file_from_offset, mf.file_size
        if base + size <= start or base >= end:
            continue
        view = mf.whole()
        pos = 0
        stop = min(size, end - base)
        while pos + 8 <= stop:
            total, magic = _II.unpack_from(view, pos)
            if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or total <= 0:
                if base + pos >= start and magic != BLANK_MAGIC_CODE:
                    yield mf, pos, base + pos  # not a record where one must be: the check says why
                break  # the end-of-file blank: the next file
            if base + pos + total > start:
                yield mf, pos, base + pos
            pos += total


def verify_classic_range(files: Sequence[MappedFile], start: int, end: int, node: str, fix: str,
                         progress: "Progress") -> int:
    """CRC-check every record of the classic commitlog ``files`` in ``[start, end)``; returns the count."""
    count = 0
    for mf, pos, phy in _classic_records(files, start, end):
        problem = record_problem_at(mf.whole(), pos)
        if problem is not None:
            raise CorruptRecordError(node, str(mf.path), pos, phy, problem, fix)
        count += 1
        progress.tick(mf.path, phy)
    return count


def verify_dledger_range(dl: DLedgerMmapFileStore, start: int, end: int, node: str, fix: str, progress: "Progress") -> int:
    """CRC-check the message of every DLedger entry ending after ``start`` and starting before
    ``end`` (entries are walked from each file's first); returns the count."""
    count = 0
    for f in list(dl.data_file_list.files):
        base = f.from_offset
        if base + f.file_size <= start or base >= end:
            continue
        pos = f.start
        stop = min(f.wrote, end - base)
        mm = f.mm
        while pos + DLEDGER_BODY_OFFSET <= stop:
            magic, size = _II.unpack_from(mm, pos)
            if magic == -1:
                break  # DLedger's end-of-file blank
            if size <= DLEDGER_BODY_OFFSET or pos + size > f.wrote:
                raise CorruptRecordError(node, str(f.path), pos, base + pos,
                                         f"DLedger entry header damaged (magic {magic}, size {size})", fix)
            if base + pos + size > start:
                problem = dledger_record_problem(mm, pos, size - DLEDGER_BODY_OFFSET)
                if problem is not None:
                    raise CorruptRecordError(node, str(f.path), pos + DLEDGER_BODY_OFFSET,
                                             base + pos + DLEDGER_BODY_OFFSET, problem, fix)
                count += 1
                progress.tick(f.path, base + pos)
            pos += size
    return count


class Progress:
    """One log line per file (and at most one per 5 s inside a huge one) during a long scan."""

    def __init__(self, end: int) -> None:
        self.end = end
        self.path: Path | str | None = None
        self.last = time.monotonic()

    def tick(self, path: Path | str, offset: int) -> None:
        now = time.monotonic()
        if path != self.path or now - self.last > 5.0:
            self.path, self.last = path, now
            log.info("verifying records: %s (offset %d of %d)", getattr(path, "name", path), offset, self.end)

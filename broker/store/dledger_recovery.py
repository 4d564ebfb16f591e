"""Load-time recovery of a DLedger commitlog store: both address spaces and the ConsumeQueues.

Rules (seed 001, reference §4.3, DESIGN §4.4):
- ConsumeQueues are recovered first (``max_phy_of_cq`` = where dispatch had got to).
- **DLedger data files present**: the DLedger store recovers them (the DLedgerServer does it
  when constructed); ``divided_commitlog_offset`` = the first DLedger data file's start; the
  old commitlog, if any, is not touched (it is frozen: every old file is read to its end, the
  last one ending in its classic blank); ConsumeQueue units at or beyond the DLedger max wrote
  position are truncated (Apache's ``>=``; equality truncates nothing). DLedger files are kept
  from deletion while old files exist (``DLedgerCommitLog.delete_expired_files``).
- **No DLedger data file, old commitlog present** (first start after an upgrade, or a node
  whose DLedger dir was emptied before its first entry): the old commitlog is recovered
  classically (normally, or abnormally with re-dispatch when ``abort`` is present), CQ units
  beyond its end are truncated, the classic blank ``[remaining][0xCBD43194]`` is written at its
  tail unless already there (``broker.store.freeze.freeze_commitlog``), the last old file is marked
  full, ``divided_commitlog_offset = lastFile.fromOffset + fileSize``, and the DLedger data
  list's first file is created with that name (the index list starts at 0).
- **Neither** (a fresh node, or a follower whose data dir was wiped): DLedger starts at 0 and
  the ConsumeQueues are kept as they are. Apache 4.9.8 destroys them here (its classic
  "commitlog files are deleted" branch); we never do (DESIGN §4.4): they are what the node had
  dispatched, and they come back into agreement as the log is replicated.
- **Abnormal exit** (``abort`` present) with DLedger files: walk the DLedger data files from
  the newest back to the first whose first message was stored no later than the checkpoint's
  safe instant (``min_timestamp``, or ``min_timestamp_index`` when ``messageIndexSafe``), and
  re-dispatch every *committed* entry from there, advancing by the entry size (message + 48),
  so the IndexFile (dropped after a crash) and any lost CQ tail are rebuilt. Apache 4.9.8 has
  no such step and 5.x advances by the message size (reference §4.3 note).
- Re-dispatch (of either commitlog) passes the same check as a send and as the
  ReputMessageService: a record with an invalid topic or queue id, or a committed DLedger
  entry whose body is not a message (its frame is DLedger's, so its size is known), is
  reported to ``store.skipped`` with file and position and skipped; nothing is truncated for
  it. Only bytes that are not even an entry frame stop recovery (StoreCorruptionError). The
  old region's re-dispatch goes through ``store.do_dispatch``, which applies the same check.

Theory of operation: one function, :func:`recover_dledger_commitlog`, called by
``DefaultMessageStore.recover`` through ``DLedgerCommitLog.recover_with_store``; it uses the
classic recovery functions on the old commitlog and the DLedger store's own recovery for the
new files, and only decides the order and the glue.
"""
from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from broker.store import commitlog_recovery
from broker.store.dispatch import locate
from broker.store.dledger_dispatch import DLEDGER_BODY_OFFSET, explain_dledger_record
from broker.store.message import BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from broker.store.record_walk import BAD, RECORD, ROLL, SKIP, walk
from broker.store.freeze import freeze_commitlog

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.commitlog import CommitLog, SelectMappedBufferResult
    from broker.store.checkpoint import StoreCheckpoint
    from broker.store.dispatch import DispatchRequest
    from broker.store.freeze import FreezePoint
    from broker.store.store_types import Buffer
    from broker.store.store_host import StoreHost
    from dledger.config import DLedgerConfig
    from dledger.store.file_store import DLedgerMmapFileStore

log = logging.getLogger(__name__)

_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class RecoveringLog(Protocol):
    """What recovery uses of the DLedgerCommitLog it recovers (this module does not import it:
    the commitlog imports this module)."""

    old: CommitLog
    dledger_config: DLedgerConfig
    divided_commitlog_offset: int
    mapped_file_size: int
    freeze_point: FreezePoint | None

    def open_dledger(self, first_data_offset: int) -> None: ...

    def opened_store(self) -> DLedgerMmapFileStore: ...

    def get_data(self, offset: int, return_first_on_not_found: bool | None = None
                 ) -> SelectMappedBufferResult | None: ...

    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest: ...

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int: ...

    def roll_next_file(self, offset: int) -> int: ...


def has_dledger_data_files(data_dir: str | Path) -> bool:
    d = Path(data_dir)
    # a 0-byte file is an interrupted creation the file list removes at load (issue 13.4): not data
    return d.is_dir() and any(p.is_file() and len(p.name) == 20 and p.name.isdigit() and p.stat().st_size > 0
                              for p in d.iterdir())


def recover_dledger_commitlog(store: StoreHost, cl: RecoveringLog) -> None:
    """Recover ``cl`` (already loaded) and ``store``'s ConsumeQueues; see the module rules."""
    cqs = store.consume_queue_store
    assert cqs is not None  # DefaultMessageStore.load made it
    cqs.update_physic_timestamp_on_dispatch = True  # the DLedger commitlog never updates it itself
    max_phy_of_cq = cqs.recover()
    old_files = cl.old.mapped_file_queue.mapped_files
    if has_dledger_data_files(cl.dledger_config.data_dir):
        cl.open_dledger(-1)
        dl = cl.opened_store()
        first = dl.data_file_list.first_file
        cl.divided_commitlog_offset = first.from_offset if first is not None else -1
        max_wrote = dl.data_file_list.max_wrote_position
        log.info("DLedger commitlog recovered: divided offset %d, DLedger [%d, %d), committed pos %d, "
                 "old files %d", cl.divided_commitlog_offset, dl.data_file_list.min_offset, max_wrote,
                 dl.committed_pos, len(old_files))
        if max_phy_of_cq >= max_wrote:
            if max_phy_of_cq > max_wrote:
                log.warning("consume queues reach %d beyond the DLedger max %d: truncating", max_phy_of_cq, max_wrote)
            cqs.truncate_dirty(max_wrote)
        if not store.last_exit_ok:
            redispatch_after_crash(store, cl)
        return
    if old_files:
        if store.last_exit_ok:
            end = commitlog_recovery.recover_normally(cl.old, store.checkpoint)
        else:
            assert store.checkpoint is not None
            end = commitlog_recovery.recover_abnormally(cl.old, store.checkpoint, store.do_dispatch,
                                                        store.settings.message_index_safe)
        if max_phy_of_cq >= end:
            if max_phy_of_cq > end:
                log.warning("consume queues reach %d beyond the old commitlog end %d: truncating", max_phy_of_cq, end)
            cqs.truncate_dirty(end)
        files = cl.old.mapped_file_queue.mapped_files
        last = files[-1]
        point = freeze_commitlog(cl.old.store_path, end, cl.mapped_file_size)
        last.set_positions(cl.mapped_file_size)
        cl.old.mapped_file_queue.flushed_where = cl.old.mapped_file_queue.committed_where = \
            last.file_from_offset + cl.mapped_file_size
        cl.divided_commitlog_offset = point.divided_commitlog_offset
        cl.freeze_point = point
        log.info("old commitlog frozen: blank %s at %d of %s, divided offset %d",
                 "found" if point.blank_present else "written", point.wrote_position, last.path.name,
                 point.divided_commitlog_offset)
        cl.open_dledger(point.divided_commitlog_offset)
        cl.opened_store().data_file_list.get_last_mapped_file(point.divided_commitlog_offset)
        return
    cl.divided_commitlog_offset = -1
    cl.open_dledger(-1)
    if max_phy_of_cq >= 0:
        log.warning("no commitlog data at all but consume queues reach %d: keeping them (DESIGN §4.4); "
                    "they are re-aligned as the log is replicated", max_phy_of_cq)


def _file_matches(mm: Buffer, start: int, limit: int, index_safe: bool, checkpoint: StoreCheckpoint) -> bool:
    """The first message of a DLedger data file was stored before the checkpoint's safe instant."""
    at = start + DLEDGER_BODY_OFFSET
    if at + 76 > limit:
        return False
    magic = _I.unpack_from(mm, at + 4)[0]
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return False
    sys_flag = _I.unpack_from(mm, at + 36)[0]
    store_ts = _Q.unpack_from(mm, at + (68 if sys_flag & BORNHOST_V6_FLAG else 56))[0]
    if store_ts == 0:
        return False
    safe = checkpoint.min_timestamp_index if index_safe else checkpoint.min_timestamp
    return store_ts <= safe


def redispatch_after_crash(store: StoreHost, cl: RecoveringLog) -> int:
    """Re-dispatch committed DLedger entries from the last safe data file; returns the count."""
    dl = cl.opened_store()
    files = dl.data_file_list.files
    committed = dl.committed_pos
    if not files or committed <= 0:
        return 0
    index = len(files) - 1
    checkpoint = store.checkpoint
    assert checkpoint is not None  # DefaultMessageStore.load made it before recovery
    while index >= 0 and not _file_matches(files[index].mm, files[index].start, files[index].wrote,
                                           store.settings.message_index_safe, checkpoint):
        index -= 1
    f = files[max(index, 0)]
    offset = f.from_offset + f.start
    log.info("abnormal recovery re-dispatches committed DLedger entries from %d (file %s) to %d",
             offset, f.path.name, committed)
    count = 0
    while offset < committed:
        res = cl.get_data(offset)
        if res is None:
            break
        buf, base, pos = res.buffer, res.start_offset, 0
        rolled = False
        for kind, at, size, req, why in walk(buf, 0, len(buf), cl.parse_record, check_crc=True, check_names=True,
                                             entry_size_at=cl.entry_size_at, base=base):
            pos = at + size
            if kind == RECORD:
                store.do_dispatch(req)
                count += 1
            elif kind == SKIP:
                _report(store, res, base + at, why if req.success else f"{why}: {explain_dledger_record(buf, at)}")
            elif kind == ROLL:
                rolled = True
            elif kind == BAD:
                raise_corrupt(cl, base + pos, buf, pos)
        offset = cl.roll_next_file(base + pos) if rolled else base + pos
        if not rolled and pos == 0:
            break
    return count


def _report(store: StoreHost, res: SelectMappedBufferResult | None, offset: int, reason: str) -> None:
    path, file_pos = locate(res.mapped_file if res is not None else None, offset)
    store.skipped.report(path, file_pos, offset, reason)


def raise_corrupt(cl: RecoveringLog, offset: int, buf: Buffer, pos: int) -> None:
    from broker.store.errors import StoreCorruptionError

    f = cl.opened_store().data_file_list.find_file(offset)
    path = str(f.path) if f is not None else str(cl.dledger_config.data_dir)
    file_pos = offset - f.from_offset if f is not None else -1
    raise StoreCorruptionError(path, file_pos, offset,
                               f"committed DLedger data does not parse: {explain_dledger_record(buf, pos)}")

"""CommitLog (classic): the single append-only log every message of a broker goes into.

Rules:
- Records are RocketMQ commitlog records (``message.py``) in 20-digit-named files of
  ``mappedFileSizeCommitLog`` bytes. A record never straddles files: if ``msgLen + 8`` exceeds
  what is left, the 8-byte blank ``[remaining][0xCBD43194]`` is written and the record goes to
  the next file (so every full file ends in a blank).
- Under one put lock a put (one message or a batch, any mix of topics) gets, per message, its
  queue offset from ``topic_queue_table`` (``(topic, queueId) -> next offset``; PREPARED and
  ROLLBACK transactional messages get 0 and do not advance it), its PHYSICALOFFSET (where it
  lands) and, unless the caller keeps its own (tests, replication), its STORETIMESTAMP = now.
  A batch is an atomic run of single puts: byte-identical to putting the messages one by one.
- Readers only see committed bytes; ``get_data`` returns a zero-copy view from an offset to
  the end of what is readable in that file.
- Durability per ``flushDiskType`` (``flush.py``); then an optional replica hook (classic HA's
  GroupTransferService) may turn PUT_OK into FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE.
- The record parser is the method :meth:`parse_record`; a DLedger commitlog overrides it (and
  the write path) and keeps reading the old classic files through this class.
- A store migrated from DLedger mode (``commitlog_regions``) gives this class its frozen
  regions (:class:`FrozenRegions`) and ``classic_from``: the files owned here start there (max
  offset ``classic_from`` while there is none), ``min_offset`` is the oldest region's, reads by
  offset below ``classic_from`` (:meth:`get_message`, :meth:`get_record`,
  :meth:`look_message_by_offset`, :meth:`pickup_store_timestamp`) go to the regions, and
  :meth:`get_data` (what HA ships and dispatch reads), :meth:`append_data`,
  :meth:`truncate_dirty_files` and :meth:`reset_offset` refuse offsets below it: HA never ships
  nor rewrites a frozen byte. Retention deletes frozen files (oldest first) before owned ones.

Theory of operation: encoding (CRC, struct packing) happens outside the lock into one
bytearray (``encode_batch``). Inside the lock only the per-message patch of QUEUEOFFSET,
PHYSICALOFFSET and STORETIMESTAMP is done, then every run of records that fits the current
file is copied into the mmap with a single slice assignment. Recovery lives in
``commitlog_recovery.py``.
"""
from __future__ import annotations

import asyncio
import logging
import os
import struct
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Final, Sequence

from broker.store import commitlog_recovery
from broker.store.dispatch import DispatchRequest, StoreFile
from broker.store.errors import MessageFormatError
from broker.store.flush import FlushRealTimeService, FlushService, GroupCommitService
from broker.store.mapped_file import MappedFile
from broker.store.mapped_file_queue import AllocateMappedFileService, MappedFileQueue
from broker.store.message import (
    DEFAULT_DELAY_LEVELS, END_FILE_MIN_BLANK_LENGTH, MessageExt, PropertiesSizeExceeded,
    blank_record, check_message_and_return_size, decode_message, encode_batch, explain_invalid_record,
    store_timestamp_position,
)
from broker.store.verify import CorruptionLog, CorruptRecordError, fix_for_classic, record_problem_at
from broker.store.put_result import (
    AppendMessageResult, PutMessageResult, PutMessageStatus,
)
from broker.store.store_settings import ASYNC_FLUSH, SYNC_FLUSH
from broker.tasks import wait_for

if TYPE_CHECKING:
    from broker.store.checkpoint import StoreCheckpoint
    from broker.store.region_seam import FrozenRegions
    from broker.store.page_crc import PageChecksums
    from broker.store.store_host import StoreHost

log = logging.getLogger(__name__)

_QP: Final = struct.Struct(">qq")
_Q: Final = struct.Struct(">q")
_I: Final = struct.Struct(">i")

ReplicaHook = Callable[[AppendMessageResult], "Future[PutMessageStatus] | None"]


class SelectMappedBufferResult:
    """A zero-copy view of committed bytes starting at absolute ``start_offset``.

    (A plain class: compiled, mypyc's dataclass support cannot name ``memoryview``.)"""

    __slots__ = ("start_offset", "buffer", "mapped_file")

    def __init__(self, start_offset: int, buffer: memoryview, mapped_file: StoreFile) -> None:
        self.start_offset = start_offset
        self.buffer = buffer
        self.mapped_file = mapped_file  # a classic MappedFile, or a DLedger MmapFile above the divide

    def __repr__(self) -> str:
        return f"SelectMappedBufferResult(start_offset={self.start_offset}, size={len(self.buffer)})"

    @property
    def size(self) -> int:
        return len(self.buffer)


class CommitLog:
    """The classic commitlog: writes, reads, offsets; recovery in ``commitlog_recovery``."""

    is_dledger = False  # DLedgerCommitLog: True (puts complete on a quorum commit, it recovers itself)
    #: where a DLedger region would begin: none here (DLedgerCommitLog: its divide)
    divided_commitlog_offset = -1
    #: the DLedger files of the offset space: none here (DLedgerCommitLog: its DLedger store)
    dledger_region: None = None

    def __init__(
        self,
        store_path: str | os.PathLike[str],
        mapped_file_size: int = 1 << 30,
        *,
        max_message_size: int = 4 * 1024 * 1024,
        flush_disk_type: str = ASYNC_FLUSH,
        flush_interval_ms: int = 500,
        flush_least_pages: int = 4,
        flush_thorough_interval_ms: int = 10_000,
        sync_flush_timeout_ms: int = 5000,
        checkpoint: StoreCheckpoint | None = None,
        warm_mapped_file: bool = False,
        check_crc_on_recover: bool = True,
        delay_levels: Sequence[int] = DEFAULT_DELAY_LEVELS,
        regions: FrozenRegions | None = None,
    ) -> None:
        if flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise ValueError(f"flushDiskType must be ASYNC_FLUSH or SYNC_FLUSH, got {flush_disk_type!r}")
        self.store_path = os.fspath(store_path)
        self.mapped_file_size = mapped_file_size
        self.max_message_size = max_message_size
        self.flush_disk_type = flush_disk_type
        self.check_crc_on_recover = check_crc_on_recover
        self.recovery_checked_from: int | None = None  # set by commitlog_recovery.scan (CRC-checked from here)
        self.delay_levels = tuple(delay_levels)
        self.checkpoint = checkpoint
        self.allocate_service = AllocateMappedFileService(warm=warm_mapped_file)
        self.regions = regions
        self.classic_from = regions.classic_from if regions is not None else 0
        self._refused_logged = -1  # the last refused HA read logged (one line per offset)
        self.mapped_file_queue = MappedFileQueue(store_path, mapped_file_size, self.allocate_service,
                                                 first_file_offset=self.classic_from)
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self._put_lock = threading.Lock()
        self._confirm_offset = -1
        self.replica_hook: ReplicaHook | None = None
        # called after every successful put's append, before its durability wait (the store wakes
        # dispatch with it, so the ConsumeQueues fill while the put waits for its flush or slave)
        self.on_appended: Callable[[], None] | None = None
        self.writable = True
        # the read guard (broker.store.verify): set by the store, which knows the node's name
        self.verify_reads = True
        self.page_crc: PageChecksums | None = None  # brokers: checked by the read guard (page_crc.py)
        self.node_label = self.store_path
        self.corrupt_fix = fix_for_classic(self.store_path)
        self.corruption = CorruptionLog()
        if flush_disk_type == SYNC_FLUSH:
            self.flush_service: FlushService = GroupCommitService(
                self.mapped_file_queue, checkpoint, sync_flush_timeout_ms)
        else:
            self.flush_service = FlushRealTimeService(
                self.mapped_file_queue, checkpoint, flush_interval_ms, flush_least_pages,
                flush_thorough_interval_ms)
        self._started = False

    # --- life cycle -------------------------------------------------------------------------
    def recover_with_store(self, store: StoreHost) -> None:
        """Recover this commitlog and the store's ConsumeQueues (``commitlog_recovery``)."""
        commitlog_recovery.recover_with_store(self, store)

    def load(self) -> None:
        self.mapped_file_queue.load()
        if self.regions is not None:  # the store has set the read guard by now
            self.regions.configure_reads(self.verify_reads, self.node_label, self.corruption)
        # no file: the (zero) positions are already true; otherwise recovery must set them first
        self.flush_service.recovered = not self.mapped_file_queue.mapped_files

    def start(self) -> None:
        if not self._started:
            self.flush_service.start()
            self._started = True

    def shutdown(self) -> None:
        """Flush everything (stopping the flush thread) and unmap."""
        self.writable = False
        self.flush_service.shutdown()
        self.allocate_service.shutdown()
        self.mapped_file_queue.shutdown()
        if self.regions is not None:
            self.regions.close()
        self._started = False

    def flush(self) -> int:
        """Flush everything committed now (caller's thread); returns the flushed offset."""
        where = self.mapped_file_queue.flush_all()
        if self.checkpoint is not None and self.mapped_file_queue.store_timestamp:
            self.checkpoint.physic_msg_timestamp = self.mapped_file_queue.store_timestamp
        return where

    # --- regions: the same questions asked of either commitlog (no isinstance above them) ---
    @property
    def classic_region(self) -> "CommitLog":
        """The classic commitlog files of this offset space: all of them here (a
        DLedgerCommitLog answers its frozen old region)."""
        return self

    @property
    def classic_region_end(self) -> int:
        """Where the classic files' readable bytes end: the max offset here."""
        return self.max_offset

    # --- offsets ----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        if self.regions is not None:
            frozen = self.regions.min_offset
            if frozen >= 0:
                return frozen
        first = self.mapped_file_queue.first()
        return first.file_from_offset if first is not None else -1

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    @property
    def flushed_offset(self) -> int:
        return self.mapped_file_queue.flushed_where

    @property
    def confirm_offset(self) -> int:
        """Offset up to which the log is confirmed (HA); the max offset unless set."""
        return self.max_offset if self._confirm_offset < 0 else self._confirm_offset

    @confirm_offset.setter
    def confirm_offset(self, value: int) -> None:
        self._confirm_offset = value

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    def remain_how_many_data_to_flush(self) -> int:
        return self.mapped_file_queue.remain_how_many_data_to_flush()

    # --- parsing (pluggable) ----------------------------------------------------------------
    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest:
        """Describe the record at ``pos`` of ``buf`` (``checkMessageAndReturnSize``)."""
        return check_message_and_return_size(buf, pos, check_crc, self.delay_levels)

    @property
    def member_stopped_reason(self) -> str | None:
        """Why this commitlog's replication member stopped itself: never, for a classic one."""
        return None

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int:
        """-1: classic records have no outer frame to skip a bad one by (dispatch stops there)."""
        return -1

    def explain_record(self, buf: memoryview, pos: int) -> str:
        """Why the bytes at ``pos`` are not a record (stall and skip reports)."""
        return explain_invalid_record(buf, pos)

    # --- writing ----------------------------------------------------------------------------
    def put_message(self, msg: MessageExt, keep_store_timestamp: bool = False) -> PutMessageResult:
        return self.put_messages([msg], keep_store_timestamp)

    def put_messages(self, msgs: Sequence[MessageExt], keep_store_timestamp: bool = False) -> PutMessageResult:
        """Append, then wait for the flush policy and the replica hook (blocking)."""
        result = self.append_messages(msgs, keep_store_timestamp)
        if result.status is not PutMessageStatus.PUT_OK or result.append_result is None:
            return result
        if self.on_appended is not None:
            self.on_appended()
        status = self.wait_for_durability(result.append_result, msgs)
        if status is not PutMessageStatus.PUT_OK:
            result.status = status
        return result

    async def put_messages_async(self, msgs: Sequence[MessageExt], keep_store_timestamp: bool = False
                                 ) -> PutMessageResult:
        """As :meth:`put_messages`, awaiting the flush and replica futures instead of blocking.

        The flush and the slave's ack are requested together and run at once (Apache 5's
        ``handleDiskFlushAndHA``): a SYNC_FLUSH SYNC_MASTER put waits for the slower of the two,
        not their sum; a replica failure wins over a flush that succeeded."""
        result = self.append_messages(msgs, keep_store_timestamp)
        ar = result.append_result
        if result.status is not PutMessageStatus.PUT_OK or ar is None:
            return result
        if self.on_appended is not None:
            self.on_appended()
        status = PutMessageStatus.PUT_OK
        fut = self.submit_flush_request(ar, msgs)
        rep = self.submit_replica_request(ar)
        if fut is not None:
            try:
                status = await wait_for(asyncio.wrap_future(fut), self._flush_timeout() + 0.1)
            except asyncio.TimeoutError:
                status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        if rep is not None:
            rstatus = await asyncio.wrap_future(rep)
            if rstatus is not PutMessageStatus.PUT_OK:
                status = rstatus
        result.status = status
        return result

    def wait_for_durability(self, ar: AppendMessageResult, msgs: Sequence[MessageExt] = ()) -> PutMessageStatus:
        """Block on the flush (SYNC_FLUSH) and replica waits of an appended result (requested
        together, as :meth:`put_messages_async`)."""
        status = PutMessageStatus.PUT_OK
        fut = self.submit_flush_request(ar, msgs)
        rep = self.submit_replica_request(ar)
        if fut is not None:
            try:
                status = fut.result(timeout=self._flush_timeout() + 0.05)
            except TimeoutError:
                status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        if rep is not None:
            rstatus = rep.result()
            if rstatus is not PutMessageStatus.PUT_OK:
                status = rstatus
        return status

    def _flush_timeout(self) -> float:
        svc = self.flush_service
        return svc.timeout_ms / 1000.0 if isinstance(svc, GroupCommitService) else 0.0

    def submit_flush_request(self, ar: AppendMessageResult,
                             msgs: Sequence[MessageExt] = ()) -> "Future[PutMessageStatus] | None":
        """SYNC_FLUSH: a future completed by the group commit; ASYNC_FLUSH: None (just wake up)."""
        svc = self.flush_service
        if isinstance(svc, GroupCommitService):
            if msgs and not any(m.wait_store_msg_ok for m in msgs):
                svc.wakeup()
                return None
            return svc.put_request(ar.end_offset).future
        if self.mapped_file_queue.remain_how_many_data_to_flush() > (1 << 20):
            svc.wakeup()
        return None

    def submit_replica_request(self, ar: AppendMessageResult) -> "Future[PutMessageStatus] | None":
        hook = self.replica_hook
        return hook(ar) if hook is not None else None

    def append_messages(self, msgs: Sequence[MessageExt], keep_store_timestamp: bool = False) -> PutMessageResult:
        """Encode and append under the put lock; no durability wait. Never raises for bad input."""
        if not self.writable:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="commitlog is not writable")
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error="empty batch")
        try:
            batch = encode_batch(msgs, self.max_message_size)
        # (one name per except clause: compiled, a name keeps the type of its first clause)
        except PropertiesSizeExceeded as too_big:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, error=str(too_big))
        except MessageFormatError as bad:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=str(bad))
        if max(batch.sizes) + END_FILE_MIN_BLANK_LENGTH > self.mapped_file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    error=f"record of {max(batch.sizes)} bytes cannot fit a "
                                          f"{self.mapped_file_size}-byte commitlog file")
        try:
            ar = self._append_encoded(msgs, batch.data, batch.starts, batch.sizes, keep_store_timestamp)
        except OSError as exc:
            log.error("create/append mapped file failed in %s: %s", self.store_path, exc)
            return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, error=str(exc))
        return PutMessageResult(PutMessageStatus.PUT_OK, ar)

    def _append_encoded(self, msgs: Sequence[MessageExt], data: bytearray, starts: list[int],
                        sizes: list[int], keep_ts: bool) -> AppendMessageResult:
        view = memoryview(data)
        fsize = self.mapped_file_size
        n_msgs = len(msgs)
        phys = [0] * n_msgs
        qoffs = [0] * n_msgs
        pack_qp = _QP.pack_into
        pack_q = _Q.pack_into
        with self._put_lock:
            now = int(time.time() * 1000)
            mfq = self.mapped_file_queue
            n_before = len(mfq.mapped_files)
            mf = mfq.get_last_mapped_file(0)
            assert mf is not None
            touched = [mf]
            first_pos = mf.wrote_position
            table = self.topic_queue_table
            local: dict[tuple[str, int], int] = {}
            base = mf.file_from_offset
            file_pos = mf.wrote_position
            run_start = 0
            last_ts = 0
            try:
                for i in range(n_msgs):
                    msg = msgs[i]
                    s = starts[i]
                    n = sizes[i]
                    if file_pos + n + END_FILE_MIN_BLANK_LENGTH > fsize:
                        if s > run_start:
                            mf.append(view[run_start:s], publish=False)
                            mf.store_timestamp = last_ts
                        mf.append_end_of_file(blank_record(fsize - file_pos), publish=False)
                        mf = mfq.get_last_mapped_file(0)
                        assert mf is not None and mf.wrote_position == 0
                        touched.append(mf)
                        base = mf.file_from_offset
                        file_pos = 0
                        run_start = s
                    key = (msg.topic, msg.queue_id)
                    tran = msg.sys_flag & 0xC
                    if tran == 0x4 or tran == 0xC:
                        qo = 0
                    else:
                        got = local.get(key)
                        qo = table.get(key, 0) if got is None else got
                        local[key] = qo + 1
                    phy = base + file_pos
                    pack_qp(data, s + 20, qo, phy)
                    if keep_ts:
                        last_ts = msg.store_timestamp
                    else:
                        pack_q(data, s + (68 if data[s + 39] & 0x10 else 56), now)  # STORETIMESTAMP
                        last_ts = now
                    phys[i] = phy
                    qoffs[i] = qo
                    file_pos += n
                mf.append(view[run_start:], publish=False)
            except BaseException:
                self._roll_back(touched, first_pos, n_before)
                raise
            mf.store_timestamp = last_ts
            for f in touched:  # visible to readers (dispatch, HA) only once the whole batch is in
                f.publish()
            table.update(local)
        end = phys[-1] + sizes[-1]
        return AppendMessageResult(
            wrote_offset=phys[0], wrote_bytes=len(data), store_timestamp=last_ts,
            logics_offset=qoffs[0], msg_num=n_msgs, physical_offsets=phys, queue_offsets=qoffs,
            store_hosts=[m.store_host for m in msgs], end_offset=end, sizes=sizes,
        )

    def _roll_back(self, touched: list[MappedFile], first_pos: int, n_before: int) -> None:
        """Undo a put that failed part way (a full disk): nothing of it was published, and
        nothing of it stays on disk (a crash must not resurrect a refused put)."""
        mfq = self.mapped_file_queue
        created = mfq.mapped_files[n_before:]
        mfq.mapped_files = mfq.mapped_files[:n_before]
        for f in created:
            f.destroy()
        first = touched[0]
        if first not in created:
            first.wrote_position = first_pos
            first.zero_from(first_pos)
        log.warning("put rolled back in %s: nothing of it is in the commitlog", self.store_path)

    def append_data(self, start_offset: int, data: bytes | bytearray | memoryview) -> bool:
        """HA slave: append raw commitlog bytes that must land exactly at the current max offset."""
        if start_offset < self.classic_from:
            log.error("append_data at %d refused: below classicFrom %d (the frozen regions are never written)",
                      start_offset, self.classic_from)
            return False
        with self._put_lock:
            mfq = self.mapped_file_queue
            if start_offset != mfq.get_max_wrote_position() and mfq.last() is not None:
                log.error("append_data at %d but commitlog ends at %d", start_offset,
                          mfq.get_max_wrote_position())
                return False
            view = memoryview(data)
            at = start_offset
            try:
                while view:
                    mf = mfq.get_last_mapped_file(at)
                    if mf is None or mf.file_from_offset + mf.wrote_position != at:
                        return False
                    take = min(len(view), mf.remaining)
                    mf.append(view[:take])
                    view = view[take:]
                    at += take
            except OSError as exc:  # a full disk (DiskFullError names the file): keep what is in
                log.error("HA append at %d refused in %s: %s", at, self.store_path, exc)
                return False
            return True

    # --- reading ----------------------------------------------------------------------------
    def get_data(self, offset: int, return_first_on_not_found: bool | None = None) -> SelectMappedBufferResult | None:
        """Committed bytes from ``offset`` to the readable end of its file."""
        if offset < self.classic_from:
            self._refuse_below(offset)
            return None
        if return_first_on_not_found is None:
            return_first_on_not_found = offset == 0
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, return_first_on_not_found)
        if mf is None:
            return None
        pos = offset % self.mapped_file_size
        view = mf.select(pos)
        if view is None:
            return None
        return SelectMappedBufferResult(mf.file_from_offset + pos, view, mf)

    def _refuse_below(self, offset: int) -> None:
        if self._refused_logged != offset:
            self._refused_logged = offset
            log.warning("get_data(%d) refused: below classicFrom %d, in the frozen regions of this migrated store, "
                        "which are read by message (get_message, lookups) and never shipped raw (HA: a replica gets "
                        "them from its own copy or `mqupgrade reseed`)", offset, self.classic_from)

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None:
        """The ``size`` bytes of the record at ``offset``, verified (``broker.store.verify``);
        ``checked_pages``: pages already checked by this pull (each is checked once per pull)."""
        if self.regions is not None and offset < self.classic_from:
            return self.regions.get_message(offset, size, checked_pages)
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mf is None:
            return None
        pos = offset % self.mapped_file_size
        view = mf.select(pos, size)
        if view is not None and self.verify_reads:
            self._verify(view, mf, pos, offset, size, checked_pages)
        return view

    def get_record(self, offset: int) -> memoryview | None:
        """The whole record at ``offset`` (its size read from its TOTALSIZE), verified; None if
        no readable record starts there. Lookups by msgId and key read through here."""
        if self.regions is not None and offset < self.classic_from:
            return self.regions.get_record(offset)
        mf = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mf is None:
            return None
        pos = offset % self.mapped_file_size
        view = mf.select(pos)
        if view is None or len(view) < 8:
            return None
        size = _I.unpack_from(view, 0)[0]
        if size <= 0 or size > len(view):
            return None
        if self.verify_reads:
            self._verify(view, mf, pos, offset, size)
        return view[:size]

    def _verify(self, view: memoryview, mf: MappedFile, pos: int, offset: int, size: int,
                checked_pages: set[tuple[str, int]] | None = None) -> None:
        problem = record_problem_at(view, 0, size)
        if problem is None and self.page_crc is not None:  # every byte, not only the body (issue 24.3)
            problem = self.page_crc.check(mf, pos, size, checked_pages)
        if problem is not None:
            exc = CorruptRecordError(self.node_label, str(mf.path), pos, offset, problem, self.corrupt_fix)
            self.corruption.report(exc)
            raise exc

    def look_message_by_offset(self, offset: int, size: int | None = None) -> MessageExt | None:
        """Decode the message at a physical offset (None if there is no readable record)."""
        view = self.get_record(offset) if size is None else self.get_message(offset, size)
        return decode_message(view) if view is not None and len(view) >= 8 else None

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        buf = self.get_message(offset, size)
        if buf is None:
            return -1
        sys_flag = int.from_bytes(buf[36:40], "big")
        return _Q.unpack_from(buf, store_timestamp_position(sys_flag))[0]

    # --- maintenance ------------------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        if offset < self.classic_from:
            log.error("truncate_dirty_files(%d) refused: below classicFrom %d (the frozen regions are never "
                      "truncated)", offset, self.classic_from)
            return
        with self._put_lock:
            if self.checkpoint is not None:
                self.checkpoint.clamp_verified(offset)
            self.mapped_file_queue.truncate_dirty_files(offset)

    def reset_offset(self, offset: int) -> bool:
        if offset < self.classic_from:
            log.error("reset_offset(%d) refused: below classicFrom %d", offset, self.classic_from)
            return False
        with self._put_lock:
            if self.checkpoint is not None:
                self.checkpoint.clamp_verified(offset)
            return self.mapped_file_queue.reset_offset(offset)

    def delete_expired_files(self, expired_seconds: float, max_delete: int = 10,
                             clean_immediately: bool = False, now: float | None = None) -> int:
        mfq = self.mapped_file_queue
        if self.regions is not None and self.regions.min_offset >= 0:  # frozen files are the oldest
            first = mfq.first()
            return self.regions.delete_expired(
                expired_seconds, max_delete, clean_immediately, now,
                first.file_from_offset if first is not None else self.classic_from, mfq.before_delete)
        return mfq.delete_expired_file_by_time(
            expired_seconds, max_delete, now=now, clean_immediately=clean_immediately)

    def topic_queue_table_as_keys(self) -> dict[str, int]:
        """RocketMQ's ``topicQueueTable`` form: ``"topic-queueId" -> next offset``."""
        return {f"{t}-{q}": v for (t, q), v in self.topic_queue_table.items()}

    def remove_queue_from_topic_queue_table(self, topic: str, queue_id: int) -> None:
        with self._put_lock:
            self.topic_queue_table.pop((topic, queue_id), None)

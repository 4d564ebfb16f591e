"""DefaultMessageStore: the facade over CommitLog, ConsumeQueues, IndexFile and their services.

Rules:
- Start-up is RocketMQ's: ``load`` takes the ``lock`` file, reads ``abort`` (present = the last
  run crashed), maps the checkpoint, ConsumeQueues, IndexFiles and commitlog files, then
  recovers: ConsumeQueues first (where dispatch had got to), then the commitlog, normally or
  abnormally; ConsumeQueue units beyond the recovered commitlog end are truncated and the
  ``topic_queue_table`` is rebuilt from the ConsumeQueues. ``start`` writes ``abort``, starts
  the flush service and ReputMessageService from the ConsumeQueues' max physical offset and
  waits until dispatch has caught up. ``shutdown`` stops dispatch after it has caught up,
  flushes everything, and deletes ``abort`` only if nothing is left undispatched.
- Input is validated before it touches the log: topic ``^[%|a-zA-Z0-9_-]{1,255}$`` and queue id
  in ``[0, 65535)`` (``names.py``: they become directory names), body <= ``maxMessageSize``,
  properties <= 32767 bytes; a SLAVE refuses puts (SERVICE_NOT_AVAILABLE).
- What is dispatched from the commitlog passes the same check, whoever wrote it (an HA master,
  a DLedger peer, a crash, an outsider): every dispatch path (the ReputMessageService, recovery
  re-dispatch of either commitlog, :meth:`do_dispatch`) skips a record that fails it, reports
  it once (one log line with file and offset) and counts it in ``skipped``
  (:meth:`dispatch_status`, shown by the broker's /status and /metrics).
- Delayed messages (DELAY level > 0, not PREPARED/ROLLBACK) are rewritten as RocketMQ 4.9.8
  does: level clamped to the max level, topic ``SCHEDULE_TOPIC_XXXX``, queue level-1,
  ``REAL_TOPIC``/``REAL_QID`` added, properties in Java HashMap order.
- Pulls go through the ConsumeQueue and answer with RocketMQ's GetMessageStatus (the read
  methods live in ``store_reads.py``: :class:`StoreReads`, composed as ``reads``; the store
  keeps one-line delegates of those its callers use).
- A full disk never kills the process nor loses an acknowledged message: a put that cannot get
  its blocks fails (``CREATE_MAPPED_FILE_FAILED``), nothing of it stored. When dispatch cannot
  write a ConsumeQueue or IndexFile (``DiskFullError``) the store logs one line naming the file
  and offset, refuses puts (SERVICE_NOT_AVAILABLE, that reason) and keeps serving reads; the
  reput thread retries the record every second; the first success clears the mark.

- A store migrated from DLedger mode to Controller mode (``commitlogRegions.json``,
  ``commitlog_regions``) opens in classic mode only: the classic commitlog is given its frozen
  regions; a DLedger-mode start is refused with one sentence naming the fix. Its shape is
  recorded as classic (the regions file is the migration's statement, so the DLedger data under
  the root is expected), its low mark the oldest region's first byte. Dispatch starts at
  ``classic_from`` at the earliest (recovery dispatched the regions).

Theory of operation: the facade owns no format knowledge; it wires the parts, holds the
lifecycle, and translates between queue offsets and physical offsets. It composes the reads
(``store_reads.StoreReads``, given accessors of the parts ``load`` makes) and, per load, the
shape checks (``shape_check.ShapeCheck``). Flushing ConsumeQueues,
index and checkpoint runs on one background thread (FlushConsumeQueueService).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from broker.store import shape, store_verify
from broker.store.checkpoint import StoreCheckpoint
from broker.store.clean import StoreCleaner
from broker.store.commitlog import CommitLog
from broker.store.commitlog_regions import CommitLogRegions, open_regions, refuse_dledger_mode
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.disk_guard import DiskGuard
from broker.store.dispatch import CommitLogDispatcher, DispatchRequest, SkippedRecords, StoreFile
from broker.store.index_file import IndexService
from broker.store.lockfile import AbortFile, StoreLock
from broker.store.mapped_file import DiskFullError
from broker.store.page_crc import PageChecksums
from broker.store.message import (
    PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, RMQ_SYS_SCHEDULE_TOPIC,
    MessageExt, decode_message, parse_delay_levels,
    transaction_value,
)
from broker.store.message_properties import java_hashmap_ordered
from broker.store.names import TOPIC_MAX_LENGTH, queue_id_problem, record_problem, topic_problem
from broker.store.put_result import PutMessageResult, PutMessageStatus
from broker.store.reput import DiskFullGuard, ReputMessageService
from broker.store.shape_check import ShapeCheck
from broker.store.store_reads import GetMessageResult, GetMessageStatus, StoreReads  # noqa: F401 - re-exported
from broker.store.store_settings import ASYNC_FLUSH, StoreSettings  # noqa: F401 - re-exported
from broker.store.store_types import JsonObject

if TYPE_CHECKING:
    from broker.config.broker_config import BrokerConfig
    from broker.store.consume_queue import ConsumeQueue
    from broker.store.dledger_commitlog import DLedgerCommitLog
    from broker.store.transfer_limits import TransferLimits

log = logging.getLogger(__name__)

STORE_TAKES_LOCK = True


class DefaultMessageStore:
    """RocketMQ's DefaultMessageStore over the classic commitlog or a DLedgerCommitLog (``enableDLegerCommitLog``)."""

    def __init__(self, config: object = None, *, broker_config: BrokerConfig | None = None,
                 **overrides: object) -> None:
        self.settings = s = StoreSettings.from_config(config, **overrides)
        self.broker_config = broker_config
        self.root = Path(s.store_path_root_dir)
        self.store_path_commitlog = Path(s.store_path_commit_log or self.root / "commitlog")
        self.delay_levels = parse_delay_levels(s.message_delay_level)
        self.lock = StoreLock(self.root)
        self.abort_file = AbortFile(self.root)
        self.last_exit_ok = True
        self.checkpoint: StoreCheckpoint | None = None
        self.commitlog: CommitLog | DLedgerCommitLog | None = None
        self.regions: CommitLogRegions | None = None  # a store migrated to Controller mode (module rules)
        self.consume_queue_store: ConsumeQueueStore | None = None
        self.index_service: IndexService | None = None
        self.reput: ReputMessageService | None = None
        self.arrival_listeners: list[Callable[[list[DispatchRequest]], None]] = []
        self._cq_flush_stop = threading.Event()
        self._stopping = threading.Event()
        self.dispatch_guard: DiskFullGuard | None = None  # the reput's dispatchers (set by start)
        # puts refused before the disk fills, measured on the put path (issue 24.4)
        self.disk_guard = DiskGuard({"commitlog": str(self.store_path_commitlog), "consumequeue": str(self.root)},
                                    min_free_bytes=s.mapped_file_size_commit_log)
        self.skipped = SkippedRecords()  # records no dispatch path accepted (module rules)
        self.cleaner: StoreCleaner | None = None  # retention (broker.store.clean), made at start
        self.shape: shape.ShapeRecorder | None = None  # record_shape: storeshape of this store
        self._cq_flush_thread: threading.Thread | None = None
        self._loaded = self._started = False
        # the parts are made in load: the reads read them at each call
        self.reads = StoreReads(commitlog=lambda: self.commitlog, consume_queue_store=lambda: self.consume_queue_store,
                                index_service=lambda: self.index_service, broker_config=lambda: self.broker_config)

    # --- wiring: the commitlog of the configured mode --------------------------------------
    def _make_commitlog(self) -> CommitLog | DLedgerCommitLog:
        s = self.settings
        if s.enable_dleger_commit_log:  # seam: DLedger mode (imported lazily: classic never loads dledger)
            from broker.store.dledger_commitlog import DLedgerCommitLog

            return DLedgerCommitLog.for_store(self)
        return CommitLog(
            self.store_path_commitlog, s.mapped_file_size_commit_log,
            max_message_size=s.max_message_size, flush_disk_type=s.flush_disk_type,
            flush_interval_ms=s.flush_interval_commit_log,
            flush_least_pages=s.flush_commit_log_least_pages,
            flush_thorough_interval_ms=s.flush_commit_log_thorough_interval,
            sync_flush_timeout_ms=s.sync_flush_timeout, checkpoint=self.checkpoint,
            warm_mapped_file=s.warm_mapped_file_enable,
            check_crc_on_recover=s.check_crc_on_recover, delay_levels=self.delay_levels, regions=self.regions,
        )

    def _open_regions(self) -> None:
        """A migrated store's frozen regions (module rules); DLedger mode is refused on one."""
        s = self.settings
        if s.enable_dleger_commit_log:
            refuse_dledger_mode(self.root)
            return
        self.regions = open_regions(self.root, self.store_path_commitlog, s.mapped_file_size_commit_log,
                                    self.delay_levels)

    def _dispatchers(self) -> list[CommitLogDispatcher]:
        out: list[CommitLogDispatcher] = []
        if self.consume_queue_store is not None:
            out.append(self.consume_queue_store)
        if self.settings.message_index_enable and self.index_service is not None:
            out.append(self.index_service)
        return out

    def do_dispatch(self, request: DispatchRequest) -> None:
        """Dispatch one parsed record to the ConsumeQueue and the IndexFile, unless a send would
        refuse its topic or queue id: then report it by its PHYSICALOFFSET field and skip it.
        Classic abnormal recovery re-dispatches through here (a record it scanned is where its
        PHYSICALOFFSET says); the reput thread and DLedger re-dispatch check first and report
        their scan position."""
        problem = record_problem(request)
        if problem is not None:
            path, pos = self._locate(request.commitlog_offset)
            self.skipped.report(path, pos, request.commitlog_offset, problem)
            return
        for d in self._dispatchers():
            d.dispatch(request)

    def _locate(self, offset: int) -> tuple[str, int]:
        """(file, position) of a physical offset, for reports ("?", -1 if unknown)."""
        from broker.store.dispatch import locate

        mf: StoreFile | None = None
        cl = self.commitlog
        try:
            dl = cl.dledger_region if cl is not None else None
            if cl is not None and dl is not None and offset >= max(cl.divided_commitlog_offset, 0):
                mf = dl.data_file_list.find_file(offset)
            elif cl is not None and offset >= 0:
                mf = cl.mapped_file_queue.find_mapped_file_by_offset(offset)
        except Exception:  # noqa: BLE001 - only for a report: never fail dispatch over it
            mf = None
        return locate(mf, offset)

    def dispatch_status(self) -> JsonObject:
        """What dispatch skipped and whether it is stalled: ``skippedRecords`` (count),
        ``lastSkipped`` (file, filePos, offset, reason), ``error`` (a classic stall) and
        ``dispatchBehindBytes``."""
        out = self.skipped.status()
        out["error"] = self.reput.error if self.reput is not None else None
        out["dispatchBehindBytes"] = self.dispatch_behind_bytes()
        return out

    # --- lifecycle --------------------------------------------------------------------------
    def load(self) -> bool:
        """Lock, detect a crash, map everything and recover. Raises on damaged data."""
        s = self.settings
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        try:
            self.last_exit_ok = not self.abort_file.exists
            if not self.last_exit_ok:
                self._drop_empty_files_after_crash()
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            self._open_regions()
            check = ShapeCheck(self.root, s, str(getattr(self.broker_config, "broker_name", "") or ""),
                               self.regions) if s.record_shape else None
            self.commitlog = self._make_commitlog()
            self.commitlog.on_appended = self.wake_dispatch
            store_verify.configure_read_guard(self.commitlog, self.settings.check_crc_on_read, self.broker_config,
                                              self.root)
            self.commitlog.load()
            if check is not None:  # classic: before recovery can drop the CQs
                check.check_loaded(self.commitlog)
            self.consume_queue_store = ConsumeQueueStore(
                self.root, s.mapped_file_size_consume_queue, checkpoint=self.checkpoint)
            self.consume_queue_store.load()
            if s.message_index_enable:
                self.index_service = IndexService(self.root, s.max_hash_slot_num, s.max_index_num,
                                                  checkpoint=self.checkpoint)
                self.index_service.load(self.last_exit_ok)
                if self.regions is not None:
                    self.regions.index_end = self._index_end
            self.recover()
            if check is not None:
                self.shape = check.record(self.commitlog)
        except BaseException:
            self._close_parts()
            self.lock.release()
            raise
        self._loaded = True
        return True

    def _index_end(self) -> int:
        """The commitlog offset the index has reached (0 with no index file)."""
        files = self.index_service.index_files if self.index_service is not None else []
        return files[-1].end_phy_offset if files else 0

    def _drop_empty_files_after_crash(self) -> None:
        """A crash between creating a ConsumeQueue file and sizing it leaves a 0-byte file, which
        would stop the load ("size does not match"). It holds no data: remove it."""
        for path in (self.root / "consumequeue").glob("*/*/*"):
            if path.is_file() and path.stat().st_size == 0:
                log.warning("removing empty file %s left by the crash", path)
                path.unlink()

    def recover(self) -> None:
        """Each commitlog recovers itself and the ConsumeQueues (classic: ``commitlog_recovery``,
        DLedger: ``dledger_recovery``, both address spaces); then the same for both."""
        assert self.commitlog is not None and self.consume_queue_store is not None
        self.commitlog.recover_with_store(self)
        store_verify.verify_after_recovery(self.commitlog, self.checkpoint, self.settings.check_crc_on_recover)
        self._seal_pages()
        self.recover_topic_queue_table()

    def _seal_pages(self) -> None:
        """Brokers: page checksums for the classic commitlog (or the old region), sealed up to
        what recovery has just verified, and kept from then on (broker.store.page_crc)."""
        if not (self.settings.page_checksums and self.settings.check_crc_on_read):
            return
        cl = self.commitlog
        if cl is None:
            return
        classic, end = cl.classic_region, cl.classic_region_end
        pc = PageChecksums(classic.store_path, classic.mapped_file_size)
        mfq = classic.mapped_file_queue
        pc.seal_upto(mfq.mapped_files, end if end >= 0 else mfq.get_max_offset())
        classic.page_crc = pc
        mfq.after_flush, mfq.on_truncate, mfq.on_deleted = pc.after_flush, pc.truncated, pc.deleted

    def recover_topic_queue_table(self) -> None:
        """``topic_queue_table`` = every ConsumeQueue's max offset (after full dispatch)."""
        assert self.commitlog is not None and self.consume_queue_store is not None
        table: dict[tuple[str, int], int] = {}
        min_phy = self.commitlog.min_offset
        for cq in self.consume_queue_store.consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
            if min_phy > 0:
                cq.correct_min_offset(min_phy)
        self.commitlog.topic_queue_table = table

    def start(self) -> None:
        assert self._loaded and self.commitlog is not None and self.consume_queue_store is not None
        self.abort_file.create()
        self.commitlog.start()
        # a migrated store's recovery dispatched its frozen regions: dispatch reads from classic_from on
        reput_from = max(self.consume_queue_store.max_physical_offset(), self.commitlog.min_offset,
                         self.commitlog.classic_from, 0)
        self._stopping.clear()
        self.dispatch_guard = DiskFullGuard(self._dispatchers(), self._stopping)
        self.reput = ReputMessageService(self.commitlog, [self.dispatch_guard], reput_from,
                                         listeners=[self._notify_arrival], skipped=self.skipped)
        self.dispatch_guard.attach(self.reput)
        try:
            self.reput.do_reput()
        except DiskFullError:
            pass  # logged by the guard; the reput thread retries
        self.recover_topic_queue_table()
        self.reput.start()
        self._cq_flush_thread = threading.Thread(target=self._flush_logics_loop,
                                                 name="FlushConsumeQueueService", daemon=True)
        self._cq_flush_thread.start()
        self.cleaner = StoreCleaner(self)
        if self.settings.retention:
            self.cleaner.start()
        self._started = True

    @property
    def disk_full_error(self) -> str | None:
        """Why dispatch is blocked by a full disk (puts are refused meanwhile), None if it is not."""
        guard = self.dispatch_guard
        return guard.error if guard is not None else None

    def _notify_arrival(self, batch: list[DispatchRequest]) -> None:
        for listener in self.arrival_listeners:
            listener(batch)

    def _flush_logics(self) -> None:
        if self.consume_queue_store is not None:
            self.consume_queue_store.flush()
        if self.index_service is not None:
            self.index_service.flush()
        if self.checkpoint is not None:
            self.checkpoint.flush()

    def _flush_logics_loop(self) -> None:
        interval = self.settings.flush_interval_consume_queue / 1000.0
        while not self._cq_flush_stop.wait(interval):
            try:
                self._flush_logics()
            except Exception:  # noqa: BLE001
                log.exception("FlushConsumeQueueService failed")

    def shutdown(self) -> bool:
        """Dispatch what is committed, flush everything, delete ``abort`` if clean, unlock.

        Returns False when ``abort`` stays (dispatch could not finish): the next start is an
        abnormal recovery, which re-dispatches from the commitlog."""
        if not self._loaded:
            return True
        clean = True
        self._stopping.set()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        if self.reput is not None:
            try:
                self.reput.shutdown()
                clean = self.reput.dispatch_behind_bytes() == 0 and self.reput.error is None
            except DiskFullError as exc:  # abort stays: the next start re-dispatches from the commitlog
                log.error("shutdown with dispatch incomplete (%s); the next start recovers it", exc)
                clean = False
        self._cq_flush_stop.set()
        if self._cq_flush_thread is not None:
            self._cq_flush_thread.join()
        if self.commitlog is not None:
            self.commitlog.flush_service.shutdown()
        self._flush_logics()
        self._close_parts()
        started = self._started
        if started and clean:
            self.abort_file.delete()
        self.lock.release()
        self._loaded = self._started = False
        return clean or not started

    def _close_parts(self) -> None:
        if self.commitlog is not None:
            self.commitlog.shutdown()  # with its regions
        elif self.regions is not None:
            self.regions.close()
        if self.consume_queue_store is not None:
            self.consume_queue_store.shutdown()
        if self.index_service is not None:
            self.index_service.shutdown()
        if self.checkpoint is not None:
            self.checkpoint.shutdown()

    def wake_dispatch(self) -> None:
        if self.reput is not None:
            self.reput.wakeup()

    # --- writes -----------------------------------------------------------------------------
    def _check(self, msg: MessageExt) -> str | None:
        problem = topic_problem(msg.topic, TOPIC_MAX_LENGTH) or queue_id_problem(msg.queue_id)
        if problem is not None:
            return problem
        if len(msg.body) > self.settings.max_message_size:
            return f"body of {len(msg.body)} bytes exceeds maxMessageSize {self.settings.max_message_size}"
        return None

    def _rewrite_delay(self, msg: MessageExt) -> MessageExt:
        level_text = msg.properties.get(PROPERTY_DELAY_TIME_LEVEL)
        if not level_text or transaction_value(msg.sys_flag) not in (0x0, 0x8):
            return msg
        level = int(level_text)
        if level <= 0:
            return msg
        props = dict(msg.properties)
        if level > len(self.delay_levels):
            level = len(self.delay_levels)
            props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        props[PROPERTY_REAL_TOPIC] = msg.topic
        props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
        ordered = java_hashmap_ordered(props)
        return dataclasses.replace(msg, topic=RMQ_SYS_SCHEDULE_TOPIC, queue_id=level - 1,
                                   properties=ordered, properties_bytes=None)

    def prepare_put(self, msgs: Sequence[MessageExt]) -> tuple[list[MessageExt] | None, PutMessageResult | None]:
        if self.commitlog is None or not self._started:
            return None, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="store not started")
        if self.settings.broker_role == "SLAVE":
            return None, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="a SLAVE does not accept puts")
        if self.disk_full_error is not None:
            return None, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                          error=f"store not writeable: {self.disk_full_error}")
        if self.cleaner is not None and self.cleaner.space_error is not None:
            return None, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                          error=f"store not writeable: {self.cleaner.space_error}")
        full = self.disk_guard.check(sum(len(m.body) for m in msgs) + 256 * len(msgs))
        if full is not None:
            return None, PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error=f"store not writeable: {full}")
        out = []
        for msg in msgs:
            why = self._check(msg)
            if why is not None:
                return None, PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=why)
            out.append(self._rewrite_delay(msg))
        return out, None

    def put_message(self, msg: MessageExt, keep_store_timestamp: bool = False) -> PutMessageResult:
        return self.put_messages([msg], keep_store_timestamp)

    def put_messages(self, msgs: Sequence[MessageExt], keep_store_timestamp: bool = False) -> PutMessageResult:
        """Store messages (an atomic run) and wait for the flush/replication policy."""
        prepared, error = self.prepare_put(msgs)
        if error is not None:
            return error
        cl = self.commitlog
        assert cl is not None and prepared is not None
        return cl.put_messages(prepared, keep_store_timestamp)

    async def put_messages_async(self, msgs: Sequence[MessageExt], keep_store_timestamp: bool = False) -> PutMessageResult:
        """As :meth:`put_messages`, awaiting flush and replica futures instead of blocking."""
        prepared, error = self.prepare_put(msgs)
        if error is not None:
            return error
        cl = self.commitlog
        assert cl is not None and prepared is not None
        # classic: flush and slave ack awaited at once; DLedger: completes on the quorum commit
        return await cl.put_messages_async(prepared, keep_store_timestamp)

    async def put_message_async(self, msg: MessageExt, keep_store_timestamp: bool = False) -> PutMessageResult:
        return await self.put_messages_async([msg], keep_store_timestamp)

    # --- reads: delegates to ``reads`` (store_reads.py) for the store's callers ---------------
    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        return self.reads.find_consume_queue(topic, queue_id, create)

    def consume_queues_of(self, topic: str) -> list[ConsumeQueue]:
        return self.reads.consume_queues_of(topic)

    def get_message(self, topic: str, queue_id: int, offset: int, max_num: int = 32,
                    tags_filter: Callable[[int], bool] | None = None,
                    limits: TransferLimits | None = None) -> GetMessageResult:
        return self.reads.get_message(topic, queue_id, offset, max_num, tags_filter, limits)

    def look_message_by_offset(self, commitlog_offset: int, size: int | None = None) -> MessageExt | None:
        return self.reads.look_message_by_offset(commitlog_offset, size)

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        return self.reads.view_message_by_id(msg_id)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        return self.reads.query_message(topic, key, max_num, begin, end)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.get_max_offset_in_queue(topic, queue_id)

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        return self.reads.get_commitlog_offset_in_queue(topic, queue_id, queue_offset)

    def get_max_phy_offset(self) -> int:
        return self.reads.get_max_phy_offset()

    def get_min_phy_offset(self) -> int:
        return self.reads.get_min_phy_offset()

    def get_confirm_offset(self) -> int:
        return self.reads.get_confirm_offset()

    def get_flushed_where(self) -> int:
        return self.reads.get_flushed_where()

    # --- dispatch progress ------------------------------------------------------------------
    @property
    def dispatching(self) -> bool:
        """The ReputMessageService runs (it is made at start)."""
        return self.reput is not None

    def dispatch_behind_bytes(self) -> int:
        return self.reput.dispatch_behind_bytes() if self.reput is not None else 0

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        return self.reput.wait_dispatched(timeout) if self.reput is not None else True

    # --- HA slave ---------------------------------------------------------------------------
    def append_to_commitlog(self, start_offset: int, data: bytes | bytearray | memoryview) -> bool:
        """HA slave path: raw commitlog bytes at exactly the current max offset, then dispatch."""
        assert self.commitlog is not None
        ok = self.commitlog.append_data(start_offset, data)
        if ok:
            self.wake_dispatch()
        return ok

    def delete_expired_files(self, clean_immediately: bool = False, now: float | None = None,
                             max_delete: int = 10) -> int:
        """Delete commitlog files older than ``fileReservedTime`` hours (any age when
        ``clean_immediately``), then the ConsumeQueue and index files below the new min offset
        (``broker.store.clean`` decides when)."""
        assert self.commitlog is not None and self.consume_queue_store is not None
        n = self.commitlog.delete_expired_files(self.settings.file_reserved_time * 3600, max_delete,
                                                clean_immediately=clean_immediately, now=now)
        if n:
            min_phy = self.commitlog.min_offset
            self.consume_queue_store.delete_expired_files(min_phy)
            self.consume_queue_store.correct_min_offset(min_phy)
            if self.index_service is not None:
                self.index_service.delete_expired_file(min_phy)
        return n

    def __enter__(self) -> "DefaultMessageStore":
        self.load()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def open_store(root: str | os.PathLike[str], **settings: object) -> DefaultMessageStore:
    """Convenience for tools and tests: load + start a store at ``root`` (``settings``: StoreSettings names)."""
    store = DefaultMessageStore(StoreSettings.from_config(None, store_path_root_dir=os.fspath(root), **settings))
    store.load()
    store.start()
    return store


def iter_messages(store: DefaultMessageStore, start: int = 0) -> Iterable[tuple[int, MessageExt]]:
    """(physical offset, message) for every committed record from ``start`` (tools, tests); a
    migrated store's frozen regions first."""
    assert store.commitlog is not None
    if store.regions is not None and start < store.regions.classic_from:
        yield from store.regions.messages(start)
    offset = max(start, store.commitlog.min_offset, store.commitlog.classic_from)
    while offset < store.commitlog.max_offset:
        res = store.commitlog.get_data(offset, True)
        if res is None:
            return
        pos = 0
        while pos < len(res.buffer):
            req = store.commitlog.parse_record(res.buffer, pos, False)
            if not req.success or req.msg_size == 0:
                break
            yield res.start_offset + pos, decode_message(res.buffer[pos:pos + req.msg_size])
            pos += req.msg_size
        offset = store.commitlog.roll_next_file(res.start_offset) if pos < len(res.buffer) else res.start_offset + pos
        if pos == 0 and offset <= res.start_offset:
            return

"""StoreAccess: every call the broker makes into DefaultMessageStore, in one place.

Rules:
- Opening = ``DefaultMessageStore(store_config)`` -> ``load()`` (recovery, normal or abnormal
  from the ``abort`` file) -> ``start()`` (which writes ``abort``). A ``load()`` that fails is a
  start error naming the store path.
- A put returns :class:`PutOutcome` (ids, offsets, ``next_offset`` = the physical offset just
  after the put, and the store's status when the bytes are stored: PUT_OK, FLUSH_DISK_TIMEOUT,
  FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE). A status that means "not stored" raises
  ``PutRefused`` with that status.
- Pull results are RocketMQ's GetMessageResult as a dict with decoded :class:`MessageExt`s.
- A read refused because the DLedger member stopped itself (``store_reads.MemberStoppedError``)
  is ``refusals.MemberStopped`` (SERVICE_NOT_AVAILABLE) naming the cause, never an empty or
  "removed" answer; a record that fails its CRC check (``broker.store.verify.CorruptRecordError``)
  is ``refusals.CorruptRecord`` (SYSTEM_ERROR) naming node, file, offset and the fix.
- Concurrent puts go through :class:`broker.put_coalescer.PutCoalescer` in both modes (one
  store put for the requests of one loop iteration: one DLedger batch, or one classic append
  with one flush request and one slave-ack wait; results sliced back).

- Compiled with mypyc (``broker.native``, issue 22 H10: the per-request put path above the
  coalescer): ``StoreAccess`` and ``PutOutcome`` are native classes (declared attributes only,
  typed values checked at run time); the store's own objects are read as they come.

Theory of operation: a thin adapter over ``broker.store.message_store`` so the controller and
processor never depend on the store's method names; hooks (``on_put``, ``wake_dispatch``)
connect the store to HA. It is given the configs, paths and metrics it needs, never the
controller (no import of ``broker.controller``: issue 26's import circle).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

from broker.put_dedup import RecentSends, key_parts
from broker.store.message import MessageExt, encoded_length
from broker.refusals import CorruptRecord, MemberStopped
from broker.store.put_result import PutMessageStatus, PutRefused

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from broker.api.metrics import BrokerMetrics
    from broker.store.commitlog import CommitLog
    from broker.store.consume_queue import ConsumeQueueStore
    from broker.store.dledger_commitlog import DLedgerCommitLog
    from broker.store.message_store import DefaultMessageStore

log = logging.getLogger("broker.store")



@dataclass(slots=True, init=False)
class PutOutcome:
    """One per send. ``__init__`` is written out (the dataclass's fields, defaults and order):
    compiled, a native call instead of the interpreted one ``dataclasses`` makes."""

    msg_ids: list[str]
    queue_offsets: list[int]
    physical_offsets: list[int]
    wrote_bytes: int
    next_offset: int
    status: PutMessageStatus  # or stored but not durable (FLUSH_*_TIMEOUT, ...)
    queue_id: int | None  # set when a retry was answered from the dedup window (its queue)
    detail: str  # why a non-PUT_OK status (e.g. DLedger's "outcome unknown: ...")
    sizes: Sequence[int]  # each record's size (the dedup window remembers them)

    def __init__(self, msg_ids: list[str], queue_offsets: list[int], physical_offsets: list[int], wrote_bytes: int,
                 next_offset: int, status: PutMessageStatus = PutMessageStatus.PUT_OK, queue_id: int | None = None,
                 detail: str = "", sizes: Sequence[int] = ()) -> None:
        self.msg_ids = msg_ids
        self.queue_offsets = queue_offsets
        self.physical_offsets = physical_offsets
        self.wrote_bytes = wrote_bytes
        self.next_offset = next_offset
        self.status = status
        self.queue_id = queue_id
        self.detail = detail
        self.sizes = sizes


@contextlib.contextmanager
def _refuse_if_member_stopped() -> Iterator[None]:
    from broker.store.store_reads import MemberStoppedError  # noqa: WPS433

    from broker.store.verify import CorruptRecordError  # noqa: WPS433

    try:
        yield
    except MemberStoppedError as exc:
        raise MemberStopped(str(exc)) from None
    except CorruptRecordError as corrupt:  # never data (broker.store.verify); logged and counted there
        raise CorruptRecord(str(corrupt)) from None


class StoreAccess:
    def __init__(self, store: "DefaultMessageStore", last_exit_ok: bool) -> None:
        self.store = store
        self.last_exit_ok = last_exit_ok
        self._put_hooks: list[Callable[[int], None]] = []
        from broker.put_coalescer import coalescer_for  # noqa: WPS433

        self.coalescer = coalescer_for(store)
        self.dedup: RecentSends | None = None  # set by enable_dedup (broker.put_dedup)
        self._dedup_rebuild_pending = False

    def set_broker_role(self, role: str) -> None:
        """The store's ``brokerRole`` follows the broker's role (Apache's ReplicasManager sets the
        store config's role in changeToMaster / changeToSlave): a SLAVE store refuses puts, so a
        broker whose conf says ``brokerRole=SLAVE`` (Controller mode's confs do) could otherwise
        never take a write after it was elected master."""
        self.store.settings.broker_role = role

    def enable_dedup(self, window_seconds: float, store_host: tuple[str, int]) -> None:
        """Answer retried sends (same topic + UNIQ_KEY) from a window fed by dispatch."""
        if window_seconds <= 0:
            return
        self.dedup = RecentSends(window_seconds, store_host)
        self.store.arrival_listeners.append(self.dedup.on_arrival)  # first: nothing dispatched from now is missed
        self._dedup_rebuild_pending = True
        if not self.store.settings.enable_dleger_commit_log:
            self.rebuild_dedup_window()
        # DLedger mode: the log is readable only up to what is known committed, which a restarted
        # member learns from its leader (or by leading): rebuilt when this node becomes master,
        # before it accepts a write (BrokerController.change_to_master)

    def rebuild_dedup_window(self) -> None:
        """Once per start: the dedup window from the commitlog's tail (broker.put_dedup_rebuild)."""
        if self.dedup is None or not self._dedup_rebuild_pending:
            return
        self._dedup_rebuild_pending = False
        from broker.put_dedup_rebuild import rebuild_window  # noqa: WPS433

        rebuild_window(self.store, self.dedup.window, self.dedup.on_arrival_at)

    @staticmethod
    def store_takes_lock() -> bool:
        """Whether DefaultMessageStore takes ``lock`` itself (then the controller must not)."""
        from broker.store import message_store  # noqa: WPS433

        return message_store.STORE_TAKES_LOCK

    @classmethod
    def open(cls, store_config: Any, broker_config: Any, root_dir: "Path",
             metrics: "BrokerMetrics | None" = None) -> "StoreAccess":
        """Open the broker's store (load, recover, start) and register its gauges on ``metrics``."""
        from broker.store.message_store import DefaultMessageStore  # noqa: WPS433

        # brokers run retention (broker.store.clean); stores opened by tools and tests do not
        store = DefaultMessageStore(store_config, broker_config=broker_config, retention=True,
                                   record_shape=True, page_checksums=True)
        ok = store.load()  # takes the lock (StoreLockedError), recovers
        if ok is False:
            raise RuntimeError(f"message store at {root_dir} failed to load (see the log line above)")
        store.start()
        access = cls(store, store.last_exit_ok)
        if metrics is not None:
            access.register_dispatch_gauges(metrics)
            access.register_verify_metrics(metrics)
        return access

    def dispatch_status(self) -> dict[str, Any]:
        """Records dispatch skipped (count, last few with file and offset) and a stall, if any."""
        return self.store.dispatch_status()

    def register_dispatch_gauges(self, metrics: Any) -> None:
        """``rocketmq_broker_dispatch_skipped_records_total`` and ``rocketmq_broker_dispatch_stalled``."""
        metrics.register_gauge(
            "rocketmq_broker_dispatch_skipped_records_total",
            "Commitlog records dispatch refused (invalid topic/queue id, DLedger entry that is not a message)",
            lambda: [({}, self.dispatch_status().get("skippedRecords", 0))], kind="counter")
        metrics.register_gauge(
            "rocketmq_broker_dispatch_stalled", "1 while dispatch waits at a record it cannot parse (classic)",
            lambda: [({}, 1 if self.dispatch_status().get("error") else 0)])

    async def shutdown(self) -> None:
        self.shutdown_blocking()

    def shutdown_blocking(self) -> bool:
        """Dispatch, flush, checkpoint, unmap, unlock (any thread; the broker runs it off its loop).
        False when the store kept its ``abort`` file (its next start is an abnormal recovery)."""
        return self.store.shutdown()

    # ------------------------------------------------------------------ hooks
    @property
    def commitlog(self) -> CommitLog | DLedgerCommitLog:
        """The open store's commitlog (a StoreAccess exists only for a loaded store)."""
        cl = self.store.commitlog
        if cl is None:
            raise RuntimeError("the store is not loaded: no commitlog")
        return cl

    @property
    def consume_queues(self) -> ConsumeQueueStore:
        """The open store's ConsumeQueues (a StoreAccess exists only for a loaded store)."""
        cqs = self.store.consume_queue_store
        if cqs is None:
            raise RuntimeError("the store is not loaded: no consume queues")
        return cqs

    @property
    def store_is_dledger(self) -> bool:
        return self.store.commitlog is not None and self.store.commitlog.is_dledger

    def on_put(self, hook: Callable[[int], None]) -> None:
        self._put_hooks.append(hook)

    def wake_dispatch(self, max_offset: int) -> None:
        self.store.wake_dispatch()

    # ------------------------------------------------------------------ writes
    async def put_messages(self, msgs: Sequence[MessageExt], producer_keys: bool = True) -> PutOutcome:
        """Store ``msgs``; a retry of a put this broker already stored (same topic and UNIQ_KEYs)
        is answered from the dedup window, or waits for that put if it is still in flight.
        ``producer_keys=False``: the UNIQ_KEYs were just made by this broker (an HTTP send without
        ``uniqKey``), so the put cannot be a retry and skips the window's bookkeeping."""
        dedup = self.dedup
        keys = dedup.keys_of(msgs) if dedup is not None and dedup.enabled and producer_keys else None
        if keys is None or dedup is None:
            return await self._put_messages(msgs)
        running = dedup.inflight(keys)
        if running is not None:
            earlier = await asyncio.shield(running)
            if earlier is not None:
                return earlier  # the same request, answered once
        hit = dedup.lookup(keys)
        if hit is not None:
            topic, uniq = key_parts(keys[0])
            log.info("send of %d message(s) to %s already stored (UNIQ_KEY %s): answered from the dedup window",
                     len(keys), topic, uniq)
            fields = dedup.outcome_of(hit)
            # the record's own STOREHOST (a former leader's) makes its offset msgId
            stored = [self.store.look_message_by_offset(h.physical_offset, h.size) for h in hit]
            if all(m is not None for m in stored):
                fields["msg_ids"] = [m.msg_id for m in stored]  # type: ignore[union-attr]
            return PutOutcome(**fields)
        flight = dedup.begin(keys)
        outcome: PutOutcome | None = None
        try:
            outcome = await self._put_messages(msgs)
            if outcome.status is PutMessageStatus.PUT_OK or not self.store_is_dledger:
                dedup.remember(keys, msgs[0].queue_id, outcome.queue_offsets, outcome.physical_offsets,
                               outcome.sizes)
            return outcome
        finally:
            dedup.end(flight, outcome)

    async def put_internal(self, msgs: Sequence[MessageExt]) -> PutOutcome:
        """A broker-made put (transaction bookkeeping): never answered from the dedup window."""
        return await self._put_messages(msgs)

    async def _put_messages(self, msgs: Sequence[MessageExt]) -> PutOutcome:
        # put_messages_async awaits the SYNC_FLUSH group commit and, on a SYNC_MASTER, the slave
        # ack (HAService is the commitlog's replica hook): the one durability wait of a put.
        if self.coalescer is not None:
            result = await self.coalescer.put(msgs)
        else:
            result = await self.store.put_messages_async(list(msgs))
        status = result.status
        ar = result.append_result
        if ar is None or (status is not PutMessageStatus.PUT_OK and not status.stored):  # PUT_OK: no property call
            if status.stored:  # stored, yet no append result: never (a store bug), not a refusal
                status = PutMessageStatus.UNKNOWN_ERROR
            raise PutRefused(status, result.error or f"store refused the put: {status.value}")
        outcome = PutOutcome(
            msg_ids=ar.msg_ids, queue_offsets=list(ar.queue_offsets), physical_offsets=list(ar.physical_offsets),
            wrote_bytes=ar.wrote_bytes, next_offset=ar.end_offset or ar.wrote_offset + ar.wrote_bytes,
            status=status, detail=result.error if status is not PutMessageStatus.PUT_OK else "",
            sizes=ar.sizes if len(ar.sizes) == len(msgs) else [encoded_length(m) for m in msgs],
        )
        for hook in self._put_hooks:
            hook(outcome.next_offset)
        return outcome

    # ------------------------------------------------------------------ reads
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int) -> dict[str, Any]:
        with _refuse_if_member_stopped():
            r = self.store.get_message(topic, queue_id, offset, max_count)
        return {
            "status": r.status.value,
            "nextBeginOffset": r.next_begin_offset,
            "minOffset": r.min_offset,
            "maxOffset": r.max_offset,
            "messages": list(r.messages),
        }

    def message_at(self, offset: int) -> Optional[MessageExt]:
        with _refuse_if_member_stopped():
            return self.store.look_message_by_offset(offset)

    def query_by_key(self, topic: str, key: str, max_num: int) -> list[MessageExt]:
        with _refuse_if_member_stopped():
            return list(self.store.query_message(topic, key, max_num))

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return self.store.find_consume_queue(topic, queue_id, create=False) is not None

    def queue_count(self, topic: str) -> int:
        return len(self.store.consume_queues_of(topic))

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.store.get_min_offset_in_queue(topic, queue_id)

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.store.get_max_offset_in_queue(topic, queue_id)

    def max_phy_offset(self) -> int:
        return self.store.get_max_phy_offset()

    def min_phy_offset(self) -> int:
        return self.store.get_min_phy_offset()

    def dispatch_behind_bytes(self) -> int:
        return self.store.dispatch_behind_bytes()

    def status(self) -> dict[str, Any]:
        s = self.store
        return {
            "commitLog": {
                "minOffset": self.min_phy_offset(),
                "maxOffset": self.max_phy_offset(),
                "confirmOffset": s.get_confirm_offset(),
                "flushedOffset": s.get_flushed_where(),
                "path": str(s.store_path_commitlog),
            },
            "dispatchBehindBytes": self.dispatch_behind_bytes(),
            "dispatch": {k: v for k, v in self.dispatch_status().items() if k != "dispatchBehindBytes"},
            "lastExitOK": self.last_exit_ok,
            **({"putCoalescer": {"mergedPuts": self.coalescer.merged_puts,
                                 "mergedRequests": self.coalescer.merged_requests}} if self.coalescer else {}),
            "sendDedup": self.dedup.status() if self.dedup is not None else {"windowSeconds": 0},
            "retention": s.cleaner.status() if s.cleaner is not None else None,
            "disk": s.disk_guard.status(),
            "verify": self.verify_status(),
        }

    def disk_refusal(self) -> str | None:
        """Why puts are refused for disk space now (retention's round or the put path's own measure)."""
        c = self.store.cleaner
        return (c.space_error if c is not None else None) or self.store.disk_guard.error

    def verify_status(self) -> dict[str, Any]:
        """Corrupt records met by reads and recovery (broker.store.verify) and the verified offset."""
        cl = self.store.commitlog
        assert cl is not None
        out: dict[str, Any] = cl.corruption.status()
        cp = self.store.checkpoint
        out["verifiedOffset"] = cp.physic_verified_offset if cp is not None else None
        out["checkOnRead"] = bool(cl.verify_reads)
        return out

    def register_verify_metrics(self, metrics: Any) -> None:
        metrics.register_gauge(
            "rocketmq_broker_corrupt_records_total",
            "Commitlog records that failed their CRC/structure check on read or recovery (never served)",
            lambda: [({}, self.verify_status().get("corruptRecords", 0))], kind="counter")
        metrics.register_gauge(
            "rocketmq_broker_retention_deleted_files_total", "Commitlog files deleted by retention (broker.store.clean)",
            lambda: [({}, c.deleted_total)] if (c := self.store.cleaner) is not None else [],
            kind="counter")
        metrics.register_gauge(
            "rocketmq_broker_disk_space_refusing_puts", "1 while disk usage is above 90% and puts are refused",
            lambda: [({}, int(self.disk_refusal() is not None))])
        metrics.register_gauge(
            "rocketmq_broker_disk_used_ratio", "Used fraction of the commitlog's and the ConsumeQueues' disks",
            lambda: [({"disk": what}, ratio) for what, (ratio, _free) in list(self.store.disk_guard.last.items())])
        metrics.register_gauge(
            "rocketmq_broker_disk_refused_puts_total", "Puts refused because a disk was too full",
            lambda: [({}, self.store.disk_guard.refused)], kind="counter")
        metrics.register_gauge(
            "rocketmq_broker_retention_forced_deleted_files_total",
            "Commitlog files deleted whatever their age because the disk was above 85%",
            lambda: [({}, c.forced_deleted_total)] if (c := self.store.cleaner) is not None else [], kind="counter")
        metrics.register_gauge(
            "rocketmq_broker_send_dedup_hits_total", "Sends answered from the dedup window (a retried UNIQ_KEY)",
            lambda: [({}, self.dedup.hits if self.dedup is not None else 0)], kind="counter")

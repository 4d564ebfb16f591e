"""ScheduleMessageService: delayed messages are delivered to their real topic when they are due.

Rules (RocketMQ 4.9.8 ``ScheduleMessageService``, issue 14.1):
- A send with ``DELAY=n`` is stored by the store in ``SCHEDULE_TOPIC_XXXX`` queue ``n-1`` (level
  clamped to the last of ``messageDelayLevel``), with ``REAL_TOPIC``/``REAL_QID``; the queue
  unit's tagsCode is its delivery time (store timestamp + the level's delay).
- One delivery loop per level, on the master only (classic master from its start; DLedger: the
  ready leader, stopped when it steps down). From the level's offset in ``delayOffset.json``
  (0 if none) it reads units in order; a unit whose time has come is looked up, turned back
  into its original message (``message_timeup``) and put into its real topic and queue; a unit
  not yet due makes the loop sleep exactly until it is (timer precision: the event loop's,
  a few ms), or until a new unit of the level arrives.
- The redelivered record is Apache's byte for byte: the original properties string, DELAY and
  REAL_TOPIC/REAL_QID included (4.9.8 clears DELAY from the map after serialising it); the
  store sees no DELAY in the map, so it is not delayed again. Flag, sysFlag, born timestamp and
  hosts, reconsume times and body are kept. PREPARED records are never delivered (logged).
- The offset advances only after the put is stored (PUT_OK or a stored-but-not-replicated
  status); a refused put is retried after 10 s (Apache's DELAY_FOR_A_PERIOD), a unit whose
  commitlog bytes were deleted is skipped, an offset below the queue's min is moved up to it.
  A record that fails its CRC check (``broker.store.verify``) is not delivered: the level stalls
  on it, retrying every 10 s, and says so in status and the log.
- ``delayOffset.json`` is persisted every ``flushDelayOffsetInterval`` (10 s) when changed and on
  stop; slaves/followers receive it through the metadata sync, so a new master continues from
  the last synced offsets. What the old master delivered after that sync is delivered again
  unless the broker's send dedup window (``broker.put_dedup``, fed by this node's own dispatch
  while it followed) still holds the delivered copy's topic and UNIQ_KEY: then the put is
  answered from the window and nothing is stored twice. At-least-once, as Apache.

Theory of operation: asyncio tasks on the broker loop; the store's arrival listener (reput
thread) wakes the level whose queue got a unit. Puts go through ``StoreAccess.put_messages``
(dedup, DLedger coalescing); reads through the store's verified read path.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol, Sequence

from broker.store.message import MessageExt
from broker.store.message_properties import java_hashmap_ordered, properties_to_string
from broker.store.message_const import (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC,
                                        RMQ_SYS_SCHEDULE_TOPIC)
from broker.tasks import wait_for
from broker.store.store_types import JsonObject

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.consume_queue import ConsumeQueue
    from broker.store.put_result import PutMessageStatus
    from broker.store.dispatch import DispatchRequest

log = logging.getLogger("broker.store.schedule")

RETRY_AFTER_S = 10.0  # DELAY_FOR_A_PERIOD
IDLE_POLL_S = 0.1  # DELAY_FOR_A_WHILE: also a safety net should an arrival wake-up be missed
BATCH = 32
_STORED = ("PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")


def message_timeup(msg: MessageExt) -> MessageExt | None:
    """The original message of a SCHEDULE_TOPIC_XXXX record (None if it names no real topic)."""
    props = dict(msg.properties)
    real_topic = props.get(PROPERTY_REAL_TOPIC)
    real_qid = props.get(PROPERTY_REAL_QUEUE_ID)
    if not real_topic or real_qid is None or not real_qid.lstrip("-").isdigit():
        return None
    # Java re-serialises the decoded HashMap: its iteration order, DELAY still in it
    raw = msg.properties_bytes if msg.properties_bytes is not None else properties_to_string(
        java_hashmap_ordered(msg.properties)).encode("utf-8")
    props.pop(PROPERTY_DELAY_TIME_LEVEL, None)
    return MessageExt(
        topic=real_topic, body=msg.body, queue_id=int(real_qid), flag=msg.flag, properties=props,
        properties_bytes=raw, sys_flag=msg.sys_flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        store_timestamp=int(time.time() * 1000), store_host=msg.store_host, reconsume_times=msg.reconsume_times,
    )


@dataclass
class LevelState:
    level: int
    delay_ms: int
    offset: int = 0
    delivered: int = 0
    next_due_ms: int | None = None
    stalled: str | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class PutOutcomeLike(Protocol):
    """What the service reads of a put's outcome (the broker's ``PutOutcome``)."""

    @property
    def status(self) -> PutMessageStatus: ...


class ScheduleStore(Protocol):
    """What the service uses of the store (``DefaultMessageStore``)."""

    arrival_listeners: list[Callable[[list[DispatchRequest]], None]]

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None: ...

    def look_message_by_offset(self, commitlog_offset: int, size: int | None = None) -> MessageExt | None: ...


class DelayOffsets(Protocol):
    """``config/delayOffset.json`` (``broker.metadata.delay_offset.DelayOffsetManager``)."""

    def get_offset(self, delay_level: int) -> int: ...

    def update_offset(self, delay_level: int, offset: int) -> None: ...

    def persist(self) -> None: ...


class ScheduleMessageService:
    """Delivery loops of the delay levels (module rules)."""

    def __init__(self, store: ScheduleStore, offsets: DelayOffsets,
                 put: Callable[[list[MessageExt]], Awaitable[PutOutcomeLike]],
                 delay_levels_ms: Sequence[int], flush_interval_ms: int = 10_000) -> None:
        self.store = store
        self.offsets = offsets
        self._put = put
        self.levels = {i + 1: LevelState(i + 1, ms) for i, ms in enumerate(delay_levels_ms)}
        self.flush_interval_s = max(0.1, flush_interval_ms / 1000.0)
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty = False
        self.running = False
        store.arrival_listeners.append(self._on_arrival)

    # --- life cycle (master only) -------------------------------------------------------------
    def start(self) -> None:
        if self.running:
            return
        self.running = True
        self._loop = asyncio.get_running_loop()
        for st in self.levels.values():
            st.offset = self.offsets.get_offset(st.level)
            st.stalled = None
            self._tasks.append(self._loop.create_task(self._deliver_level(st), name=f"schedule-level-{st.level}"))
        self._tasks.append(self._loop.create_task(self._persist_loop(), name="schedule-persist"))
        log.info("ScheduleMessageService started: %d levels from offsets %s", len(self.levels),
                 {lv: st.offset for lv, st in self.levels.items() if st.offset})

    async def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._persist()
        log.info("ScheduleMessageService stopped (offsets %s)", {lv: st.offset for lv, st in self.levels.items()})

    def _on_arrival(self, batch: Sequence[DispatchRequest]) -> None:
        loop = self._loop
        if not self.running or loop is None:
            return
        levels = {r.queue_id + 1 for r in batch if r.topic == RMQ_SYS_SCHEDULE_TOPIC}
        for lv in levels:
            st = self.levels.get(lv)
            if st is not None:
                try:
                    loop.call_soon_threadsafe(st.wake.set)
                except RuntimeError:  # loop closed while stopping
                    return

    # --- delivery -------------------------------------------------------------------------------
    async def _deliver_level(self, st: LevelState) -> None:
        while self.running:
            try:
                wait = await self._deliver_some(st)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a level must keep trying, loudly
                st.stalled = f"{type(exc).__name__}: {exc}"
                log.error("delay level %d stalled at queue offset %d: %s; retrying in %.0f s",
                          st.level, st.offset, st.stalled, RETRY_AFTER_S)
                wait = RETRY_AFTER_S
            st.wake.clear()
            if wait > 0:
                try:
                    await wait_for(st.wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass

    async def _deliver_some(self, st: LevelState) -> float:
        """Deliver what is due from ``st.offset``; returns seconds to wait before looking again."""
        cq = self.store.find_consume_queue(RMQ_SYS_SCHEDULE_TOPIC, st.level - 1)
        if cq is None:
            st.next_due_ms = None
            return IDLE_POLL_S * 10
        if st.offset < cq.min_offset_in_queue:
            log.warning("delay level %d: offset %d below the queue's min %d (files deleted); moving up",
                        st.level, st.offset, cq.min_offset_in_queue)
            self._advance(st, cq.min_offset_in_queue)
        if st.offset >= cq.max_offset_in_queue:
            st.next_due_ms = None
            return IDLE_POLL_S * 10
        for phy, size, tags_code in cq.get_units(st.offset, BATCH):
            now = int(time.time() * 1000)
            due = tags_code if tags_code <= now + st.delay_ms else now  # correctDeliverTimestamp
            if due > now:
                st.next_due_ms = due
                return (due - now) / 1000.0
            msg = self.store.look_message_by_offset(phy, size)
            if msg is None:
                log.warning("delay level %d: message at offset %d (queue offset %d) is gone; skipped",
                            st.level, phy, st.offset)
                self._advance(st, st.offset + 1)
                continue
            inner = message_timeup(msg)
            if inner is None or inner.sys_flag & 0xC == 0x4:
                log.error("delay level %d: record at offset %d has no real topic or is a PREPARED transaction "
                          "message; not delivered", st.level, phy)
                self._advance(st, st.offset + 1)
                continue
            status = await self._put_one(inner)
            if status not in _STORED:
                st.stalled = f"put to {inner.topic} refused: {status}"
                log.warning("delay level %d: delivery of offset %d to %s refused (%s); retrying in %.0f s",
                            st.level, phy, inner.topic, status, RETRY_AFTER_S)
                return RETRY_AFTER_S
            st.stalled = None
            st.delivered += 1
            self._advance(st, st.offset + 1)
            if not self.running:
                break
        return 0.0

    async def _put_one(self, inner: MessageExt) -> str:
        try:
            outcome = await self._put([inner])
        except Exception as exc:  # noqa: BLE001 - a refused put (PutRefused, a broker.refusals type) is retried later
            return getattr(exc, "code", type(exc).__name__)
        return outcome.status.value

    def _advance(self, st: LevelState, offset: int) -> None:
        st.offset = offset
        self.offsets.update_offset(st.level, offset)
        self._dirty = True

    # --- progress -------------------------------------------------------------------------------
    async def _persist_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            self._persist()

    def _persist(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        try:
            self.offsets.persist()
        except OSError as exc:
            self._dirty = True
            log.error("persisting delayOffset.json failed (retried in %.0f s): %s", self.flush_interval_s, exc)

    def status(self) -> JsonObject:
        levels: JsonObject = {}
        out: JsonObject = {"running": self.running, "levels": levels}
        pending_of = self.pending()
        for lv, st in self.levels.items():
            pending = pending_of.get(lv, 0)
            if pending or st.delivered or st.stalled:
                levels[str(lv)] = {"delayMs": st.delay_ms, "offset": st.offset, "pending": pending,
                                   "delivered": st.delivered, "nextDueMs": st.next_due_ms,
                                   "stalled": st.stalled}
        return out

    def pending(self) -> dict[int, int]:
        out = {}
        for lv in self.levels:
            cq = self.store.find_consume_queue(RMQ_SYS_SCHEDULE_TOPIC, lv - 1)
            if cq is not None:
                out[lv] = max(0, cq.max_offset_in_queue - self.levels[lv].offset)
        return out

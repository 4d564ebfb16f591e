"""Idempotent retries: a send whose UNIQ_KEY the store already holds is answered, not stored again.

Why (issue 13.6): a put whose entries were proposed and then lost their leader may still
commit; its sender was told the outcome is unknown (FLUSH_SLAVE_TIMEOUT) or timed out, and
retries. Producers keep a message's UNIQ_KEY across retries (the Java producer sets it once per
Message, our client once per send call), so the broker can recognise the retry.

Rules:
- The window holds ``(topic, UNIQ_KEY) -> (queueId, queueOffset, physical offset, size, store
  host)`` of every message *dispatched* in the last ``sendDedupWindowSeconds`` (ours, default
  60; 0 turns deduplication off), at most :attr:`RecentSends.MAX_KEYS` keys, oldest evicted
  first. It is fed by the store's arrival listener on every node, so a DLedger leader, which
  accepts writes only once its whole log is committed and dispatched, knows every key of the
  entries it inherited. A restarted broker rebuilds it from the commitlog's tail before it
  serves (``broker.put_dedup_rebuild``, issue 24.2), each key with its real age.
- A put whose messages all carry a UNIQ_KEY found in the window (same topic) is answered PUT_OK
  with the stored offsets and ids; nothing is appended. A batch with only some of its keys
  found is stored whole (at-least-once, as before: a batch is never split).
- A put whose keys are those of a put still in flight on this broker waits for it and answers
  with its outcome (a client that timed out and retried to the same leader). A put this broker
  completed is also remembered at once, each message's key in the window
  (:meth:`RecentSends.remember`), because a classic store answers before its reput thread
  dispatches: only a *stored* answer is remembered (PUT_OK; in classic mode also
  FLUSH_SLAVE_TIMEOUT/SLAVE_NOT_AVAILABLE/FLUSH_DISK_TIMEOUT, the bytes being in the local log,
  re-answered as PUT_OK); a DLedger "outcome unknown" is not, as its entry may still be
  truncated. Whichever of the two comes second (the answer, or the message's dispatch: a
  SYNC_MASTER answers after its slave's ack, often after its reput thread dispatched) finds the
  key already there in the same place and leaves it: one entry per key, not two (the window's
  bound counts entries).
- Messages without a UNIQ_KEY, and consumer retries (``%RETRY%``/``%DLQ%`` topics: a message
  sent back again keeps its UNIQ_KEY), are never deduplicated. A delayed send is keyed under
  SCHEDULE_TOPIC_XXXX, where it is stored, so its delivery to the real topic is not a "retry";
  a second delivery of it to the same real topic (a new master re-delivering from the synced
  delayOffset.json) is answered from the window.

Theory of operation: one :class:`broker.gc_quiet.RecentTable` of message keys in arrival order,
trimmed on insert by age and size; all calls on the broker's event loop except
:meth:`RecentSends.on_arrival` (the reput thread), hence the lock. A put in flight is a
:class:`Flight` per key; the future a retry waits on is made only when a retry comes (the first
put of a key never makes one). Per put this is one lookup and one insert per key (issue 22: the
window used to keep whole requests in a second table too, marshalled, and a future per put:
7.5% of a classic master under Apache's benchmark producer), and each message's key string is
built once (:func:`dedup_key`, in :meth:`RecentSends.keys_of`) and used as is by the lookup, the
flight and the answer; the second of answer and dispatch is one dict read (``RecentTable.keep``).

Memory shape (issue 22.3): the window holds up to 60 s of traffic, hundreds of thousands of
entries, and Python's cyclic collector visits every element of every container it walks on each
full collection, with every thread stopped. Entries are therefore packed bytes in tables the
collector never walks (:mod:`broker.gc_quiet`): ``(queueId, queueOffset, physicalOffset, size)``
per key. With an ``OrderedDict`` of objects in
their place, a full collection of a DLedger leader at 1,000 msgs/s grew to 0.3-0.5 s and cost it
the leadership; with one of flat tuples, to 60-100 ms.
"""
from __future__ import annotations

import asyncio
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Final, Sequence

from broker.gc_quiet import RecentTable
from broker.store.message_id import create_message_id
from broker.store.message_const import PROPERTY_DELAY_TIME_LEVEL, RMQ_SYS_SCHEDULE_TOPIC

PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
NO_DEDUP_PREFIXES: Final = ("%RETRY%", "%DLQ%")


@dataclass(slots=True, frozen=True)
class Stored:
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int


Key = str  # "topic\0UNIQ_KEY" (:func:`dedup_key`): built once per message, used as is everywhere
_STORED: Final = struct.Struct("<iqqi")  # queueId, queueOffset, physicalOffset, size


def dedup_key(topic: str, uniq: str) -> Key:
    """The window's key of a message stored under ``topic`` with this UNIQ_KEY."""
    return f"{topic}\0{uniq}"


def key_parts(key: Key) -> tuple[str, str]:
    """(topic, UNIQ_KEY) of a window key (for log lines)."""
    topic, _, uniq = key.partition("\0")
    return topic, uniq


class Flight:
    """A put in flight with these keys; ``waiter`` is made when a retry waits for it."""

    def __init__(self, keys: tuple[Key, ...]) -> None:
        self.keys = keys
        self.waiter: asyncio.Future[Any] | None = None
        self.done = False


class RecentSends:
    """The dedup window (module rules)."""

    MAX_KEYS = 200_000

    def __init__(self, window_seconds: float, store_host: tuple[str, int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = float(window_seconds)
        self.store_host = store_host
        self._clock = clock
        self.max_keys = self.MAX_KEYS  # per instance (compiled code reads class constants at build time)
        # "topic\0uniq" -> (queueId, queueOffset, physicalOffset, size), packed (memory shape above)
        self._keys = RecentTable(self.max_keys)
        self._inflight: dict[Key, Flight] = {}
        self._lock = threading.Lock()
        self.hits = 0

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def on_arrival(self, batch: Sequence[Any]) -> None:
        """The store's arrival listener: remember each dispatched message that has a UNIQ_KEY
        (one this broker put is there already, in the same place: left as it is)."""
        if not self.enabled:
            return
        now = self._clock()
        limit = now - self.window
        pack = _STORED.pack
        table = self._keys
        max_keys = self.max_keys
        with self._lock:
            for r in batch:
                if r.uniq_key:  # kept as it is if the answer remembered it there (module rules)
                    table.keep(f"{r.topic}\0{r.uniq_key}", now,
                               pack(r.queue_id, r.consume_queue_offset, r.commitlog_offset, r.msg_size), limit,
                               max_keys)
            table.trim(limit, max_keys)

    def on_arrival_at(self, batch: Sequence[Any], age_s: float) -> None:
        """Remember messages dispatched ``age_s`` seconds ago (the window rebuilt at start,
        ``broker.put_dedup_rebuild``): they leave the window when they would have."""
        if not self.enabled or age_s >= self.window:
            return
        now = self._clock()
        at = now - max(0.0, age_s)
        limit = now - self.window
        pack = _STORED.pack
        with self._lock:
            for r in batch:
                if r.uniq_key:
                    self._keys.put(dedup_key(r.topic, r.uniq_key), at,
                                   pack(r.queue_id, r.consume_queue_offset, r.commitlog_offset, r.msg_size), limit,
                                   self.max_keys)

    @staticmethod
    def keys_of(msgs: Sequence[Any]) -> list[Key] | None:
        """The window key (:func:`dedup_key`: the topic it is stored under, UNIQ_KEY) of every
        message, or None if one has none.

        A delayed send is stored in SCHEDULE_TOPIC_XXXX: that is its key's topic, so its later
        delivery to the real topic (same UNIQ_KEY, no DELAY) is not mistaken for a retry.
        Consumer retries (``%RETRY%``/``%DLQ%`` topics, direct or delayed) keep the UNIQ_KEY of
        the message they retry and legitimately come again: never deduplicated."""
        out = []
        for m in msgs:
            props = m.properties or {}
            uniq = props.get(PROPERTY_UNIQ_KEY)
            if not uniq or m.topic.startswith(NO_DEDUP_PREFIXES):
                return None
            level = props.get(PROPERTY_DELAY_TIME_LEVEL, "")
            delayed = level.isdigit() and int(level) > 0 and m.sys_flag & 0xC in (0, 0x8)
            out.append(f"{RMQ_SYS_SCHEDULE_TOPIC if delayed else m.topic}\0{uniq}")
        return out

    def lookup(self, keys: Sequence[Key]) -> list[Stored] | None:
        """The stored messages of every key, or None unless all are in the window."""
        table = self._keys
        for name in keys:  # a first send (nearly every one): no clock, no lock (a dict read is atomic)
            if not table.has(name):
                return None
        limit = self._clock() - self.window
        with self._lock:
            found = []
            for name in keys:
                hit = table.get(name, limit)
                if hit is None:
                    return None
                found.append(Stored(*_STORED.unpack(hit)))
        self.hits += len(found)
        return found

    def outcome_of(self, stored: Sequence[Stored]) -> dict[str, Any]:
        """The PutOutcome fields of an earlier put found in the window."""
        last = stored[-1]
        return {
            "msg_ids": [create_message_id(self.store_host, s.physical_offset) for s in stored],
            "queue_offsets": [s.queue_offset for s in stored],
            "physical_offsets": [s.physical_offset for s in stored],
            "wrote_bytes": sum(s.size for s in stored),
            "next_offset": last.physical_offset + last.size,
            "queue_id": stored[0].queue_id,
        }

    def inflight(self, keys: Sequence[Key]) -> asyncio.Future[Any] | None:
        """What a retry of the put in flight with exactly these keys waits on, if there is one
        (made now, on the running loop, the first time a retry asks)."""
        if not self._inflight:
            return None
        got = self._inflight.get(keys[0])
        if got is None or got.done or got.keys != tuple(keys):
            return None
        if got.waiter is None:
            got.waiter = asyncio.get_running_loop().create_future()
        return got.waiter

    def begin(self, keys: Sequence[Key]) -> Flight:
        """The put of ``keys`` starts now (a retry arriving meanwhile waits for its outcome)."""
        flight = Flight(tuple(keys))
        for k in keys:
            self._inflight[k] = flight
        return flight

    def end(self, flight: Flight, outcome: Any) -> None:
        """The put of ``flight`` is over: a waiting retry gets ``outcome`` (None: not stored)."""
        flight.done = True
        waiter = flight.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)
        for k in flight.keys:
            if self._inflight.get(k) is flight:
                del self._inflight[k]

    def remember(self, keys: Sequence[Key], queue_id: int, queue_offsets: Sequence[int],
                 physical_offsets: Sequence[int], sizes: Sequence[int]) -> None:
        """A stored answer of this broker to these keys (module rules): each message's place."""
        now = self._clock()
        limit = now - self.window
        pack = _STORED.pack
        table = self._keys
        max_keys = self.max_keys
        with self._lock:
            for i in range(len(keys)):  # kept as it is if dispatch put it there first (module rules)
                table.keep(keys[i], now, pack(queue_id, queue_offsets[i], physical_offsets[i], sizes[i]), limit,
                           max_keys)

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._keys.trim(self._clock() - self.window, self.max_keys)
            return {"windowSeconds": self.window, "keys": len(self._keys), "hits": self.hits}

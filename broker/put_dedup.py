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
  completed is also remembered as a whole request (:meth:`RecentSends.remember`), because a
  classic store answers before its reput thread dispatches: only a *stored* answer is
  remembered (PUT_OK; in classic mode also FLUSH_SLAVE_TIMEOUT/SLAVE_NOT_AVAILABLE/
  FLUSH_DISK_TIMEOUT, the bytes being in the local log, re-answered as PUT_OK so the SYNC_MASTER
  wait runs again); a DLedger "outcome unknown" is not, as its entry may still be truncated.
- Messages without a UNIQ_KEY, and consumer retries (``%RETRY%``/``%DLQ%`` topics: a message
  sent back again keeps its UNIQ_KEY), are never deduplicated. A delayed send is keyed under
  SCHEDULE_TOPIC_XXXX, where it is stored, so its delivery to the real topic is not a "retry";
  a second delivery of it to the same real topic (a new master re-delivering from the synced
  delayOffset.json) is answered from the window.

Theory of operation: two :class:`broker.gc_quiet.RecentTable` (message keys, whole requests) in
arrival order, trimmed on insert by age and size; all calls on the broker's event loop except :meth:`RecentSends.on_arrival` (the reput thread),
hence the lock.

Memory shape (issue 22.3): the window holds up to 60 s of traffic, hundreds of thousands of
entries, and Python's cyclic collector visits every element of every container it walks on each
full collection, with every thread stopped. Entries are therefore packed bytes in tables the
collector never walks (:mod:`broker.gc_quiet`): ``(queueId, queueOffset, physicalOffset, size)``
per key, a marshalled :data:`Row` per remembered request. With an ``OrderedDict`` of objects in
their place, a full collection of a DLedger leader at 1,000 msgs/s grew to 0.3-0.5 s and cost it
the leadership; with one of flat tuples, to 60-100 ms.
"""
from __future__ import annotations

import asyncio
import marshal
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from broker.gc_quiet import RecentTable
from broker.store.message_id import create_message_id
from broker.store.message_const import PROPERTY_DELAY_TIME_LEVEL, RMQ_SYS_SCHEDULE_TOPIC

PROPERTY_UNIQ_KEY = "UNIQ_KEY"
NO_DEDUP_PREFIXES = ("%RETRY%", "%DLQ%")


@dataclass(slots=True, frozen=True)
class Stored:
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int


Key = tuple[str, str]
#: a remembered request's answer, flat: (msgIds, queueOffsets, physicalOffsets, wroteBytes,
#: nextOffset, queueId); the caller packs and unpacks it (StoreAccess: PutOutcome)
Row = tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...], int, int, "int | None"]
_STORED = struct.Struct("<iqqi")  # queueId, queueOffset, physicalOffset, size


def _request_key(keys: Sequence[Key]) -> str:
    return "\1".join(f"{topic}\0{uniq}" for topic, uniq in keys)


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
        self._inflight: dict[Key, tuple[tuple[Key, ...], asyncio.Future[Any]]] = {}
        self._requests = RecentTable(self.max_keys)  # request key -> marshalled Row
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # the one begin() last ran on,
        self._loop_thread = 0  # on this thread (threading.get_ident())
        self.hits = 0

    @property
    def enabled(self) -> bool:
        return self.window > 0

    def on_arrival(self, batch: Sequence[Any]) -> None:
        """The store's arrival listener: remember each dispatched message that has a UNIQ_KEY."""
        if not self.enabled:
            return
        now = self._clock()
        limit = now - self.window
        pack = _STORED.pack
        with self._lock:
            put = self._keys.put
            for r in batch:
                if r.uniq_key:
                    put(f"{r.topic}\0{r.uniq_key}", now,
                        pack(r.queue_id, r.consume_queue_offset, r.commitlog_offset, r.msg_size), limit, self.max_keys)
            self._keys.trim(limit, self.max_keys)

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
                    self._keys.put(f"{r.topic}\0{r.uniq_key}", at,
                                   pack(r.queue_id, r.consume_queue_offset, r.commitlog_offset, r.msg_size), limit,
                                   self.max_keys)

    @staticmethod
    def keys_of(msgs: Sequence[Any]) -> list[Key] | None:
        """The (topic it is stored under, UNIQ_KEY) of every message, or None if one has none.

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
            out.append((RMQ_SYS_SCHEDULE_TOPIC if delayed else m.topic, uniq))
        return out

    def lookup(self, keys: Sequence[Key]) -> list[Stored] | None:
        """The stored messages of every key, or None unless all are in the window."""
        limit = self._clock() - self.window
        with self._lock:
            found = []
            for topic, uniq in keys:
                hit = self._keys.get(f"{topic}\0{uniq}", limit)
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
        """The put in flight with exactly these keys, if any."""
        got = self._inflight.get(keys[0])
        if got is None or got[0] != tuple(keys) or got[1].done():
            return None
        return got[1]

    def begin(self, keys: Sequence[Key]) -> asyncio.Future[Any]:
        """A future for the put of ``keys`` starting now, on the running loop. The loop is
        remembered with the thread it was running on: while it still runs and the caller is on
        that thread, it is the running loop (a thread runs one loop at a time; a loop, ours
        included, is not moved to another thread while it runs), which spares
        ``asyncio.get_running_loop()`` and its ``getpid()`` system call per request (CPython
        3.11; uvloop's loop has no public thread id, hence the pair). Otherwise asyncio is asked,
        as before: outside a loop that raises RuntimeError."""
        loop = self._loop
        thread = threading.get_ident()
        if loop is None or thread != self._loop_thread or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
            self._loop_thread = thread
        fut: asyncio.Future[Any] = loop.create_future()
        entry = (tuple(keys), fut)
        for k in keys:
            self._inflight[k] = entry
        return fut

    def end(self, keys: Sequence[Key], fut: asyncio.Future[Any]) -> None:
        for k in keys:
            got = self._inflight.get(k)
            if got is not None and got[1] is fut:
                del self._inflight[k]

    def remember(self, keys: Sequence[Key], row: Row) -> None:
        """A stored answer of this broker to exactly these keys (module rules), flat."""
        now = self._clock()
        with self._lock:
            self._requests.put(_request_key(keys), now, marshal.dumps(row), now - self.window, self.max_keys)

    def recall(self, keys: Sequence[Key]) -> Row | None:
        """The remembered answer to exactly these keys, if still in the window."""
        with self._lock:
            got = self._requests.get(_request_key(keys), self._clock() - self.window)
        if got is None:
            return None
        self.hits += len(keys)
        row: Row = marshal.loads(got)
        return row

    def status(self) -> dict[str, Any]:
        with self._lock:
            self._keys.trim(self._clock() - self.window, self.max_keys)
            return {"windowSeconds": self.window, "keys": len(self._keys), "hits": self.hits}

"""The dedup window survives a restart: rebuilt from the commitlog's tail (issue 24.2).

Why: after a kill -9 or a clean restart the window (``broker.put_dedup``) was empty, so a
producer retrying a send whose answer it never saw (same UNIQ_KEY) stored it twice: 141
duplicates in 100 kill -9 of a classic master. The commitlog holds every key the window would
have held; reading its last ``sendDedupWindowSeconds`` back at start gives the window back.

Rules:
- Only what was dispatched before the rebuild is read (``[start, reput offset)``), with the
  store's own record parser (both modes, both regions), through a throwaway
  ReputMessageService that has no dispatcher: nothing is written. Records dispatched while the
  rebuild runs reach the window through its arrival listener, registered first; a key fed twice
  is harmless.
- Each key keeps its age: a record stored ``a`` seconds ago enters the window as if it had
  arrived ``a`` seconds ago, so it leaves the window when it would have.
- ``start`` is a record boundary found without scanning from the file start: any ConsumeQueue
  unit names a record start, so the first unit at or after a candidate offset (binary search
  in each queue) is one. The candidate moves back (4 MiB, doubling, at most
  ``MAX_SCAN_BYTES``) until the record there is older than the window or the log starts.
- Bounded: at most ``MAX_SCAN_BYTES`` (512 MiB) are read; a window that held more than that
  keeps its newest part (a warning says so). The time it took is logged.

Theory of operation: :func:`rebuild_window` is called once by ``StoreAccess.enable_dedup``
after the store started; it feeds ``RecentSends.on_arrival_at`` in commitlog order.
"""
from __future__ import annotations

import logging
import time
from itertools import groupby
from typing import Any, Callable, Optional

from broker.store.dispatch import DispatchRequest
from broker.store.reput import ReputMessageService

log = logging.getLogger(__name__)

FIRST_STEP = 4 << 20
MAX_SCAN_BYTES = 512 << 20


def _boundary_at_or_after(store: Any, target: int, limit: int) -> Optional[int]:
    """The smallest commitlog offset >= ``target`` (and < ``limit``) of a dispatched record."""
    best: Optional[int] = None
    for cq in store.consume_queue_store.consume_queues():
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        if lo >= hi:
            continue
        last = cq.get(hi - 1)
        if last is None or last[0] < target:
            continue
        while lo < hi:  # first unit with phy >= target
            mid = (lo + hi) // 2
            u = cq.get(mid)
            if u is None or u[0] < target:
                lo = mid + 1
            else:
                hi = mid
        u = cq.get(lo)
        if u is not None and u[0] < limit and (best is None or u[0] < best):
            best = u[0]
    return best


def _stored_at(store: Any, offset: int) -> Optional[int]:
    msg = store.look_message_by_offset(offset)
    return msg.store_timestamp if msg is not None else None


def find_start(store: Any, cutoff_ms: int, limit: int) -> Optional[int]:
    """A record boundary at or before the first record stored at/after ``cutoff_ms`` (bounded)."""
    floor = max(0, store.commitlog.min_offset)
    step = FIRST_STEP
    start: Optional[int] = None
    while True:
        target = max(floor, limit - step)
        found = _boundary_at_or_after(store, target, limit)
        if found is not None:
            start = found
        if target <= floor or step >= MAX_SCAN_BYTES:
            break
        ts = _stored_at(store, found) if found is not None else None
        if ts is not None and ts < cutoff_ms:
            break
        step *= 2
    return start


def rebuild_window(store: Any, window_s: float, feed: Callable[[list[DispatchRequest], float], None],
                   now_ms: Optional[int] = None) -> int:
    """Feed every record of the last ``window_s`` seconds that was dispatched; returns how many."""
    t0 = time.monotonic()
    reput = getattr(store, "reput", None)
    if reput is None or window_s <= 0 or store.consume_queue_store is None:
        return 0
    limit = reput.reput_from_offset
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff_ms = now_ms - int(window_s * 1000)
    found = find_start(store, cutoff_ms, limit)
    if found is None:
        return 0
    # a DLedger-region record is read from its entry's header (DLedgerCommitLog.scan_start_of)
    start = getattr(store.commitlog, "scan_start_of", lambda o: o)(found)
    fed = 0

    def collect(batch: list[DispatchRequest]) -> None:
        nonlocal fed
        recent = [r for r in batch if r.uniq_key and r.store_timestamp >= cutoff_ms]
        # one call per run of records stored in the same millisecond: each keeps its own age
        for stored_ms, run in groupby(recent, key=lambda r: r.store_timestamp):
            feed(list(run), (now_ms - stored_ms) / 1000.0)
        fed += len(recent)

    scan = ReputMessageService(store.commitlog, [], reput_from_offset=start, limit_offset=lambda: limit,
                               listeners=[collect])
    scan.do_reput()  # one pass reads to ``limit`` (it loops over files itself)
    if limit - start >= MAX_SCAN_BYTES:
        log.warning("send dedup window: rebuilt from the last %d MiB of the commitlog only (MAX_SCAN_BYTES); "
                    "older keys of the window are not remembered", MAX_SCAN_BYTES >> 20)
    log.info("send dedup window rebuilt from the commitlog tail [%d, %d): %d key(s) of the last %.0f s in %.2f s",
             start, limit, fed, window_s, time.monotonic() - t0)
    return fed

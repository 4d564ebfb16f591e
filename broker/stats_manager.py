"""The counts Apache's admin tools read: BrokerStatsManager's per-key totals and StoreStatsService's put times.

Rules:
- :class:`KeyedCounts` (4.9.8 ``BrokerStatsManager``, ``mqadmin statsAll``): running totals per
  ``(statsName, key)`` (``TOPIC_PUT_NUMS`` per topic, ``GROUP_GET_NUMS`` per ``topic@group``)
  and, once a second (:meth:`KeyedCounts.sample`), a snapshot of the keys that changed, in a
  deque of 61 s per key: memory is bounded by the keys active in the last two minutes.
- :class:`PutTimes` (4.9.8 ``StoreStatsService``: ``putMessageEntireTimeMax``,
  ``putMessageDistributeTime``, ``putLatency99``): the max put time and one count per whole
  millisecond (bounded: :data:`MS_CAP` + 1 keys); Apache's 13 buckets are summed from the
  per-ms counts when asked, which is exact because every bucket bound is a whole ms at most
  :data:`MS_CAP` and the only count above it is the last bucket's.
- Both are fed once per put or pull from the event loop thread (no locks) and read at request
  time by the admin processors (``processors.broker_stats``, ``processors.admin_stats``).

Theory of operation: plain dicts of ints, compiled with mypyc (``broker.native``, issue 22):
the send path's accounting was five interpreted calls per request (a closure wrapping the
latency histogram, the histogram, two counters, this table); now it is one compiled call,
:meth:`broker.api.metrics.BrokerMetrics.observe_put`, that reaches these directly.
"""
from __future__ import annotations

import bisect
import collections
import math
import time
from typing import Final

# Apache's StoreStatsService.PUT_MESSAGE_ENTIRE_TIME_MAX_DESC: (upper bound in ms, exclusive; label)
DISTRIBUTE_BUCKETS: Final[tuple[tuple[float, str], ...]] = (
    (1, "[<=0ms]"), (10, "[0~10ms]"), (50, "[10~50ms]"), (100, "[50~100ms]"), (200, "[100~200ms]"),
    (500, "[200~500ms]"), (1000, "[500ms~1s]"), (2000, "[1~2s]"), (3000, "[2~3s]"), (4000, "[3~4s]"),
    (5000, "[4~5s]"), (10000, "[5~10s]"), (math.inf, "[10s~]"))
MS_CAP: Final = 10000  # per-ms counts above this go to one key
TOPIC_PUT_NUMS: Final = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS: Final = "GROUP_GET_NUMS"

StatsKey = tuple[str, str]


class KeyedCounts:
    """Running totals per (statsName, key) and, per key, the per-second totals of its last minute."""

    def __init__(self) -> None:
        self.totals: dict[StatsKey, int] = {}
        self._sampled: dict[StatsKey, int] = {}  # total at the previous sample
        self._history: dict[StatsKey, collections.deque[tuple[float, int]]] = {}
        self._changed: set[StatsKey] = set()

    def add(self, name: str, key: str, n: int) -> None:
        k = (name, key)
        self.totals[k] = self.totals.get(k, 0) + n
        self._changed.add(k)

    def sample(self) -> None:
        """Once a second: remember (time, total before this second) for each key that changed."""
        now = time.monotonic()
        for k in self._changed:
            hist = self._history.get(k)
            if hist is None:
                hist = self._history[k] = collections.deque(maxlen=61)
            hist.append((now, self._sampled.get(k, 0)))
            self._sampled[k] = self.totals.get(k, 0)
        self._changed.clear()
        for k in [k for k, h in self._history.items() if h and now - h[-1][0] > 120]:
            del self._history[k]  # idle keys: nothing left in their minute

    def minute(self, name: str, key: str) -> tuple[int, float]:
        """(count in about the last minute, per second)."""
        k = (name, key)
        now, total = time.monotonic(), self.totals.get(k, 0)
        base = self._sampled.get(k, total)  # nothing sampled in the window: only what is not sampled yet counts
        for t, before in self._history.get(k, ()):
            if now - t <= 60:
                base = before
                break
        count = max(0, total - base)
        return count, count / 60.0


class PutTimes:
    """Max, Apache's distribution buckets and per-ms counts of put times (module rules)."""

    def __init__(self) -> None:
        self.max_ms = 0
        self.per_ms: dict[int, int] = {}

    def add_seconds(self, seconds: float) -> None:
        """One put that took ``seconds`` (the latency histogram's unit)."""
        self.add(seconds * 1000.0)

    def add(self, ms: float) -> None:
        whole = int(ms)
        if whole < 0:
            whole = 0
        if whole > self.max_ms:
            self.max_ms = whole
        key = whole if whole < MS_CAP else MS_CAP
        self.per_ms[key] = self.per_ms.get(key, 0) + 1

    @property
    def buckets(self) -> list[int]:
        """Counts per :data:`DISTRIBUTE_BUCKETS` bucket (a put of ``ms`` is in the first whose bound exceeds it)."""
        out = [0] * len(DISTRIBUTE_BUCKETS)
        bounds = [bound for bound, _label in DISTRIBUTE_BUCKETS]
        for ms, n in self.per_ms.items():
            out[bisect.bisect_right(bounds, ms)] += n
        return out

    def distribution(self) -> str:
        return "".join(f"{label}:{n} " for (_bound, label), n in zip(DISTRIBUTE_BUCKETS, self.buckets))

    def percentile(self, share: float) -> float:
        """The smallest whole ms under which ``share`` of the puts finished (0 with none)."""
        total = sum(self.per_ms.values())
        if total == 0:
            return 0.0
        seen = 0
        for ms in sorted(self.per_ms):
            seen += self.per_ms[ms]
            if seen >= share * total:
                return float(ms + 1)
        return float(MS_CAP)

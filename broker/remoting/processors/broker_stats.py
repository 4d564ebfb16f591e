"""VIEW_BROKER_STATS_DATA (315): per-topic put and per-group get counts for ``mqadmin statsAll``.

Rules (4.9.8 ``BrokerStatsManager`` / ``AdminBrokerProcessor.viewBrokerStatsData``; issue 14.4):
``statsName`` ``TOPIC_PUT_NUMS`` (key: topic) or ``GROUP_GET_NUMS`` (key: ``topic@group``); the
answer is BrokerStatsData ``{"statsMinute","statsHour","statsDay"}`` each ``{"sum","tps","avgpt"}``:
the minute's sum and rate come from one-second samples of the last 61 s; hour and day sums are
the counts since this process started, capped to nothing older than the process (Apache keeps
per-window snapshots; a broker younger than a day reports what it saw). A key never counted is
SYSTEM_ERROR "The stats <name> <key> not exist", as Apache.

Theory of operation: :class:`KeyedCounts` keeps running totals per (name, key) and, once a
second, a snapshot of the keys that changed, in a deque of 61 seconds: memory is bounded by the
keys active in the last minute.
"""
from __future__ import annotations

import collections
import json
import time

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC, ResponseCode as R
from broker.remoting.processors.common import HandlerRegistry, HeaderError, Processor, RemotingContext, field_str
from broker.remoting.server import RemotingConnection

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"


class KeyedCounts:
    """Running totals per (statsName, key) and, per key, the per-second totals of its last minute."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], int] = collections.defaultdict(int)
        self._sampled: dict[tuple[str, str], int] = {}  # total at the previous sample
        self._history: dict[tuple[str, str], collections.deque[tuple[float, int]]] = {}
        self._changed: set[tuple[str, str]] = set()

    def add(self, name: str, key: str, n: int) -> None:
        self.totals[(name, key)] += n
        self._changed.add((name, key))

    def sample(self) -> None:
        """Once a second: remember (time, total before this second) for each key that changed."""
        now = time.monotonic()
        for k in self._changed:
            hist = self._history.setdefault(k, collections.deque(maxlen=61))
            hist.append((now, self._sampled.get(k, 0)))
            self._sampled[k] = self.totals[k]
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


class BrokerStatsProcessor(Processor):
    def __init__(self, ctx: RemotingContext) -> None:
        super().__init__(ctx)
        self.counts = KeyedCounts()

    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.VIEW_BROKER_STATS_DATA, self.view_broker_stats_data)

    async def view_broker_stats_data(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            name = field_str(cmd, "statsName", required=True) or ""
            key = field_str(cmd, "statsKey", required=True) or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        if (name, key) not in self.counts.totals:
            return cmd.response(R.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        count, tps = self.counts.minute(name, key)
        total = self.counts.totals[(name, key)]
        body = {"statsDay": {"avgpt": 0.0, "sum": total, "tps": round(tps, 2)},
                "statsHour": {"avgpt": 0.0, "sum": total, "tps": round(tps, 2)},
                "statsMinute": {"avgpt": 0.0, "sum": count, "tps": round(tps, 2)}}
        return cmd.response(R.SUCCESS, None, body=json.dumps(body, separators=(",", ":")).encode())

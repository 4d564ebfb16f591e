"""VIEW_BROKER_STATS_DATA (315): per-topic put and per-group get counts for ``mqadmin statsAll``.

Rules (4.9.8 ``BrokerStatsManager`` / ``AdminBrokerProcessor.viewBrokerStatsData``; issue 14.4):
``statsName`` ``TOPIC_PUT_NUMS`` (key: topic) or ``GROUP_GET_NUMS`` (key: ``topic@group``); the
answer is BrokerStatsData ``{"statsMinute","statsHour","statsDay"}`` each ``{"sum","tps","avgpt"}``:
the minute's sum and rate come from one-second samples of the last 61 s; hour and day sums are
the counts since this process started, capped to nothing older than the process (Apache keeps
per-window snapshots; a broker younger than a day reports what it saw). A key never counted is
SYSTEM_ERROR "The stats <name> <key> not exist", as Apache.

Theory of operation: the counts are the broker's ``metrics.stats_counts``
(``broker.stats_manager.KeyedCounts``: running totals per (name, key) and, once a second, a
snapshot of the keys that changed, in a deque of 61 seconds: memory is bounded by the keys
active in the last minute), fed by every put (``BrokerMetrics.observe_put``) and pull.
"""
from __future__ import annotations

import json

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC, ResponseCode as R
from broker.remoting.processors.common import HandlerRegistry, HeaderError, Processor, RemotingContext, field_str
from broker.remoting.server import RemotingConnection

from broker.stats_manager import GROUP_GET_NUMS, TOPIC_PUT_NUMS, KeyedCounts

__all__ = ["BrokerStatsProcessor", "GROUP_GET_NUMS", "KeyedCounts", "TOPIC_PUT_NUMS"]


class BrokerStatsProcessor(Processor):
    def __init__(self, ctx: RemotingContext) -> None:
        super().__init__(ctx)
        self.counts: KeyedCounts = self.c.metrics.stats_counts

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

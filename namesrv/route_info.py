"""RouteInfoManager: which brokers exist, which topics they serve, and who is alive.

Rules (apache/rocketmq 4.9.x ``RouteInfoManager``):
- ``register_broker``: the cluster gets the brokerName; the broker's address is put under its
  brokerId in ``brokerAddrs``, after removing any other id with the same address (a DLedger
  slave becoming master re-registers ``<0, addr>`` and its old ``<1, addr>`` goes). Only a
  master (brokerId 0) updates queue data, and only when its topic config ``dataVersion``
  changed or it registers first. A slave learns the master's address and HA address.
- A broker is alive while it re-registers: the scan drops brokers silent for more than
  ``broker_channel_max_idle_ms`` (120 s), and a broker whose registering connection closes is
  dropped at once (``BrokerHousekeepingService.onChannelDestroy``).
- Dropping a broker removes its address; a brokerName with no address left leaves the
  cluster and takes its queue data along (topics with no queue data left disappear).
- ``pickup_topic_route_data``: queue data of the topic + the BrokerData of each brokerName
  that serves it; None when the topic has no queue data or no live broker.

Theory of operation: plain dicts mutated by one asyncio loop (no lock needed); ``now_ms`` is
passed in, so tests drive expiry without sleeping. Output dicts have RocketMQ's JSON names.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

log = logging.getLogger("namesrv.route")

MASTER_ID = 0
BROKER_CHANNEL_MAX_IDLE_MS = 120_000


@dataclass
class BrokerLiveInfo:
    last_update_ms: int
    data_version: Any
    conn: Any
    ha_server_addr: Optional[str]


class RouteInfoManager:
    def __init__(self, broker_channel_max_idle_ms: int = BROKER_CHANNEL_MAX_IDLE_MS) -> None:
        self.max_idle_ms = broker_channel_max_idle_ms
        self.topic_queue_table: dict[str, dict[str, dict[str, Any]]] = {}
        self.broker_addr_table: dict[str, dict[str, Any]] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ register
    def register_broker(self, cluster: str, addr: str, name: str, broker_id: int, ha_addr: Optional[str],
                        topic_wrapper: Optional[dict[str, Any]], conn: Any, now_ms: int) -> dict[str, Optional[str]]:
        self.cluster_addr_table.setdefault(cluster, set()).add(name)
        bd = self.broker_addr_table.get(name)
        first = bd is None
        if bd is None:
            bd = {"cluster": cluster, "brokerName": name, "brokerAddrs": {}}
            self.broker_addr_table[name] = bd
        addrs: dict[int, str] = bd["brokerAddrs"]
        for bid in [b for b, a in addrs.items() if a == addr and b != broker_id]:
            del addrs[bid]
        old = addrs.get(broker_id)
        addrs[broker_id] = addr
        if broker_id == MASTER_ID and old != addr:
            log.info("cluster [%s] brokerName [%s] master address change from %s to %s", cluster, name, old, addr)
        first = first or old is None
        version = (topic_wrapper or {}).get("dataVersion")
        if topic_wrapper is not None and broker_id == MASTER_ID:
            prev = self.broker_live_table.get(addr)
            if first or prev is None or prev.data_version != version:
                for tc in (topic_wrapper.get("topicConfigTable") or {}).values():
                    self._create_and_update_queue_data(name, tc)
        if addr not in self.broker_live_table:
            log.info("new broker registered, %s (%s id %d) HAServer: %s", addr, name, broker_id, ha_addr)
        self.broker_live_table[addr] = BrokerLiveInfo(now_ms, version, conn, ha_addr)
        result: dict[str, Optional[str]] = {"haServerAddr": None, "masterAddr": None}
        if broker_id != MASTER_ID:
            master = addrs.get(MASTER_ID)
            live = self.broker_live_table.get(master) if master else None
            if live is not None:
                result = {"haServerAddr": live.ha_server_addr, "masterAddr": master}
        return result

    def _create_and_update_queue_data(self, broker_name: str, tc: dict[str, Any]) -> None:
        topic = tc.get("topicName")
        if not topic:
            return
        qd = {"brokerName": broker_name, "readQueueNums": int(tc.get("readQueueNums", 16)),
              "writeQueueNums": int(tc.get("writeQueueNums", 16)), "perm": int(tc.get("perm", 6)),
              "topicSysFlag": int(tc.get("topicSysFlag", 0))}
        per_broker = self.topic_queue_table.setdefault(topic, {})
        if per_broker.get(broker_name) != qd:
            if broker_name in per_broker:
                log.info("topic changed, %s OLD: %s NEW: %s", topic, per_broker[broker_name], qd)
            per_broker[broker_name] = qd

    def touch(self, addr: str, now_ms: int) -> Optional[BrokerLiveInfo]:
        live = self.broker_live_table.get(addr)
        if live is not None:
            live.last_update_ms = now_ms
        return live

    # ------------------------------------------------------------------ unregister / expiry
    def unregister_broker(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        self.broker_live_table.pop(addr, None)
        self.filter_server_table.pop(addr, None)
        bd = self.broker_addr_table.get(name)
        removed_name = False
        if bd is not None:
            if bd["brokerAddrs"].get(broker_id) == addr:
                del bd["brokerAddrs"][broker_id]
            log.info("unregisterBroker, remove addr from brokerAddrTable %s, %s", addr, name)
            if not bd["brokerAddrs"]:
                del self.broker_addr_table[name]
                removed_name = True
        if removed_name:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.cluster_addr_table[cluster]
            self._remove_topic_by_broker_name(name)

    def _destroy(self, addr: str, reason: str) -> None:
        self.broker_live_table.pop(addr, None)
        self.filter_server_table.pop(addr, None)
        for name, bd in list(self.broker_addr_table.items()):
            addrs = bd["brokerAddrs"]
            for bid in [b for b, a in addrs.items() if a == addr]:
                del addrs[bid]
                log.info("broker %s (%s id %d) removed: %s", addr, name, bid, reason)
            if not addrs:
                del self.broker_addr_table[name]
                for cluster, names in list(self.cluster_addr_table.items()):
                    names.discard(name)
                    if not names:
                        del self.cluster_addr_table[cluster]
                self._remove_topic_by_broker_name(name)

    def _remove_topic_by_broker_name(self, name: str) -> None:
        for topic, per_broker in list(self.topic_queue_table.items()):
            if per_broker.pop(name, None) is not None and not per_broker:
                del self.topic_queue_table[topic]

    def scan_not_active_broker(self, now_ms: int) -> list[str]:
        expired = [a for a, live in self.broker_live_table.items() if live.last_update_ms + self.max_idle_ms < now_ms]
        for addr in expired:
            live = self.broker_live_table[addr]
            if live.conn is not None and hasattr(live.conn, "transport") and live.conn.transport is not None:
                live.conn.transport.close()
            self._destroy(addr, f"not active for {self.max_idle_ms} ms")
        return expired

    def on_channel_destroy(self, conn: Any) -> list[str]:
        gone = [a for a, live in self.broker_live_table.items() if live.conn is conn]
        for addr in gone:
            self._destroy(addr, "its connection closed")
        return gone

    # ------------------------------------------------------------------ queries
    def pickup_topic_route_data(self, topic: str) -> Optional[dict[str, Any]]:
        per_broker = self.topic_queue_table.get(topic)
        if not per_broker:
            return None
        broker_datas = []
        for name in sorted(per_broker):
            bd = self.broker_addr_table.get(name)
            if bd is not None:
                broker_datas.append({"brokerAddrs": {str(k): v for k, v in sorted(bd["brokerAddrs"].items())},
                                     "brokerName": name, "cluster": bd["cluster"]})
        if not broker_datas:
            return None
        filters = {a: self.filter_server_table[a] for bd in broker_datas for a in bd["brokerAddrs"].values()
                   if a in self.filter_server_table}
        return {"brokerDatas": broker_datas, "filterServerTable": filters,
                "queueDatas": [dict(per_broker[n]) for n in sorted(per_broker)]}

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {n: {"brokerAddrs": {str(k): v for k, v in sorted(bd["brokerAddrs"].items())},
                                    "brokerName": n, "cluster": bd["cluster"]}
                                for n, bd in sorted(self.broker_addr_table.items())},
            "clusterAddrTable": {c: sorted(names) for c, names in sorted(self.cluster_addr_table.items())},
        }

    def topic_list(self) -> list[str]:
        return sorted(self.topic_queue_table)

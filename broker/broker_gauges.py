"""The broker's Prometheus gauges: role, commitlog offsets, dispatch, HA, listen ports, held pulls, DLedger member.

Rules: every gauge is a callback read at scrape time from a :class:`GaugeSource` (the
``BrokerController``); nothing is cached, so a scrape shows the state of that moment.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Optional, Protocol

from broker.api.metrics import BrokerMetrics
from broker.gc_watch import WATCH

if TYPE_CHECKING:  # pragma: no cover
    from broker.metadata_access import MetadataAccessor
    from broker.remoting.limits import PendingBudget
    from broker.store_access import StoreAccess


class GaugeSource(Protocol):
    """What the gauges read of a broker."""

    broker_role: str
    broker_id: int
    member_failure: Optional[str]
    store_access: Optional["StoreAccess"]
    metadata: "MetadataAccessor"
    pending_budget: "PendingBudget"
    open_doors: list[Any]  # broker.security_policy.OpenDoor

    def ha_status(self) -> dict[str, Any]: ...

    def listen_status(self) -> dict[str, Any]: ...


def register_broker_gauges(m: BrokerMetrics, b: GaugeSource) -> None:
    """Register the broker's gauges on ``m``; each reads ``b`` at scrape time."""
    m.register_gauge("rocketmq_broker_role", "1 for the current role (label role) and brokerId",
                     lambda: [({"role": b.broker_role, "broker_id": str(b.broker_id)}, 1)])
    m.register_gauge("rocketmq_broker_commitlog_max_offset", "Max physical offset of the commitlog",
                     lambda: [({}, b.store_access.max_phy_offset())] if b.store_access else [])
    m.register_gauge("rocketmq_broker_commitlog_min_offset", "Min physical offset of the commitlog",
                     lambda: [({}, b.store_access.min_phy_offset())] if b.store_access else [])
    m.register_gauge("rocketmq_broker_dispatch_behind_bytes", "Commitlog bytes not yet dispatched to ConsumeQueues",
                     lambda: [({}, b.store_access.dispatch_behind_bytes())] if b.store_access else [])
    m.register_gauge("rocketmq_broker_ha_connections", "Connected slaves (master) or 1/0 connected to master (slave)",
                     lambda: _ha_connections(b))
    m.register_gauge("rocketmq_broker_ha_slave_lag_bytes", "Master max offset minus the best slave ack",
                     lambda: [({}, v)] if (v := b.ha_status().get("slaveLagBytes")) is not None else [])
    m.register_gauge("rocketmq_broker_ha_refused_connections_total", "HA connections refused before admission "
                     "(no/wrong haAuthToken, handshake timeout, limits)", kind="counter", callback=lambda: [({}, v)]
                     if (v := b.ha_status().get("refusedConnections")) is not None else [])
    m.register_gauge("rocketmq_broker_dledger_member_stopped", "1 once the DLedger member stopped itself "
                     "(the broker refuses requests and exits)", lambda: [({}, int(b.member_failure is not None))])
    m.register_gauge("rocketmq_broker_open_doors", "1 per port accepting unauthenticated traffic (exposed=true: "
                     "reachable off loopback; see the start-up SECURITY warning)",
                     lambda: [({"door": d.door, "port": str(d.port), "exposed": str(d.exposed).lower()}, 1)
                              for d in b.open_doors])
    m.register_gauge("rocketmq_broker_topics", "Topics known to this broker", lambda: [({}, len(b.metadata.topics()))])
    m.register_gauge("rocketmq_broker_listen_connections", "Open connections per listen port",
                     lambda: _listen_samples(b, "open"))
    m.register_gauge("rocketmq_broker_listen_pending_bytes", "Bytes reserved by incomplete frames and HTTP bodies",
                     lambda: [({}, b.pending_budget.reserved)])
    m.register_gauge("rocketmq_broker_pull_held", "Long-polled pulls held now (longPollingMaxHeld caps them)",
                     lambda: _pull_hold_samples(b, "held"))
    m.register_gauge("rocketmq_broker_pull_held_bytes", "Request bytes of the held pulls (longPollingMaxHeldBytes "
                     "caps them)", lambda: _pull_hold_samples(b, "heldBytes"))
    m.register_gauge("rocketmq_broker_pull_held_refused_total", "Pulls answered SYSTEM_BUSY at once: "
                     "longPollingMaxHeld, longPollingMaxHeldPerConnection or longPollingMaxHeldBytes reached",
                     lambda: _pull_hold_samples(b, "refused"), kind="counter")
    m.register_gauge("rocketmq_broker_gc_pause_seconds_total", "Time every thread stood still in Python's cyclic "
                     "garbage collector, per generation", lambda: _gc_samples("seconds"), kind="counter")
    m.register_gauge("rocketmq_broker_gc_pause_max_ms", "Longest garbage-collector pause, per generation",
                     lambda: _gc_samples("maxMs"))
    for key, name, help_text in (
            ("refusedByCap", "refused_by_cap", "Connections closed at once: serverMaxConnections reached"),
            ("closedIdle", "closed_idle", "Connections closed after serverChannelMaxIdleTimeSeconds idle"),
            ("closedReadTimeout", "closed_read_timeout", "Connections closed: frame/head/body not done in serverReadTimeoutMillis"),
            ("refusedByPendingBudget", "refused_by_pending_budget", "Frames/bodies refused: serverMaxPendingBytes full")):
        m.register_gauge(f"rocketmq_broker_listen_{name}_total", help_text,
                         functools.partial(_listen_samples, b, key), kind="counter")


def _pull_hold_samples(b: GaugeSource, key: str) -> list[tuple[dict[str, str], float]]:
    """The remoting pull hold service's counter ``key`` (none while remoting is not running)."""
    hold = getattr(getattr(getattr(b, "remoting", None), "pull", None), "hold", None)
    return [({}, hold.status()[key])] if hold is not None else []


def _gc_samples(key: str) -> list[tuple[dict[str, str], float]]:
    return [({"generation": str(g)}, v) for g, v in enumerate(WATCH.snapshot()[key])]


def _listen_samples(b: GaugeSource, key: str) -> list[tuple[dict[str, str], float]]:
    return [({"port": port}, st[key]) for port, st in b.listen_status()["ports"].items()]


def _ha_connections(b: GaugeSource) -> list[tuple[dict[str, str], float]]:
    st = b.ha_status()
    if st["mode"] == "master":
        return [({}, st["connections"])]
    if st["mode"] == "slave":
        return [({}, 1 if st["connected"] else 0)]
    return []

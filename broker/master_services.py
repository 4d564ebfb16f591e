"""The services only a master runs: delayed delivery and the transaction check-back.

Rules: both are built once the store and the metadata are loaded, started when the broker
becomes master (classic master at start; DLedger ready leader in ``change_to_master``) and
stopped when it becomes a slave or shuts down (``broker.controller``); their progress lives in
metadata files the slaves sync (delayOffset.json, consumerOffset.json), so a new master
continues where the old one was.

Theory of operation: two builders, each given the parts it wires (the store adapter, the
metadata, the metrics, a config, and for check-backs a way to reach the remoting front end,
which starts after them); neither sees the controller, so this module imports nothing that
leads back to ``broker.controller`` (issue 26).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    from broker.api.metrics import BrokerMetrics
    from broker.metadata_access import MetadataAccessor
    from broker.store_access import StoreAccess


def _cfg(obj: Any, name: str, default: Any) -> Any:
    return getattr(obj, name, default) if obj is not None else default


def make_schedule(store_access: "StoreAccess", metadata: "MetadataAccessor", metrics: "BrokerMetrics",
                  store_config: Any) -> Any:
    """ScheduleMessageService over the store and delayOffset.json, with its pending gauge."""
    from broker.store.schedule import ScheduleMessageService  # noqa: WPS433

    store = store_access.store
    service = ScheduleMessageService(
        store, metadata.managers["delayOffset"], store_access.put_messages, store.delay_levels,
        int(_cfg(store_config, "flush_delay_offset_interval", 10_000)))
    metrics.register_gauge(
        "rocketmq_broker_schedule_pending", "Delayed messages not yet delivered, per delay level",
        lambda: [({"level": str(lv)}, n) for lv, n in service.pending().items() if n])
    return service


def make_transactions(store_access: "StoreAccess", metadata: "MetadataAccessor", broker_config: Any,
                      remoting_of: Callable[[], Any]) -> Any:
    """TransactionalMessageService; check-backs go oneway to the freshest connection of the half's
    producer group, found through ``remoting_of()`` (the running BrokerRemoting, or None)."""
    from broker.remoting.codec import RemotingCommand  # noqa: WPS433
    from broker.store.message import encode_message  # noqa: WPS433
    from broker.transaction import TransactionalMessageService  # noqa: WPS433

    def producer_channel(group: str) -> Any:
        remoting = remoting_of()
        clients = remoting.consumers.producers.get(group) if remoting is not None else None
        if not clients:
            return None
        info = max(clients.values(), key=lambda i: i.last_update_ms)

        def send(code: int, header: dict[str, Any], body: bytes) -> None:
            cmd = RemotingCommand.request(code, header, body)
            cmd.flag |= 2  # oneway, as Broker2Client.checkProducerTransactionState
            info.conn.send(cmd)
        return send

    b = broker_config
    return TransactionalMessageService(
        store_access.store, metadata.managers["consumerOffset"], store_access.put_internal, producer_channel,
        timeout_ms=int(_cfg(b, "transaction_timeout", 6000)), check_max=int(_cfg(b, "transaction_check_max", 15)),
        check_interval_ms=int(_cfg(b, "transaction_check_interval", 60_000)),
        encode_check=lambda m: bytes(encode_message(m, m.queue_offset, m.commitlog_offset)))

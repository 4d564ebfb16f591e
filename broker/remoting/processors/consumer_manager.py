"""ConsumerManager: the broker's live clients by group (Apache's ``ConsumerManager`` and
``ProducerManager`` tables, as one object).

Rules:
- ``groups``: consumer group -> clientId -> :class:`ClientInfo`; ``producers``: producer group ->
  clientId -> :class:`ClientInfo`. A client is entered by its heartbeat
  (``processors.client_manage``) and leaves on UNREGISTER_CLIENT, when its connection closes
  (:meth:`ConsumerManager.on_close`, a close listener of the server), or ``channel_expired_ms``
  (120 s) after its last heartbeat (:meth:`ConsumerManager.scan_expired`). A group left empty is
  removed.
- A consumer group whose members changed (a new client or connection, one gone) is reported to
  ``on_change`` with the group's clients now (Apache's ConsumerIdsChangeListener:
  NOTIFY_CONSUMER_IDS_CHANGED, ``processors.broker2client``).

Theory of operation: plain in-memory tables on the broker's loop, no locking; its own module so
the processors' context (``processors.common.RemotingContext``) names its type without importing
a processor (issue 26.3).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from broker.remoting.server import RemotingConnection

CHANNEL_EXPIRED_MS = 120_000


@dataclass
class ClientInfo:
    client_id: str
    conn: RemotingConnection  # the connection it heartbeats on (broker2client calls back over it)
    last_update_ms: int
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> subString
    message_model: str = "CLUSTERING"
    # what GET_CONSUMER_CONNECTION_LIST answers (admin_stats): as the client sent it
    client_addr: str = ""
    language: str = "JAVA"
    version: int = 0
    consume_type: str = "CONSUME_PASSIVELY"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data: dict[str, Any] = field(default_factory=dict)  # topic -> SubscriptionData JSON


class ConsumerManager:
    def __init__(self, channel_expired_ms: int = CHANNEL_EXPIRED_MS,
                 on_change: Optional[Callable[[list[ClientInfo], str], None]] = None) -> None:
        self.groups: dict[str, dict[str, ClientInfo]] = {}
        self.producers: dict[str, dict[str, ClientInfo]] = {}
        self.channel_expired_ms = channel_expired_ms
        # a consumer joined or left a group: called with the group's clients now (Apache's
        # ConsumerIdsChangeListener: NOTIFY_CONSUMER_IDS_CHANGED, broker2client)
        self.on_change = on_change

    def _changed(self, group: str) -> None:
        clients = list(self.groups.get(group, {}).values())
        if clients and self.on_change is not None:
            self.on_change(clients, group)

    def register(self, group: str, info: ClientInfo) -> bool:
        table = self.groups.setdefault(group, {})
        old = table.get(info.client_id)
        is_new = old is None or old.conn is not info.conn
        table[info.client_id] = info
        if is_new:
            self._changed(group)
        return is_new

    def unregister(self, group: str, client_id: str) -> None:
        for tables in (self.groups, self.producers):
            t = tables.get(group)
            if t is not None:
                gone = t.pop(client_id, None)
                if not t:
                    del tables[group]
                elif gone is not None and tables is self.groups:
                    self._changed(group)

    def on_close(self, conn: RemotingConnection) -> None:
        self._drop(lambda info: info.conn is conn)

    def scan_expired(self, now_ms: int) -> None:
        self._drop(lambda info: info.last_update_ms + self.channel_expired_ms < now_ms)

    def _drop(self, gone: Callable[[ClientInfo], bool]) -> None:
        """Remove the consumers and producers ``gone`` says are gone, and groups left empty."""
        for tables in (self.groups, self.producers):
            for group in list(tables):
                t = tables[group]
                dropped = [cid for cid, info in t.items() if gone(info)]
                for cid in dropped:
                    del t[cid]
                if not t:
                    del tables[group]
                elif dropped and tables is self.groups:
                    self._changed(group)

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self.groups.get(group, {}))

    def subscription_of(self, group: str, topic: str) -> Optional[str]:
        for info in self.groups.get(group, {}).values():
            if topic in info.subscriptions:
                return info.subscriptions[topic]
        return None

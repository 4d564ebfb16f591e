"""ClassicHA: a classic (non-DLedger) broker's replication, HAService on a master, HAClient on a slave.

Rules (RocketMQ ``BrokerController.start`` -> ``DefaultMessageStore.start`` -> ``HAService``):
- Only a classic broker runs it (``enableDLegerCommitLog=false``; DLedger replicates itself), and
  the role decides which side, once, at start: a master (``ASYNC_MASTER``/``SYNC_MASTER``)
  listens on ``haListenPort`` (``haBindAddress``, else the broker's ``bindAddress``) and wakes
  its slaves after every put; a slave connects to ``haMasterAddress`` and wakes dispatch after
  every append. ``haAuthToken`` set: both sides authenticate (else the classic open protocol).
- A start that cannot listen, or a slave without ``haMasterAddress``, is :class:`HAStartError`
  with one sentence (the controller reports it as its start error).
- Shutdown, in the controller's order: first answer the puts waiting for a slave ack
  (``FLUSH_SLAVE_TIMEOUT``), much later stop the client and the service.
- ``status()`` is the ``/status`` ``ha`` object in RocketMQ's names (None when neither side runs).

Theory of operation: a composed object the controller owns; it is given the configs and names it
needs and, at start, the store adapter (its commitlog and the put/append hooks). It imports
nothing that leads back to ``broker.controller`` (issue 26).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Optional, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from broker.ha.client import HAClient
    from broker.ha.service import HAService
    from broker.store_access import StoreAccess

log = logging.getLogger("broker.controller")


class ReplicationSeam(Protocol):
    """What ``BrokerController.ha`` is: :class:`ClassicHA`, or ``broker.controller_mode.ControllerModeHA``."""

    async def start(self, store_access: "StoreAccess", as_master: bool) -> None: ...

    def summary(self) -> str: ...

    def release_waiting_puts(self) -> None: ...

    async def stop(self) -> None: ...

    def status(self, last_sync: Any) -> Optional[dict[str, Any]]: ...

    def health_problem(self) -> Optional[str]: ...


class HAStartError(RuntimeError):
    """Classic HA could not start; the message says why in one sentence."""


async def listen_or_refuse(start: Awaitable[None], host: str, port: int) -> None:
    """Await an HA service's ``start()`` (it binds ``haListenPort``); a bind failure is one sentence
    (both replication modes' HA doors)."""
    try:
        await start
    except OSError as exc:
        raise HAStartError(f"cannot listen on HA port {host}:{port} (haListenPort): {exc.strerror}") from None


class HASide(Protocol):
    """One end of a replication link (an HA client or an HA service) as shutdown sees it."""

    async def shutdown(self) -> None: ...


async def shut_down_sides(client: Optional[HASide], service: Optional[HASide]) -> None:
    """The last step of both replication modes' ``stop()``: the client first (it stops appending),
    then the service (it stops serving slaves); a side that never ran (None) is passed over. The
    caller has already forgotten both, so a second ``stop()`` finds nothing to shut down."""
    if client is not None:
        await client.shutdown()
    if service is not None:
        await service.shutdown()


def _cfg(obj: Any, name: str, default: Any = None) -> Any:
    value = getattr(obj, name, default)
    return default if value is None else value


class ClassicHA:
    def __init__(self, store_config: Any, *, broker_name: str, bind_address: str, listen_port: int,
                 master_address: Optional[str]) -> None:
        self.store_config = store_config
        self.broker_name = broker_name
        self.bind_address = bind_address
        self.listen_port = listen_port  # haListenPort (a master's)
        self.master_address = master_address  # haMasterAddress (a slave's)
        self.service: HAService | None = None
        self.client: HAClient | None = None

    async def start(self, store_access: "StoreAccess", as_master: bool) -> None:
        from broker.ha.client import HAClient  # noqa: WPS433
        from broker.ha.service import HAService  # noqa: WPS433

        commitlog = store_access.commitlog
        token = _cfg(self.store_config, "ha_auth_token", None) or None  # None: classic open protocol
        if as_master:
            ha_host = _cfg(self.store_config, "ha_bind_address", None) or self.bind_address
            service = HAService(commitlog, self.store_config, host=ha_host, port=self.listen_port,
                                broker_name=self.broker_name, auth_token=token)
            await listen_or_refuse(service.start(), ha_host, self.listen_port)
            self.service = service
            store_access.on_put(self.service.notify_put)
        else:
            if not self.master_address:
                raise HAStartError("brokerRole=SLAVE needs haMasterAddress=<master host>:<master haListenPort>")
            self.client = HAClient(commitlog, self.master_address, self.store_config,
                                   on_append=store_access.wake_dispatch, broker_name=self.broker_name,
                                   auth_token=token)
            await self.client.start()

    def summary(self) -> str:
        """One phrase for the start-up log line."""
        if self.service is not None:
            return f"HA listening on {self.service.host}:{self.service.listen_port}"
        if self.client is not None:
            return f"replicating from HA master {self.master_address}"
        return "no HA"

    def release_waiting_puts(self) -> None:
        """Shutdown's first step: puts waiting for a slave ack are answered FLUSH_SLAVE_TIMEOUT."""
        if self.service is not None:
            released = self.service.stop_waiting()
            if released:
                log.info("shutdown: %d put(s) waiting for a slave ack answered FLUSH_SLAVE_TIMEOUT", released)

    async def stop(self) -> None:
        client, service, self.client, self.service = self.client, self.service, None, None
        await shut_down_sides(client, service)

    def health_problem(self) -> Optional[str]:
        return None  # classic HA never stops a broker from serving

    def status(self, last_sync: Any) -> Optional[dict[str, Any]]:
        """``/status`` ``ha``: the master's slaves and lag, or the slave's link (with SlaveSynchronize's
        ``last_sync``); None when neither side runs."""
        if self.service is not None:
            st = self.service.status()
            acked = st.get("push2slave_max_offset", 0)
            return {"mode": "master", "listenPort": st.get("listen_port"), "connections": st.get("connection_count", 0),
                    "push2SlaveMaxOffset": acked, "slaveLagBytes": max(0, st.get("master_max_offset", 0) - acked)
                    if st.get("connection_count") else None, "slaves": st.get("slaves", []),
                    "auth": st.get("auth"), "authenticatedSlaves": st.get("authenticated_slave_count"),
                    "pendingConnections": st.get("pending_connections"),
                    "refusedConnections": st.get("refused_connections")}
        if self.client is not None:
            st = self.client.status()
            return {"mode": "slave", "connected": st.get("connected"), "masterHaAddress": st.get("master_address"),
                    "maxOffset": st.get("max_offset"), "bytesReceived": st.get("bytes_received"),
                    "connectCount": st.get("connect_count"), "lastError": st.get("last_error"),
                    "auth": st.get("auth"), "handshakeFailures": st.get("handshake_failures"),
                    "lastSync": last_sync}
        return None

"""BrokerRemoting: the remoting side of one broker — server, processors, ACL, name server.

Rules:
- The server listens on ``listenPort`` (RocketMQ's port). When the HTTP API has no port of its
  own (``httpListenPort`` unset or equal), the same port also serves HTTP: the server hands
  connections that start with an ASCII letter to aiohttp (see ``broker.remoting.server``), so
  existing conf files, tools and tests keep working while real clients speak remoting.
- ``aclEnable=true`` installs :class:`broker.remoting.acl.PlainAccessValidator` on every remoting
  request, reading ``plainAclFile`` (ours), else ``$rocketmqHome/conf/plain_acl.yml``. It is the
  controller's validator (``acl_validator``), the same object the HTTP API's ACL decides with
  (``broker.api.http_acl``), so both protocols share one reading of the file and one decision.
- ``namesrvAddr`` set: a :class:`BrokerRegistrar` registers the broker (see there). Role changes
  (``change_to_master``/``change_to_slave``) call :meth:`role_changed`.
- Limits: the server applies the controller's ``ListenLimits`` (idle/read timeouts, connection
  cap) and shares its pending-bytes budget with a split ``httpListenPort`` (``broker.remoting.limits``).
- DLedger follower: sends are forwarded to the leader (``broker.remoting.forward``,
  ``forwardSendsToLeader``).
- Stop: unregister from the name servers, wake held pulls, close the listener and the
  remoting connections.

Theory of operation: built and started by the BrokerController after the store and metadata
are up; every processor reaches the broker through ``controller`` / ``broker_processor``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Optional

from broker.remoting.processors.admin import AdminBrokerProcessor
from broker.remoting.processors.admin_stats import AdminStatsProcessor
from broker.remoting.processors.broker2client import Broker2ClientProcessor, notify_consumer_ids_changed
from broker.remoting.processors.broker_stats import BrokerStatsProcessor
from broker.remoting.processors.controller_notify import register_controller_notify
from broker.remoting.processors.transaction import EndTransactionProcessor
from broker.remoting.processors.client_manage import ClientManageProcessor, ConsumerManager
from broker.remoting.processors.pull import PullMessageProcessor
from broker.remoting.processors.rebalance_lock import RebalanceLockProcessor
from broker.remoting.processors.send import SendMessageProcessor
from broker.remoting.processors.topic_group_admin import TopicGroupAdminProcessor
from broker.remoting.codes import RequestCode as RC
from broker.remoting.forward import SendForwarder
from broker.remoting.registrar import BrokerRegistrar, parse_namesrv_addr
from broker.remoting.server import RemotingServer
from broker.tasks import wait_for

log = logging.getLogger("broker.remoting")


class RemotingConfigError(ValueError):
    pass


class BrokerRemoting:
    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.broker_processor = controller.processor
        self.send_service = controller.processor.send
        bc = controller.broker_config
        notify = bool(getattr(bc, "notify_consumer_ids_changed_enable", True))
        self.consumers = ConsumerManager(on_change=notify_consumer_ids_changed if notify else None)
        self.server = RemotingServer(name=f"broker {controller.broker_name} listenPort {controller.listen_port}",
                                     max_frame_length=max(16 * 1024 * 1024, controller.max_message_size * 2 + 65536),
                                     limits=controller.listen_limits, budget=controller.pending_budget)
        self.server.close_listeners.append(self.consumers.on_close)
        self.send = SendMessageProcessor(self)
        self.pull = PullMessageProcessor(self)
        self.client_manage = ClientManageProcessor(self)
        self.admin = AdminBrokerProcessor(self)
        self.admin_stats = AdminStatsProcessor(self)
        self.end_transaction = EndTransactionProcessor(self)
        self.broker_stats = BrokerStatsProcessor(self)
        self.rebalance_lock = RebalanceLockProcessor(self)
        self.broker2client = Broker2ClientProcessor(self)
        self.topic_group_admin = TopicGroupAdminProcessor(self)  # after admin_stats: it answers 300 (GroupList)
        for p in (self.send, self.pull, self.client_manage, self.admin, self.admin_stats, self.end_transaction,
                  self.broker_stats, self.rebalance_lock, self.topic_group_admin, self.broker2client):
            p.register(self.server)
        self.controller_notify = register_controller_notify(self.server, controller)  # 1008, Controller mode only
        self.forwarder: Optional[SendForwarder] = None
        # the leader is known by its API address: the remoting port only when HTTP shares it
        shared = getattr(controller, "http_port", None) == getattr(controller, "listen_port", None)
        if getattr(controller, "dledger_enabled", False) and getattr(bc, "forward_sends_to_leader", True) and shared:
            self.forwarder = SendForwarder(self._leader_to_forward_to)
            for code in (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
                self.server.processors[code] = self.forwarder.wrap(self.server.processors[code])
        self.acl: Any = None
        if getattr(bc, "acl_enable", False):
            self.acl = getattr(controller, "acl_validator", None)
            if self.acl is None:
                from broker.remoting.acl import PlainAccessValidator, acl_file_of  # noqa: WPS433

                self.acl = PlainAccessValidator(acl_file_of(bc))
            self.server.rpc_hooks.append(self.acl)
        try:
            namesrv = parse_namesrv_addr(getattr(bc, "namesrv_addr", None))
        except ValueError as exc:
            raise RemotingConfigError(str(exc)) from None
        self.registrar: Optional[BrokerRegistrar] = None
        if namesrv:
            self.registrar = BrokerRegistrar(controller, namesrv,
                                             period_s=float(getattr(bc, "register_name_server_period", 30_000)) / 1000,
                                             timeout_s=float(getattr(bc, "register_broker_timeout_mills", 6000)) / 1000)
        self.stopping = False
        self._listener: Optional[Callable[[list[Any]], None]] = None
        self._housekeeping: Optional[asyncio.Task[None]] = None

    async def start(self, host: str, port: int, http_factory: Optional[Callable[[], asyncio.Protocol]] = None) -> None:
        loop = asyncio.get_running_loop()
        self.pull.hold.attach(loop)
        store = self.controller.store_access.store
        listeners = getattr(store, "arrival_listeners", None)
        if listeners is not None:
            self._listener = self.pull.hold.on_dispatch
            listeners.append(self._listener)
        self.server.http_factory = http_factory
        await self.server.start(host, port)
        self._housekeeping = loop.create_task(self._housekeeping_loop(), name="remoting-housekeeping")
        self.admin_stats.stats.hooks.append(self.broker_stats.counts.sample)
        self.admin_stats.stats.start()

    def _leader_to_forward_to(self) -> Optional[str]:
        """The leader's listen address while this broker is a running DLedger follower (forward.py)."""
        c = self.controller
        if self.stopping or c.is_master() or c.member_failure is not None:
            return None
        addr: Optional[str] = c.master_api_address
        return addr

    def start_registrar(self) -> None:
        if self.registrar is not None:
            self.registrar.start()

    def role_changed(self) -> None:
        if self.registrar is not None:
            self.registrar.wakeup()

    def registrar_wakeup(self) -> None:
        self.role_changed()

    async def register_now(self, timeout_s: float) -> bool:
        """Register with every name server and wait for it (bounded): Apache's
        ``registerBrokerAll`` called inline when a heartbeat created a retry topic, so the client's
        next route lookup already finds it. False when there is no name server or it timed out."""
        if self.registrar is None or self.controller.broker_id < 0:
            return False
        try:
            return await wait_for(self.registrar.register_all(), timeout_s)
        except asyncio.TimeoutError:
            return False

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(10.0)
            self.consumers.scan_expired(int(time.time() * 1000))

    async def stop(self) -> None:
        self.stopping = True
        self.admin_stats.stats.stop()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            self._housekeeping = None
        if self.registrar is not None:
            await self.registrar.stop(unregister=True)
        self.pull.hold.wake_all()
        store = self.controller.store_access.store if self.controller.store_access is not None else None
        listeners = getattr(store, "arrival_listeners", None)
        if listeners is not None and self._listener in listeners:
            listeners.remove(self._listener)
        await self.server.stop()
        if self.forwarder is not None:
            await self.forwarder.close()

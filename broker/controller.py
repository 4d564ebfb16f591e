"""BrokerController: one broker process — store, HA, metadata, SlaveSynchronize, HTTP API, role.

Rules:
- Start order (RocketMQ ``BrokerController.initialize/start`` + ``DefaultMessageStore.load/start``):
  take the store lock and load + recover + start the store (``DefaultMessageStore.load`` takes
  the lock, ``start`` writes ``abort``; ``StoreLock`` here only if a store does not) -> load the
  metadata JSON files -> HA (classic
  only: ``HAService`` on a master, ``HAClient`` to ``haMasterAddress`` on a slave) -> HTTP API on
  ``listenPort`` (shared with remoting, see ``broker.remoting``) -> SlaveSynchronize (slave only). Any failure undoes what was started and is
  raised as :class:`BrokerStartError` with one clear sentence.
- Shutdown (SIGTERM/SIGINT, or :meth:`shutdown`; ``broker.shutdown`` has the rules): refuse
  writes, answer the puts waiting for a slave ack, close the doors (remoting, HTTP after a short
  drain), stop schedule/transactions, the role handler, SlaveSynchronize and HA, persist
  metadata, shut the store down (flush, delete ``abort`` when nothing is left to dispatch),
  release the lock; each step bounded, the whole within ``shutdownTimeoutMillis``.
- Role is runtime state: ``broker_role`` and ``broker_id`` start from the conf file and change
  only through :meth:`change_to_master` / :meth:`change_to_slave` (DLedger's role-change handler
  calls them; classic mode never does). :meth:`check_writable` is the *only* "am I master?"
  gate on the write path; on a slave it raises ``NOT_MASTER`` with the master's API address.
- In DLedger mode (``enableDLegerCommitLog=true``) no classic HA runs, the broker starts with
  ``brokerId=-1`` and refuses writes until the role-change handler (``broker.role``, started
  right after the store, stopped before it) makes it master. In Controller mode
  (``enableControllerMode=true``) ``ha`` is ``broker.controller_mode.ControllerModeHA``: the broker
  starts fenced (SLAVE, ``brokerId=-1``) and the controller's word calls the same two methods.
- Doors (issue 12): ``listenPort`` (and a split ``httpListenPort``) bind ``bindAddress`` (default
  ``0.0.0.0`` like Apache; the shipped confs say ``127.0.0.1``), logged at start with the limits of
  ``broker.remoting.limits`` (idle/read timeouts, connection cap, one pending-bytes budget for
  both ports); their counters are in ``/status`` (``listen``) and ``/metrics``
  (``rocketmq_broker_listen_*``).
- One log line per state change: started as ROLE, role changed, shutting down, stopped. HA and
  SlaveSynchronize log their own transitions (slave connected/disconnected, sync failing/ok).
- How the process ends (:meth:`run_until_signal`: a stop signal, or a DLedger member that stopped
  itself, issue 13.1, which makes the broker unhealthy and refuse writes at once, then exit with
  code 4) is :class:`broker.lifetime.BrokerLifetime`'s; :meth:`member_stopped` is its door.

Theory of operation: everything runs on one asyncio loop. The controller owns the objects; the
request logic lives in :class:`broker.processor.BrokerProcessor`, store calls in
:class:`broker.store_access.StoreAccess`, metadata calls in
:class:`broker.metadata_access.MetadataAccessor`, classic replication in
:class:`broker.classic_ha.ClassicHA`, the process's end in :class:`broker.lifetime.BrokerLifetime`,
so this module is only lifecycle and role. The objects it
wires get the parts they use, or the controller itself seen through a narrow Protocol
(``ProcessorHost``, ``RoleHost``, ``GaugeSource``); none of them imports this module (issue 26).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from aiohttp import web

from broker.api.metrics import BrokerMetrics
from broker.broker_gauges import register_broker_gauges
from broker.classic_ha import HAStartError, ReplicationSeam
from broker.controller_mode import controller_mode_enabled, make_replication
from broker.api.http_acl import http_acl_for
from broker.api.server import build_app
from broker.native import native_status
from broker.metadata_access import MetadataAccessor
from broker.processor import BrokerProcessor
from broker.remoting.http_guard import install_middleware, start_http_listener
from broker.remoting.limits import ListenLimits, PendingBudget, PortGuard
from broker.lifetime import BrokerLifetime, BrokerMemberStoppedError, BrokerShutdownIncompleteError
from broker.shutdown import ShutdownStep, in_thread, run_steps
from broker.slave_sync import SlaveSynchronize, inner_credentials
from broker.store.lockfile import AbortFile, StoreLock, StoreLockedError, undo_failed_start
from broker.master_services import make_schedule, make_transactions
from broker.store_access import StoreAccess
from broker.refusals import BadRequest, MemberStopped, NotMaster, ServiceNotAvailable
from broker.security_policy import exposed_warnings, open_doors
from broker.tasks import cancel_and_wait

if TYPE_CHECKING:  # pragma: no cover
    from broker.role import DLedgerRoleChangeHandler

log = logging.getLogger("broker.controller")

MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
# at shutdown, in-flight HTTP requests get this long to finish; then aiohttp cancels them and waits
# as long again for the handlers to end (a SYNC_MASTER put waiting for a slave ack is cut: unknown outcome)
HTTP_DRAIN_S = 1.5
SLAVE = "SLAVE"


class BrokerStartError(RuntimeError):
    """The broker could not start; the message says why in one sentence."""


def _cfg(obj: Any, name: str, default: Any = None) -> Any:
    value = getattr(obj, name, default)
    return default if value is None else value


def _role_name(role: Any) -> str:
    return getattr(role, "name", None) or str(role)


class BrokerController:
    def __init__(self, broker_config: Any, store_config: Any, *, conf_path: str | None = None) -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        self.conf_path = conf_path
        self.metrics = BrokerMetrics()
        self.dledger_enabled = bool(_cfg(store_config, "enable_dleger_commit_log", False))
        self.controller_mode = controller_mode_enabled(broker_config)  # fenced: SLAVE, id -1 until elected
        self.broker_role: str = SLAVE if self.controller_mode else _role_name(_cfg(store_config, "broker_role", "ASYNC_MASTER"))
        self.broker_id: int = -1 if self.dledger_enabled or self.controller_mode else int(_cfg(broker_config, "broker_id", 0))
        self.broker_name: str = _cfg(broker_config, "broker_name", "broker-a")
        self.cluster_name: str = _cfg(broker_config, "broker_cluster_name", "DefaultCluster")
        self.broker_ip: str = _cfg(broker_config, "broker_ip1", "127.0.0.1")
        self.listen_port: int = int(_cfg(broker_config, "listen_port", 10911))
        self.http_port: int = int(_cfg(broker_config, "api_listen_port", self.listen_port))
        self.ha_listen_port: int = int(_cfg(store_config, "ha_listen_port", self.listen_port + 1))
        self.root_dir = Path(_cfg(store_config, "store_path_root_dir", os.path.expanduser("~/store")))
        self.max_message_size: int = int(_cfg(store_config, "max_message_size", 4 * 1024 * 1024))
        self.default_topic_queue_nums: int = int(_cfg(broker_config, "default_topic_queue_nums", 8))
        self.auto_create_topic_enable: bool = bool(_cfg(broker_config, "auto_create_topic_enable", True))
        self.slave_sync_interval_s: float = float(_cfg(broker_config, "slave_sync_interval_ms", 10_000)) / 1000.0
        self.ha_master_address: Optional[str] = _cfg(store_config, "ha_master_address", None)
        self._master_api_address: Optional[str] = _cfg(broker_config, "master_address", None)
        self.store_host = (self.broker_ip, self.listen_port)
        self.started_ms = 0
        self.store: Any = None
        self.store_access: StoreAccess | None = None
        self.metadata = MetadataAccessor(self.root_dir, broker_config, store_config)
        self.processor = BrokerProcessor(self)
        self.slave_sync: SlaveSynchronize | None = None
        self.role_handler: DLedgerRoleChangeHandler | None = None  # DLedger mode only
        self.schedule: Any = None  # broker.store.schedule.ScheduleMessageService (runs while master)
        self.transactions: Any = None  # broker.transaction.TransactionalMessageService (check-back while master)
        self.acl_validator: Any = None  # PlainAccessValidator shared by remoting and HTTP (aclEnable=true)
        self.remoting: Any = None  # broker.remoting.broker_remoting.BrokerRemoting (listenPort)
        # where listenPort (and a split httpListenPort) listen, and their limits (issue 12)
        self.bind_address: str = str(_cfg(broker_config, "bind_address", "0.0.0.0")).strip() or "0.0.0.0"
        self.ha: ReplicationSeam = make_replication(  # ClassicHA, or ControllerModeHA (enableControllerMode)
            self, broker_config, store_config, broker_address=f"{self.broker_ip}:{self.listen_port}",
            bind_address=self.bind_address, listen_port=self.ha_listen_port, master_address=self.ha_master_address,
            root_dir=self.root_dir, metrics=self.metrics)
        self.listen_limits = ListenLimits.from_broker_config(broker_config)
        self.pending_budget = PendingBudget(self.listen_limits.max_pending_bytes)  # all listen ports together
        self.open_doors = open_doors(broker_config, store_config)  # broker.security_policy (issue 23.10)
        self.http_guard: PortGuard | None = None  # a split httpListenPort only
        self._http_server: asyncio.base_events.Server | None = None
        self._lock: StoreLock | None = None
        self._runner: web.AppRunner | None = None
        self._housekeeping: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()
        self._shutting_down = False
        self.shutdown_step: Optional[str] = None  # the shutdown step running now (broker.shutdown)
        self.shutdown_problems: list[str] = []
        # ours: the whole orderly shutdown's budget; the exit watchdog ends the process 5 s after it
        self.shutdown_deadline_s = max(1.0, float(_cfg(broker_config, "shutdown_timeout_millis", 10_000)) / 1000.0)
        self.lifetime = BrokerLifetime(self.broker_name, self.root_dir)  # how the process ends (issue 13.1)
        self.writable = False  # False until started, and while shutting down
        register_broker_gauges(self.metrics, self)

    @classmethod
    def from_conf_file(cls, path: str) -> "BrokerController":
        from broker.config.conf_file import load_conf  # noqa: WPS433 (config errors surface at the CLI)

        conf = load_conf(path)
        return cls(conf.broker, conf.store, conf_path=path)

    @property
    def member_failure(self) -> Optional[str]:
        """Why the broker cannot serve (its DLedger member stopped itself, or cannot be elected: ``broker.role``)."""
        return self.lifetime.member_failure

    @member_failure.setter
    def member_failure(self, value: Optional[str]) -> None:
        self.lifetime.member_failure = value

    # ------------------------------------------------------------------ addresses and role
    @property
    def api_address(self) -> str:
        return f"{self.broker_ip}:{self.http_port}"

    @property
    def master_api_address(self) -> Optional[str]:
        """Master's HTTP API: set by a role change, else ``haMasterAddress`` host with port-1
        (RocketMQ's ``haListenPort = listenPort + 1`` convention)."""
        if self.is_master():
            return self.api_address
        if self._master_api_address:
            return self._master_api_address
        if self.ha_master_address:
            host, _, port = self.ha_master_address.rpartition(":")
            if port.isdigit():
                return f"{host}:{int(port) - 1}"
        return None

    def is_master(self) -> bool:
        """The one "am I master?" question (classic: the role; DLedger: also brokerId 0)."""
        return self.broker_role in MASTER_ROLES and (not self.dledger_enabled or self.broker_id == 0)

    def check_writable(self) -> None:
        """The write-path gate: raises NOT_MASTER (with masterAddress) or SERVICE_NOT_AVAILABLE."""
        if not self.is_master():
            raise NotMaster(
                f"broker {self.broker_name} id {self.broker_id} is {self.broker_role}, not the master; write to the master",
                self.master_api_address)
        if self.member_failure is not None:
            raise MemberStopped(self.member_failure)
        if not self.writable:
            raise ServiceNotAvailable("the broker is starting or shutting down")

    def change_to_master(self, role: str = "SYNC_MASTER") -> None:
        """DLedger leader (after commit + dispatch caught up): accept writes as brokerId 0."""
        old = (self.broker_role, self.broker_id)
        if self.slave_sync is not None:
            self.slave_sync.set_master_address(None)
        if self.store_access is not None:  # the retry window of the log this node now leads (issue 24.2)
            self.store_access.rebuild_dedup_window()
            self.store_access.set_broker_role(role)
        self.broker_id = 0
        self.broker_role = role
        self._master_api_address = None
        log.info("broker %s role changed %s/id %s -> %s/id 0", self.broker_name, old[0], old[1], role)
        if self.schedule is not None:
            self.schedule.start()  # delayed messages: the master delivers (from the synced delayOffset.json)
        if self.transactions is not None:
            self.transactions.start()  # half messages: the master checks back (from the synced check offsets)
        if self.remoting is not None:
            self.remoting.role_changed()  # re-register with the name servers at once, as brokerId 0

    def change_to_slave(self, broker_id: int, master_api_address: Optional[str]) -> None:
        """Follower/candidate: refuse writes, sync metadata from ``master_api_address``."""
        old = (self.broker_role, self.broker_id)
        self.broker_id = broker_id if broker_id != 0 else 1
        self.broker_role = SLAVE
        if self.store_access is not None:
            self.store_access.set_broker_role(SLAVE)
        self._master_api_address = master_api_address
        if self.schedule is not None and self.schedule.running:
            asyncio.get_running_loop().create_task(self.schedule.stop())
        if self.transactions is not None and self.transactions.running:
            asyncio.get_running_loop().create_task(self.transactions.stop())
        if self.slave_sync is None:
            self.slave_sync = self._make_slave_sync()
            if self.started_ms:
                self.slave_sync.start()
        self.slave_sync.set_master_address(master_api_address)
        if old != (self.broker_role, self.broker_id):
            log.info("broker %s role changed %s/id %s -> SLAVE/id %s (master %s)", self.broker_name, old[0], old[1],
                     self.broker_id, master_api_address)
        if self.remoting is not None:
            self.remoting.role_changed()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._teardown()
            raise

    async def _start(self) -> None:
        t0 = time.monotonic()
        self.root_dir.mkdir(parents=True, exist_ok=True)
        if not StoreAccess.store_takes_lock():
            try:
                self._lock = StoreLock(self.root_dir).acquire()
            except StoreLockedError as exc:
                raise BrokerStartError(str(exc)) from None
        abort_existed = AbortFile(self.root_dir).exists
        try:
            # lock first: nothing is touched before it
            self.store_access = StoreAccess.open(self.store_config, self.broker_config, self.root_dir, self.metrics)
        except StoreLockedError as exc:
            raise BrokerStartError(str(exc)) from None
        except BaseException as exc:  # issue 24.8: no abort file or lock left by a start that failed
            undo_failed_start(self.root_dir, abort_existed)
            if isinstance(exc, OSError) and self.dledger_enabled:  # the member's own port (dLegerPeers)
                raise BrokerStartError(f"cannot start the DLedger member (its address in dLegerPeers): "
                                       f"{exc.strerror or exc}") from None
            raise
        self.store = self.store_access.store
        self.store_access.enable_dedup(self.broker_config.send_dedup_window_seconds, self.store_host)
        self.metadata.load()
        self.schedule = make_schedule(self.store_access, self.metadata, self.metrics, self.store_config)
        self.transactions = make_transactions(self.store_access, self.metadata, self.broker_config,
                                              lambda: self.remoting)
        if not self.dledger_enabled:
            try:
                await self.ha.start(self.store_access, self.broker_role in MASTER_ROLES)
            except HAStartError as exc:
                raise BrokerStartError(str(exc)) from None
        else:
            self._start_role_handler()
        self.acl_validator = self._load_acl()
        app = build_app(self.processor, client_max_size=self.max_message_size * 2 + 64 * 1024,
                        # aclEnable=true: every route but /health signed, same accounts as remoting
                        acl=http_acl_for(self.broker_config, self.acl_validator),
                        max_batch_message_count=int(_cfg(self.broker_config, "max_batch_message_count", 4096)))
        install_middleware(app)  # slow bodies, body budget, busy/idle clock of every HTTP connection
        self._runner = runner = web.AppRunner(app, access_log=None, shutdown_timeout=HTTP_DRAIN_S)
        await runner.setup()
        assert runner.server is not None  # setup() made it
        host = self.bind_address
        shared = self.http_port == self.listen_port  # one port, remoting + HTTP told apart by the first byte
        if not shared:
            self.http_guard = PortGuard(f"httpListenPort {self.http_port}", self.listen_limits, self.pending_budget)
            try:
                self._http_server = await start_http_listener(self.http_guard, runner.server, host, self.http_port)
            except OSError as exc:
                raise BrokerStartError(f"cannot listen on {host}:{self.http_port} (httpListenPort, bindAddress): "
                                       f"{exc.strerror}") from None
            log.info("HTTP API listening on %s:%d (httpListenPort)", host, self.http_port)
        await self._start_remoting(host, shared)
        log.info("listenPort bound on %s:%d (%s); limits: idle %gs, read timeout %gms, max connections %d, "
                 "max pending bytes %d", host, self.listen_port, "remoting + HTTP" if shared else "remoting",
                 self.listen_limits.idle_timeout_s, self.listen_limits.read_timeout_s * 1000,
                 self.listen_limits.max_connections, self.listen_limits.max_pending_bytes)
        nat = native_status()
        log.info("hot modules: %s (%s)", nat["mode"], nat["why"])
        if self.broker_role == SLAVE and not self.dledger_enabled:
            self.slave_sync = self._make_slave_sync()
            self.slave_sync.start()
        self._housekeeping = asyncio.get_running_loop().create_task(self._housekeeping_loop(), name="broker-housekeeping")
        self.started_ms = int(time.time() * 1000)
        if self.slave_sync is not None:  # a DLedger role change made us a slave during start-up
            self.slave_sync.start()
        self.writable = True
        if not self.dledger_enabled and self.broker_role != SLAVE:
            self.schedule.start()
            self.transactions.start()
        self.remoting.start_registrar()
        log.info(
            "broker %s (cluster %s) started as %s, brokerId %d, API http://%s, %s, store %s (%s recovery, max offset %d) in %.2fs",
            self.broker_name, self.cluster_name, self.broker_role if not self.dledger_enabled else "DLEDGER (awaiting role)",
            self.broker_id, self.api_address, self._ha_summary(), self.root_dir,
            "normal" if self.store_access.last_exit_ok else "abnormal", self.store_access.max_phy_offset(),
            time.monotonic() - t0,
        )
        for line in exposed_warnings(self.open_doors):  # issue 23.10: an open door off loopback is never silent
            log.warning("%s", line)

    def _load_acl(self) -> Any:
        """One PlainAccessValidator for both protocols on listenPort (None when aclEnable=false)."""
        if not _cfg(self.broker_config, "acl_enable", False):
            return None
        from broker.remoting.acl import AclConfigError, PlainAccessValidator, acl_file_of  # noqa: WPS433

        try:
            return PlainAccessValidator(acl_file_of(self.broker_config))
        except AclConfigError as exc:
            raise BrokerStartError(str(exc)) from None

    async def _start_remoting(self, host: str, shared: bool) -> None:
        from broker.remoting.broker_remoting import BrokerRemoting, RemotingConfigError  # noqa: WPS433

        try:
            self.remoting = BrokerRemoting(self)
        except (RemotingConfigError, ValueError) as exc:
            raise BrokerStartError(str(exc)) from None
        assert self._runner is not None
        try:
            await self.remoting.start(host, self.listen_port, self._runner.server if shared else None)
        except OSError as exc:
            what = "remoting + HTTP (listenPort)" if shared else "remoting (listenPort)"
            raise BrokerStartError(f"cannot listen on {host}:{self.listen_port} for {what} (bindAddress): "
                                   f"{exc.strerror}") from None

    def _ha_summary(self) -> str:
        return "DLedger replication" if self.dledger_enabled else self.ha.summary()

    def _start_role_handler(self) -> None:
        from broker.role import DLedgerRoleChangeHandler, find_dledger_commitlog  # noqa: WPS433

        http_peers_of = getattr(self.store_config, "dledger_http_peer_map", None)
        http_peers = http_peers_of() if callable(http_peers_of) else {}
        self.role_handler = DLedgerRoleChangeHandler(self, find_dledger_commitlog(self.store), http_peers)
        self.role_handler.start()

    def _make_slave_sync(self) -> SlaveSynchronize:
        def on_update(name: str, result: str) -> None:
            self.metrics.slave_sync.inc(name, result)

        return SlaveSynchronize(self.metadata.sync_access(), self.master_api_address,
                                interval=self.slave_sync_interval_s, initial_delay=min(3.0, self.slave_sync_interval_s),
                                on_update=on_update, credentials=inner_credentials(self.broker_config))

    async def shutdown(self) -> None:
        if self._shutting_down:
            await self._stopped.wait()
            return
        self._shutting_down = True
        self.writable = False
        log.info("broker %s shutting down", self.broker_name)
        self.shutdown_problems = await self._teardown()
        if self.shutdown_problems:
            log.error("broker %s stopped, not cleanly: %s; the next start recovers the store", self.broker_name,
                      "; ".join(self.shutdown_problems))
        else:
            log.info("broker %s stopped cleanly", self.broker_name)
        self._stopped.set()

    async def _housekeeping_loop(self) -> None:
        """flushConsumerOffsetInterval: persist committed consumer offsets when they changed."""
        interval = max(0.1, float(_cfg(self.broker_config, "flush_consumer_offset_interval", 5000)) / 1000.0)
        while True:
            await asyncio.sleep(interval)
            try:
                self.metadata.persist_offsets_if_dirty()
            except Exception:  # noqa: BLE001 - retried next round
                log.exception("persisting consumerOffset.json failed")

    async def _teardown(self) -> list[str]:
        """Stop accepting work, then every service in a fixed order, each bounded (broker.shutdown);
        returns one line per step that did not stop cleanly (timed out or failed)."""
        self.writable = False
        steps = [ShutdownStep("puts waiting for a slave ack (answered FLUSH_SLAVE_TIMEOUT)", self._release_waiting_puts),
                 ShutdownStep("remoting on listenPort (and name server unregistration)", self._stop_remoting),
                 ShutdownStep("HTTP API (in-flight requests finish)", self._stop_http, 2 * HTTP_DRAIN_S + 1.0),
                 ShutdownStep("schedule, transaction check-back and housekeeping", self._stop_master_services),
                 ShutdownStep("DLedger role change handler", self._stop_role_handler),
                 ShutdownStep("SlaveSynchronize", self._stop_slave_sync),
                 ShutdownStep("classic HA", self._stop_ha),
                 ShutdownStep("metadata files", self._persist_metadata),
                 ShutdownStep("message store (dispatch, flush, checkpoint)", self._stop_store, 8.0),
                 ShutdownStep("store lock", self._release_lock, 1.0)]
        return await run_steps(steps, self.shutdown_deadline_s, self._on_shutdown_step)

    def _on_shutdown_step(self, name: Optional[str]) -> None:
        self.shutdown_step = name  # named by the exit watchdog should the process not exit

    async def _release_waiting_puts(self) -> None:
        self.ha.release_waiting_puts()

    async def _stop_remoting(self) -> None:
        if self.remoting is not None:
            remoting, self.remoting = self.remoting, None
            await remoting.stop()  # unregister from the name servers, wake held pulls, close connections

    async def _stop_http(self) -> None:
        if self._http_server is not None:
            self._http_server.close()  # stop accepting on httpListenPort
            self._http_server = None
        if self.http_guard is not None:
            await self.http_guard.stop()
            self.http_guard = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()  # in-flight requests get HTTP_DRAIN_S, then connections close

    async def _stop_master_services(self) -> None:
        if self.transactions is not None:
            await self.transactions.stop()
        if self.schedule is not None:
            await self.schedule.stop()
        await cancel_and_wait(self._housekeeping)
        self._housekeeping = None

    async def _stop_role_handler(self) -> None:
        if self.role_handler is not None:
            await self.role_handler.stop()
            self.role_handler = None

    async def _stop_slave_sync(self) -> None:
        if self.slave_sync is not None:
            await self.slave_sync.stop()

    async def _stop_ha(self) -> None:
        await self.ha.stop()

    async def _persist_metadata(self) -> None:
        self.metadata.persist_all()

    async def _stop_store(self) -> None:
        if self.store_access is not None:
            clean = await in_thread(self.store_access.shutdown_blocking, "StoreShutdown")
            self.store_access = None
            if not clean:
                raise RuntimeError("the store kept its abort file (dispatch could not finish; the log says why)")

    async def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    async def run_until_signal(self) -> None:
        """Start, serve until SIGTERM/SIGINT or the DLedger member's stop, shut down
        (:meth:`broker.lifetime.BrokerLifetime.run_until_signal`: its rules, what it raises)."""
        await self.lifetime.run_until_signal(self)

    def member_stopped(self, reason: str) -> None:
        """The DLedger member stopped itself (broker loop): unhealthy and unwritable from now on, then exit."""
        if self.lifetime.member_stopped(reason):
            self.writable = False

    def health(self) -> dict[str, Any]:
        """``GET /health``: ok only while the broker can serve (its DLedger member is running)."""
        stopped = self.lifetime.unhealthy()
        if stopped is not None:
            return stopped
        full = self.store_access.disk_refusal() if self.store_access is not None and self.is_master() else None
        if full is not None:  # a master that refuses every put for disk space cannot serve (issue 24.4)
            return {"ok": False, "error": full}
        refused = self.role_handler.cannot_serve() if self.role_handler is not None else None
        if refused is not None:  # e.g. peers refuse its diverging configuration (issue 24.7)
            return {"ok": False, "error": refused[0], "fix": refused[1]}
        waiting = self.ha.health_problem()  # Controller mode: no role from the controller yet
        return {"ok": False, "error": waiting} if waiting else {"ok": True}

    # ------------------------------------------------------------------ status and metadata
    def status(self) -> dict[str, Any]:
        sa = self.store_access
        out: dict[str, Any] = {
            "brokerClusterName": self.cluster_name, "brokerName": self.broker_name, "brokerId": self.broker_id,
            "brokerRole": self.broker_role, "isMaster": self.is_master(), "address": self.api_address,
            "masterAddress": self.master_api_address, "dLegerEnabled": self.dledger_enabled,
            "pid": os.getpid(), "startedAt": self.started_ms, "writable": self.writable and self.is_master(),
            "storePathRootDir": str(self.root_dir), "confPath": self.conf_path,
            "healthy": self.member_failure is None and not (self.role_handler and self.role_handler.cannot_serve()),
            "memberStopped": self.member_failure,
            "openDoors": [d.to_json() for d in self.open_doors],
            "native": native_status(),  # compiled hot modules or their source (broker.native)
        }
        if sa is not None:
            out.update(sa.status())
        out["ha"] = self.ha_status()
        out["listen"] = self.listen_status()
        if self.remoting is not None:  # long-polled pulls held now, and refused by the caps (issue 23.5)
            out["pullHold"] = self.remoting.pull.hold.status()
        if self.schedule is not None:
            out["schedule"] = self.schedule.status()
        if self.transactions is not None:
            out["transactions"] = self.transactions.status()
        return out

    def listen_status(self) -> dict[str, Any]:
        """Connections and limits of listenPort (and a split httpListenPort): counters for operators."""
        ports: dict[str, Any] = {}
        if self.remoting is not None:
            ports[str(self.listen_port)] = self.remoting.server.guard.status()
        if self.http_guard is not None:
            ports[str(self.http_port)] = self.http_guard.status()
        return {"bindAddress": self.bind_address, "pendingBytes": self.pending_budget.reserved,
                "maxPendingBytes": self.pending_budget.limit, "ports": ports}

    def dledger_handler(self) -> "DLedgerRoleChangeHandler":
        """The role handler, or BAD_REQUEST when this broker does not run in DLedger mode."""
        if self.role_handler is None:
            raise BadRequest("this broker does not run in DLedger mode (enableDLegerCommitLog=false)")
        return self.role_handler

    def ha_status(self) -> dict[str, Any]:
        st = self.ha.status(self.slave_sync.syncs if self.slave_sync else None)
        return st if st is not None else {"mode": "dledger" if self.dledger_enabled else "none"}

    def config_file(self, name: str) -> dict[str, Any]:
        content, version = self.metadata.file_content(name)
        return {"name": name, "dataVersion": version, "content": content}


# the two errors run_until_signal raises live with BrokerLifetime; mqbroker imports them from here
__all__ = ["BrokerController", "BrokerMemberStoppedError", "BrokerShutdownIncompleteError", "BrokerStartError"]

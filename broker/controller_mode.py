"""ControllerModeHA: a broker in Controller mode (``enableControllerMode=true``, Apache RocketMQ 5.3.3's
RIP-44): the classic commitlog, AutoSwitch HA, and a controller that says who is master.

Rules:
- It stands where :class:`broker.classic_ha.ClassicHA` stands (the ``ReplicationSeam`` of
  ``BrokerController.ha``: ``start``, ``summary``, ``release_waiting_puts``, ``stop``,
  ``status``); ``BrokerController`` builds it instead of ClassicHA when the key is true and
  needs no other branch: the broker starts with ``brokerId=-1`` as ``SLAVE`` (fenced: writes
  refused, not registered with the name server), and only the controller's word changes that,
  through the same ``change_to_master`` / ``change_to_slave`` seam DLedger's role handler uses.
- At start: the epoch file (``storePathEpochFile``, default ``<root>/epochFileCheckpoint``) is
  read, the AutoSwitch HA service listens on ``haListenPort`` (every role, as Apache's acceptor),
  and the :class:`ReplicasDriver` runs the ReplicasManager against ``controllerAddr``, its
  identity files under ``storePathBrokerIdentity``'s directory (default ``<root>``).
- Becoming master (``ChangeToMaster``): the HA client stops, the plan of
  :class:`sync_state.ChangeToMaster` runs (wait for dispatch, cut a partial last message, drop
  epochs this replica never wrote, append ``<masterEpoch, maxPhyOffset>``, rebuild the topic
  queue table), the SyncStateSet is the controller's, then ``change_to_master("SYNC_MASTER")``:
  brokerId 0, re-registered with the name servers at once. ``master_unchanged`` only appends the
  new epoch (``changeToMasterWhenLastRoleIsMaster``).
- Becoming slave (``ChangeToSlave``): refused if the epoch is older than the last one; the
  master's connections close; the slave asks the master's remoting door for its
  ``brokerIP2``/``haListenPort`` (``GET_BROKER_CONFIG``, signed with ``innerAccessKey``) and
  points the AutoSwitch HA client there (which truncates per the handshake), then
  ``change_to_slave(brokerControllerId, masterAddress)``.
- Puts on the master (``commitlog.replica_hook``): ``need_ack_nums`` (``inSyncReplicas``,
  ``minInSyncReplicas``, ``allAckInSyncStateSet``) and ``wait_for_ack`` within
  ``syncFlushTimeout``: ``PUT_OK`` or ``FLUSH_SLAVE_TIMEOUT``; below ``minInSyncReplicas``
  ``SLAVE_NOT_AVAILABLE``.
- Reads (Apache's ``getReputEndOffset``): a slave (or a broker still fenced) dispatches, so
  consumers see, only up to the confirm offset its master sent; a master dispatches all of its log.
- ``status()`` is ``/status``'s ``ha`` object: mode ``controller``, role, epoch, SyncStateSet,
  confirm offset, the controller leader and the driver's state; :meth:`health_problem` says why
  the broker cannot serve yet (no role from the controller).

Named divergences: Apache refuses a put below ``minInSyncReplicas`` before writing
(``IN_SYNC_REPLICAS_NOT_ENOUGH``); here the bytes are written and the answer is
``SLAVE_NOT_AVAILABLE`` (stored, not confirmed: the client treats it as maybe stored). Apache's
slave learns the master's HA address from the name server's register answer; ours asks the
master (``GET_BROKER_CONFIG``), falling back to ``masterHost:masterPort+1`` (our haListenPort
default) when the master does not answer. A master serves its whole log (Apache limits a master
with ``allAckInSyncStateSet`` to its confirm offset too); recovery at start dispatches the whole
log before the limit is installed (Apache starts from the checkpoint's confirm offset).

Theory of operation: a composed object owned by the BrokerController; it sees the broker through
:class:`RoleHost` and runs on the broker's loop. It imports nothing that leads back to
``broker.controller``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from broker.classic_ha import ClassicHA, HAStartError, ReplicationSeam, listen_or_refuse, shut_down_sides
from broker.ha.autoswitch.epoch_file import EpochFileCache
from broker.ha.autoswitch.replicas_driver import ReplicasDriver
from broker.ha.autoswitch.replicas_messages import (
    ChangeSyncStateSet, ChangeToMaster, ChangeToSlave, ReplicasConfig,
)
from broker.ha.autoswitch.sync_state import (
    AckPolicy, AppendEpochEntry, Refused, SyncStateSet, TruncateEpochSuffixByEpoch, TruncateEpochSuffixByOffset,
    change_to_master_when_last_role_is_master, change_to_slave_allowed, need_ack_nums,
)
from broker.ha.autoswitch.sync_state import ChangeToMaster as MasterPlan
from broker.ha.settings import HASettings
from broker.remoting.acl import signer
from broker.store.put_result import PutMessageStatus
from broker.tasks import wait_for

if TYPE_CHECKING:  # pragma: no cover
    from broker.ha.autoswitch.client import AutoSwitchHAClient
    from broker.ha.autoswitch.service import AutoSwitchHAService
    from broker.store_access import StoreAccess

log = logging.getLogger("broker.controller_mode")

DISPATCH_WAIT_S = 5.0
CONFIG_ASK_TIMEOUT_S = 2.0


class RoleHost(Protocol):
    """What Controller mode changes on the broker (``BrokerController``)."""

    def change_to_master(self, role: str = "SYNC_MASTER") -> None: ...

    def change_to_slave(self, broker_id: int, master_api_address: Optional[str]) -> None: ...


def _cfg(obj: Any, name: str, default: Any = None) -> Any:
    value = getattr(obj, name, default)
    return default if value is None else value


def controller_mode_enabled(broker_config: Any) -> bool:
    return bool(_cfg(broker_config, "enable_controller_mode", False))


def replicas_config(broker_config: Any, broker_address: str) -> ReplicasConfig:
    """The ReplicasManager's keys from the broker's conf (Apache's names, in ms)."""
    b = broker_config
    addrs = tuple(a.strip() for a in str(_cfg(b, "controller_addr", "")).split(";") if a.strip())
    return ReplicasConfig(
        _cfg(b, "broker_cluster_name", "DefaultCluster"), _cfg(b, "broker_name", "broker-a"), broker_address, addrs,
        broker_heartbeat_interval_ms=int(_cfg(b, "broker_heartbeat_interval", 1000)),
        sync_broker_metadata_period_ms=int(_cfg(b, "sync_broker_metadata_period", 5000)),
        check_sync_state_set_period_ms=int(_cfg(b, "check_sync_state_set_period", 5000)),
        sync_controller_metadata_period_ms=int(_cfg(b, "sync_controller_metadata_period", 10_000)),
        controller_heartbeat_timeout_ms=int(_cfg(b, "controller_heart_beat_timeout_mills", 10_000)),
        broker_election_priority=int(_cfg(b, "broker_election_priority", 2 ** 31 - 1)))


def make_replication(host: RoleHost, broker_config: Any, store_config: Any, *, broker_address: str,
                     bind_address: str, listen_port: int, master_address: Optional[str], root_dir: Path,
                     metrics: Any = None) -> ReplicationSeam:
    """The broker's ``ha``: :class:`ControllerModeHA` when ``enableControllerMode=true``, else ClassicHA."""
    if controller_mode_enabled(broker_config):
        return ControllerModeHA(host, broker_config, store_config, broker_address=broker_address,
                                bind_address=bind_address, listen_port=listen_port, root_dir=root_dir, metrics=metrics)
    return ClassicHA(store_config, broker_name=str(_cfg(broker_config, "broker_name", "broker-a")),
                     bind_address=bind_address, listen_port=listen_port, master_address=master_address)


def controller_credentials(broker_config: Any) -> Optional[tuple[str, str]]:
    ak, sk = _cfg(broker_config, "controller_access_key"), _cfg(broker_config, "controller_secret_key")
    if ak and sk:
        return str(ak), str(sk)
    from broker.slave_sync import inner_credentials  # noqa: WPS433

    return inner_credentials(broker_config)


class ControllerModeHA:
    """The broker's replication in Controller mode (see the module rules)."""

    def __init__(self, host: RoleHost, broker_config: Any, store_config: Any, *, broker_address: str,
                 bind_address: str, listen_port: int, root_dir: Path, metrics: Any = None) -> None:
        self.host = host
        self.broker_config = broker_config
        self.store_config = store_config
        self.broker_name = str(_cfg(broker_config, "broker_name", "broker-a"))
        self.bind_address = bind_address
        self.listen_port = listen_port  # haListenPort
        self.root_dir = root_dir
        epoch_path = _cfg(store_config, "store_path_epoch_file") or str(root_dir / "epochFileCheckpoint")
        identity = _cfg(store_config, "store_path_broker_identity") or str(root_dir / "brokerIdentity")
        self.identity_dir = Path(identity).parent
        self.epochs = EpochFileCache(epoch_path)
        self.sync = SyncStateSet(None, ha_max_time_slave_not_catchup_ms=float(
            _cfg(store_config, "ha_max_time_slave_not_catchup", 15_000)),
            all_ack_in_sync_state_set=bool(_cfg(store_config, "all_ack_in_sync_state_set", False)))
        self.policy = AckPolicy(int(_cfg(store_config, "in_sync_replicas", 1)),
                                int(_cfg(store_config, "min_in_sync_replicas", 1)),
                                bool(_cfg(store_config, "all_ack_in_sync_state_set", False)))
        self.settings = HASettings.from_config(store_config, broker_name=self.broker_name, ha_listen_port=listen_port)
        creds = controller_credentials(broker_config)
        self.driver = ReplicasDriver(replicas_config(broker_config, broker_address), self, self,
                                     self.identity_dir, rpc_hook=signer(*creds) if creds else None)
        from broker.slave_sync import inner_credentials  # noqa: WPS433

        inner = inner_credentials(broker_config)
        self._inner_hook: Optional[Callable[[Any], None]] = signer(*inner) if inner else None
        self.store_access: Optional[StoreAccess] = None
        self.service: Optional[AutoSwitchHAService] = None
        self.client: Optional[AutoSwitchHAClient] = None
        self.fenced = True
        self.local_broker_id: Optional[int] = None
        self.role = "FENCED"  # FENCED, MASTER, SLAVE
        self.master_ha_address: Optional[str] = None
        self.slave_confirm_offset = -1
        self._master_reads = False  # dispatch to the max offset (a master, and while becoming one)
        self.last_role_change_ms: Optional[float] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._ack_tasks: set[asyncio.Task[None]] = set()
        self._waiting: set[asyncio.Future[PutMessageStatus]] = set()
        self._stopped_waiting = False
        if metrics is not None:
            self.register_gauges(metrics)

    # ------------------------------------------------------------------ the ReplicationSeam
    async def start(self, store_access: "StoreAccess", as_master: bool) -> None:
        """``as_master`` is ignored: the controller decides."""
        from broker.ha.autoswitch.service import AutoSwitchHAService  # noqa: WPS433

        self.store_access = store_access
        self._loop = asyncio.get_running_loop()
        try:
            self.epochs.init_cache_from_file()
        except (OSError, ValueError) as exc:  # CheckpointFileError names the file and the fix
            raise HAStartError(f"Controller mode: the epoch file cannot be read: {exc}") from None
        ha_host = _cfg(self.store_config, "ha_bind_address", None) or self.bind_address
        service = AutoSwitchHAService(store_access.commitlog, self.epochs, self.sync, self.settings,
                                      host=ha_host, port=self.listen_port,
                                      on_sync_state_set_changed=self.driver.sync_state_set_proposed)
        await listen_or_refuse(service.start(), ha_host, self.listen_port)
        self.service = service
        store_access.on_put(lambda _offset: self.service.notify_put() if self.service is not None else None)
        reput = getattr(store_access.store, "reput", None)
        if reput is not None:  # Apache's getReputEndOffset: a replica dispatches up to its confirm offset
            reput.limit_offset = self._reput_limit
        try:
            await self.driver.start()  # reads brokerIdentity / brokerIdentity-temp
        except (OSError, ValueError) as exc:  # MetadataFileError names the file
            raise HAStartError(f"Controller mode: {exc}") from None

    def summary(self) -> str:
        port = self.service.port if self.service is not None else self.listen_port
        return (f"Controller mode (controllers {';'.join(self.driver.config.controller_addresses)}), AutoSwitch HA "
                f"on port {port}, awaiting the controller's role")

    def release_waiting_puts(self) -> None:
        """Shutdown's first step: no new put waits; those waiting answer FLUSH_SLAVE_TIMEOUT."""
        self._uninstall_hook()
        self._stopped_waiting = True
        for fut in list(self._waiting):
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiting.clear()

    async def stop(self) -> None:
        await self.driver.stop()
        self.release_waiting_puts()
        for task in list(self._ack_tasks):
            task.cancel()
        client, service, self.client, self.service = self.client, self.service, None, None
        await shut_down_sides(client, service)

    def status(self, last_sync: Any) -> dict[str, Any]:
        d = self.driver.status()
        out: dict[str, Any] = {
            "mode": "controller", "role": self.role, "fenced": self.fenced, "brokerControllerId": self.local_broker_id,
            "masterEpoch": d["masterEpoch"], "lastEpoch": self.epochs.last_epoch(),
            "epochs": [[e.epoch, e.start_offset] for e in self.epochs.get_all_entries()],
            "syncStateSet": d["syncStateSet"], "syncStateSetEpoch": d["syncStateSetEpoch"],
            "confirmOffset": self.confirm_offset(), "controllerLeader": d["controllerLeader"],
            "masterAddress": d["masterAddress"], "masterHaAddress": self.master_ha_address,
            "replicasManager": d, "listenPort": self.service.port if self.service is not None else None,
            "lastSync": last_sync,
        }
        if self.service is not None:
            out["connections"] = len(self.service.connections)
            out["slaveAcks"] = {str(k): v for k, v in self.sync.acks.items()}
        if self.client is not None:
            out["client"] = {"masterHaAddress": self.client.master_address, "lastError": self.client.last_error,
                             "sessions": self.client.sessions}
        return out

    def register_gauges(self, metrics: Any) -> None:
        """``rocketmq_broker_controller_*``: read at scrape time."""
        d = self.driver
        metrics.register_gauge("rocketmq_broker_controller_mode_role", "1 for the Controller-mode role (label role)",
                               lambda: [({"role": self.role}, 1)])
        metrics.register_gauge("rocketmq_broker_controller_master_epoch", "Master epoch known from the controller",
                               lambda: [({}, d.manager.master_epoch)])
        metrics.register_gauge("rocketmq_broker_controller_sync_state_set_size", "Members of the SyncStateSet",
                               lambda: [({"epoch": str(d.manager.sync_state_set_epoch)}, len(d.manager.sync_state_set))])
        metrics.register_gauge("rocketmq_broker_controller_confirm_offset", "Confirm offset (all of the set hold it)",
                               lambda: [({}, self.confirm_offset())])
        metrics.register_gauge("rocketmq_broker_controller_leader_known", "1 when a controller leader is known",
                               lambda: [({"leader": d.manager.leader or ""}, 1 if d.manager.leader else 0)])
        metrics.register_gauge("rocketmq_broker_controller_role_changes", "Role changes applied", lambda: [
            ({}, d.role_changes)], kind="counter")

    def health_problem(self) -> Optional[str]:
        if self.role == "FENCED":
            return (f"Controller mode: no role from the controller yet (ReplicasManager "
                    f"{self.driver.manager.state.value}; controllers {';'.join(self.driver.config.controller_addresses)})")
        return None

    # ------------------------------------------------------------------ HAView (read by the ReplicasManager)
    def last_epoch(self) -> int:
        return self.epochs.last_epoch()

    def max_phy_offset(self) -> int:
        return self.store_access.max_phy_offset() if self.store_access is not None else 0

    def confirm_offset(self) -> int:
        if self.role == "MASTER" and self.service is not None:
            return self.service.confirm_offset()
        return self.slave_confirm_offset

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
        if self.role != "MASTER":
            return frozenset()
        return self.sync.maybe_shrink(float(now_ms))[0]

    # ------------------------------------------------------------------ ReplicasHost (the driver's actions)
    def set_fenced(self, fenced: bool) -> None:
        self.fenced = fenced

    def set_local_broker_id(self, broker_id: int) -> None:
        self.local_broker_id = broker_id
        self.sync.local_broker_id = broker_id

    def change_sync_state_set(self, action: ChangeSyncStateSet) -> None:
        self.sync.set_sync_state_set(action.sync_state_set, self.max_phy_offset())
        log.info("broker %s SyncStateSet %s (epoch %d)", self.broker_name, sorted(action.sync_state_set),
                 action.sync_state_set_epoch)

    async def change_to_master(self, action: ChangeToMaster) -> None:
        sa = self.store_access
        assert sa is not None
        t0 = time.monotonic()
        if self.client is not None:
            client, self.client = self.client, None
            await client.shutdown()
        entries = self.epochs.get_all_entries()
        if action.master_unchanged and self.role == "MASTER":
            plan = change_to_master_when_last_role_is_master(action.new_master_epoch, entries, sa.max_phy_offset())
            if isinstance(plan, Refused):
                log.error("broker %s: change to master refused: %s", self.broker_name, plan.reason)
                return
            self._apply_epochs(plan)
            return
        begun = MasterPlan(action.new_master_epoch).begin(self.epochs.last_epoch())
        if isinstance(begun, Refused):
            log.error("broker %s: change to master refused: %s", self.broker_name, begun.reason)
            return
        self._master_reads = True  # its log is the truth of the new epoch: dispatch all of it
        if self.service is not None:
            for conn in list(self.service.connections):
                conn.close("the broker changes role")
        cut = await self._truncate_invalid_tail()
        self._apply_epochs(MasterPlan(action.new_master_epoch).finish(entries, truncate_offset=cut,
                                                                      max_phy_offset=sa.max_phy_offset()))
        await self._wait_dispatched()
        sa.store.recover_topic_queue_table()
        self.sync.set_sync_state_set(action.sync_state_set, sa.max_phy_offset())
        self._install_hook()
        self.role, self.master_ha_address, self.last_role_change_ms = "MASTER", None, time.time() * 1000
        self.host.change_to_master("SYNC_MASTER")
        log.info("broker %s is master of epoch %d (Controller mode) at offset %d in %.3fs", self.broker_name,
                 action.new_master_epoch, sa.max_phy_offset(), time.monotonic() - t0)

    async def change_to_slave(self, action: ChangeToSlave) -> None:
        sa = self.store_access
        assert sa is not None and self.local_broker_id is not None
        refused = change_to_slave_allowed(action.master_epoch, self.epochs.last_epoch())
        if refused is not None:
            log.error("broker %s: change to slave refused: %s", self.broker_name, refused.reason)
            return
        self._uninstall_hook()
        self._master_reads = False
        if self.service is not None and (self.role == "MASTER" or not action.master_unchanged):
            for conn in list(self.service.connections):
                conn.close("the broker is a slave now")
        ha_address = await self._master_ha_address(action.master_address) if action.master_address else None
        self.master_ha_address = ha_address
        if self.client is None:
            from broker.ha.autoswitch.client import AutoSwitchHAClient  # noqa: WPS433

            self.client = AutoSwitchHAClient(sa.commitlog, self.epochs, self.local_broker_id, self.settings,
                                             master_address=ha_address, truncate=self._truncate,
                                             on_confirm_offset=self._on_confirm, on_append=sa.wake_dispatch)
            await self.client.start()
        else:
            self.client.update_ha_master_address(ha_address)
        self.role, self.last_role_change_ms = "SLAVE", time.time() * 1000
        self.host.change_to_slave(self.local_broker_id, action.master_address)
        log.info("broker %s is slave (id %d) of %s (HA %s) in epoch %d", self.broker_name, self.local_broker_id,
                 action.master_address, ha_address, action.master_epoch)

    # ------------------------------------------------------------------ helpers
    def _apply_epochs(self, steps: list[Any]) -> None:
        for step in steps:
            if isinstance(step, TruncateEpochSuffixByOffset):
                self.epochs.truncate_suffix_by_offset(step.offset)
            elif isinstance(step, TruncateEpochSuffixByEpoch):
                self.epochs.truncate_suffix_by_epoch(step.epoch)
            elif isinstance(step, AppendEpochEntry):
                self.epochs.append_entry(step.entry)

    async def _wait_dispatched(self) -> bool:
        sa = self.store_access
        assert sa is not None
        deadline = time.monotonic() + DISPATCH_WAIT_S
        while True:
            sa.wake_dispatch(sa.max_phy_offset())
            if sa.dispatch_behind_bytes() == 0:
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)

    async def _truncate_invalid_tail(self) -> int:
        """``truncateInvalidMsg``: a tail dispatch cannot pass (a partial last message from HA) is
        cut where the last whole message ends; -1 when nothing was cut."""
        sa = self.store_access
        assert sa is not None
        if await self._wait_dispatched():
            return -1
        reput = getattr(sa.store, "reput", None)
        end = getattr(reput, "reput_from_offset", None)
        if end is None or end >= sa.max_phy_offset():
            return -1
        log.warning("broker %s: cutting %d bytes dispatch cannot read (a partial message) at offset %d",
                    self.broker_name, sa.max_phy_offset() - end, end)
        self._truncate(int(end))
        return int(end)

    def _truncate(self, offset: int) -> None:
        """The slave's truncation (handshake) and the master's invalid tail: commitlog, then the
        ConsumeQueues and the dispatch position, then the topic queue table."""
        sa = self.store_access
        assert sa is not None
        store = sa.store
        assert store.commitlog is not None and store.consume_queue_store is not None
        store.commitlog.truncate_dirty_files(offset)
        store.consume_queue_store.truncate_dirty(offset)
        reput = getattr(store, "reput", None)
        if reput is not None and reput.reput_from_offset > offset:
            reput.reput_from_offset = offset
        store.recover_topic_queue_table()

    def _on_confirm(self, offset: int) -> None:
        self.slave_confirm_offset = offset

    def _reput_limit(self) -> int:
        """How far dispatch (hence consumers) may go: a master all of its log; a slave or a fenced
        broker up to the confirm offset the master sent (nothing new before the first one)."""
        sa = self.store_access
        if sa is None:
            return 0
        max_offset = sa.commitlog.max_offset
        if self._master_reads:
            return max_offset
        if self.slave_confirm_offset < 0:
            reput = getattr(sa.store, "reput", None)
            return min(max_offset, int(getattr(reput, "reput_from_offset", max_offset)))
        return min(max_offset, self.slave_confirm_offset)

    async def _master_ha_address(self, master_address: str) -> str:
        """The master's ``brokerIP2:haListenPort`` (asked over remoting), else ``host:port+1``."""
        from broker.remoting.client import RemotingClient  # noqa: WPS433
        from broker.remoting.codes import RequestCode as RC  # noqa: WPS433
        from broker.remoting.codes import ResponseCode as R  # noqa: WPS433

        host, _, port = master_address.rpartition(":")
        fallback = f"{host}:{int(port) + 1}"
        client: Optional[RemotingClient] = None
        try:
            client = await wait_for(RemotingClient.connect(host, int(port), rpc_hook=self._inner_hook),
                                    CONFIG_ASK_TIMEOUT_S)
            r = await client.request(RC.GET_BROKER_CONFIG, {}, timeout=CONFIG_ASK_TIMEOUT_S)
            if r.code != R.SUCCESS or not r.body:
                raise ValueError(f"code {r.code}: {r.remark}")
            props = dict(line.split("=", 1) for line in r.body.decode("utf-8").splitlines() if "=" in line)
            ip2, ha_port = props.get("brokerIP2") or host, props.get("haListenPort") or ""
            if not ha_port.isdigit():
                raise ValueError("no haListenPort in its config")
            return f"{ip2}:{ha_port}"
        except (OSError, ConnectionError, asyncio.TimeoutError, ValueError) as exc:
            log.warning("broker %s: cannot ask master %s for its HA address (%s); using %s", self.broker_name,
                        master_address, exc, fallback)
            return fallback
        finally:
            if client is not None:
                await client.close()

    # ------------------------------------------------------------------ the put path (master)
    def _install_hook(self) -> None:
        sa = self.store_access
        if sa is not None:
            sa.commitlog.replica_hook = self._replica_hook

    def _uninstall_hook(self) -> None:
        sa = self.store_access
        if sa is not None and getattr(sa.commitlog, "replica_hook", None) == self._replica_hook:
            sa.commitlog.replica_hook = None

    def _replica_hook(self, append_result: Any) -> Any:
        """``CommitLog.replica_hook`` on the master: wake the senders; the put's ack future (an
        ``asyncio.Future`` on the loop, a ``concurrent.futures.Future`` from another thread)."""
        end = getattr(append_result, "end_offset", 0) or (append_result.wrote_offset + append_result.wrote_bytes)
        loop = self._loop
        if self.service is None or loop is None:
            return None
        if _running_loop() is loop:
            return self._ack_future(end)
        out: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()

        def submit() -> None:
            fut = self._ack_future(end)
            fut.add_done_callback(lambda f: out.set_result(f.result()) if not f.cancelled() else out.cancel())
        loop.call_soon_threadsafe(submit)
        return out

    def _ack_future(self, end: int) -> "asyncio.Future[PutMessageStatus]":
        service = self.service
        fut: asyncio.Future[PutMessageStatus] = asyncio.get_running_loop().create_future()
        if service is None:
            fut.set_result(PutMessageStatus.PUT_OK)
            return fut
        service.notify_put()
        ack_nums = need_ack_nums(self.policy, self.sync.in_sync_replicas_nums())
        if ack_nums is None:
            fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            return fut
        if 0 <= ack_nums <= 1:  # Apache's handleHA: no wait for one ack (the master's own)
            fut.set_result(PutMessageStatus.PUT_OK)
            return fut
        if self._stopped_waiting:
            fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            return fut
        timeout_s = float(_cfg(self.store_config, "sync_flush_timeout", 5000)) / 1000.0
        self._waiting.add(fut)
        fut.add_done_callback(self._waiting.discard)

        async def wait() -> None:
            ok = await service.wait_for_ack(end, ack_nums, timeout_s)
            if not fut.done():
                fut.set_result(PutMessageStatus.PUT_OK if ok else PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        task = asyncio.get_running_loop().create_task(wait(), name="controller-mode-ack")
        self._ack_tasks.add(task)
        task.add_done_callback(self._ack_tasks.discard)
        return fut


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


__all__ = ["ControllerModeHA", "RoleHost", "controller_mode_enabled", "make_replication", "replicas_config"]

"""ControllerServer: Apache RocketMQ 5.3.3's ``DLedgerController`` (with its ``EventScheduler``,
``RoleChangeHandler`` and ``DLedgerControllerStateMachine``) and the scans of ``ControllerManager``,
on our ``dledger`` library and one asyncio loop.

Rules:
- One state machine per member (:class:`controller.replicas_info.ReplicasInfoManager`), changed
  only by applying committed log entries, in log order, on every member, the leader included
  (handlers never mutate). An entry's body is one event's ``EventSerializer`` bytes; an empty body
  (a leader's barrier or Apache's read / initial proposal) changes nothing. The ``dledger``
  library sees opaque bytes only.
- Requests are run one at a time by a single worker (Apache's ``EventScheduler``): the handler
  reads the state, its events become **one** ``append_batch`` (one entry per event), and the
  answer is sent only once they are committed *and applied* here (Apache's order: the next
  request sees them). A read (or a write without events) appends nothing unless
  ``isProcessReadEvent`` (then an empty entry, Apache's read barrier). An append that fails or
  takes longer than :data:`APPEND_WAIT_S` (Apache's 5 s) is ``SYSTEM_ERROR``; ``NOT_LEADER`` from
  DLedger is ``CONTROLLER_NOT_LEADER``.
- Leadership: a member serves only after it became DLedger leader **and** an empty entry it
  appended in that term committed and was applied (Apache's initial proposal: the state then
  includes every earlier committed entry). Until then, and on any other member, a request is
  answered ``CONTROLLER_NOT_LEADER`` "The controller is not in leader state" (Apache's code and
  remark); we add the extField ``controllerLeaderAddress`` (the leader's door, when known), which
  Apache leaves to ``CONTROLLER_GET_METADATA_INFO``.
- Restart: the committed entries in the local log are applied before the member starts; the rest
  come with the next commit index (a new leader's barrier commits them).
- Heartbeats (:mod:`controller.heartbeat`) are recorded by every member (brokers heartbeat every
  controller). Every ``scanNotActiveBrokerInterval`` the expired rows are removed and, on the
  leader, a broker that was its set's master triggers an election (``onBrokerInactive``); every
  ``scanInactiveMasterInterval`` (the first one interval after it became ready) the leader asks
  the state machine which sets have a dead master and a live replica
  (``scanNeedReelectBrokerSets``) and triggers theirs. A closed broker
  connection ends its rows at once, with the same consequence. An election triggered here is
  ``ElectMasterRequestHeader.ofControllerTrigger`` retried up to ``electMasterMaxRetryCount``
  times; a successful one is pushed to the set's live brokers as ``NOTIFY_BROKER_ROLE_CHANGED``
  when ``notifyBrokerRoleChanged`` (:mod:`controller.notify`), as is a successful
  ``CONTROLLER_ELECT_MASTER`` request (the door calls :meth:`ControllerServer.after_elect`).
- Bounded: at most ``controllerRequestThreadPoolQueueCapacity`` requests wait for the worker
  (more: ``SYSTEM_BUSY``); the heartbeat table, the notifier and the connections have limits
  of their own; one election task per broker set at a time.

Theory of operation: :class:`DLedgerServer` calls :meth:`ControllerServer._on_commit` and
:meth:`ControllerServer._on_role` on this loop; ``_on_commit`` reads the newly committed entries
from the local store and applies them; waiters for an index are resolved as it is applied.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from controller.codes import ControllerResponseCode as RC
from controller.config import ControllerConfig
from controller.elect_policy import LiveBrokers
from controller.events import EventDecodeError, decode_event, encode_event
from controller.headers import ElectMasterRequestHeader, GetMetaDataResponseHeader, to_ext_fields
from controller.heartbeat import BrokerHeartbeatTable
from controller.notify import RoleChangeEntry, RoleChangeNotifier
from controller.replicas_info import ControllerResult, ReplicasInfoManager
from dledger.aio import wait_for
from dledger.config import DLedgerConfig
from dledger.core.codes import Code, Role
from dledger.errors import DLedgerError
from dledger.server import DLedgerServer

log = logging.getLogger("controller")

APPEND_WAIT_S = 5.0  # appendToDLedgerAndWait's dLedgerFuture.get(5, SECONDS)
ELECT_WAIT_S = 3.0  # triggerElectMaster: triggerElectMaster0(..).get(3, SECONDS)
NOT_LEADER_REMARK = "The controller is not in leader state"


@dataclass
class Reply:
    """What the door sends back: code, remark, extFields, body."""

    code: int
    remark: Optional[str] = None
    fields: dict[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None


@dataclass
class _Job:
    name: str
    supplier: Callable[[], ControllerResult[Any]]
    write: bool
    future: "asyncio.Future[Reply]"


def _retrieve(fut: "asyncio.Future[Any]") -> None:
    if not fut.cancelled():
        fut.exception()


def now_ms() -> int:
    """The heartbeat clock: monotonic milliseconds (the table only compares its own readings)."""
    return int(time.monotonic() * 1000)


class ControllerServer:
    """One controller member (see the module rules)."""

    def __init__(self, config: ControllerConfig, *, clock: Callable[[], int] = now_ms,
                 dledger_overrides: Optional[dict[str, Any]] = None) -> None:
        self.config = config
        self.clock = clock
        self.replicas = ReplicasInfoManager(config.enable_elect_unclean_master)
        self.heartbeats = BrokerHeartbeatTable(config.controller_max_heartbeat_brokers)
        self.notifier = RoleChangeNotifier()
        dcfg = DLedgerConfig(
            group=config.controller_d_leger_group or "DefaultControllerGroup",
            self_id=config.controller_d_leger_self_id or "n0", peers=config.controller_d_leger_peers or "",
            store_base_dir=config.store_path, mapped_file_size_for_entry_data=config.mapped_file_size,
            mapped_file_size_for_entry_index=min(DLedgerConfig.mapped_file_size_for_entry_index,
                                                 config.mapped_file_size),
            auth_token=config.controller_d_leger_auth_token or None,
            allow_insecure=config.controller_d_leger_allow_insecure, serve_clients=False,
            conf_keys={"group": "controllerDLegerGroup", "self_id": "controllerDLegerSelfId",
                       "peers": "controllerDLegerPeers", "auth_token": "controllerDLegerAuthToken"},
            **(dledger_overrides or {}))
        self.dledger = DLedgerServer(dcfg, leader_barrier_body=lambda: b"")
        self.dledger.add_commit_listener(self._on_commit)
        self.dledger.add_role_change_listener(self._on_role)
        self.applied_index = -1
        self._index_waiters: list[tuple[int, "asyncio.Future[None]"]] = []
        self._queue: "asyncio.Queue[_Job]" = asyncio.Queue(config.controller_request_thread_pool_queue_capacity)
        self._ready_term: Optional[int] = None
        self._ready_since_ms = 0
        self.stopping = False
        self._electing: set[str] = set()
        self._tasks: list["asyncio.Task[Any]"] = []
        self._leader_task: Optional["asyncio.Task[None]"] = None
        self._background: set["asyncio.Task[Any]"] = set()
        self.counters: dict[str, int] = {
            "requests": 0, "requests_busy": 0, "not_leader": 0, "appended_events": 0, "applied_events": 0,
            "bad_entries": 0, "append_failures": 0, "elections_triggered": 0, "elections_succeeded": 0,
            "heartbeats": 0, "brokers_expired": 0, "channels_closed": 0,
        }

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._replay_local()
        await self.dledger.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._worker(), name="controller-scheduler"),
                       loop.create_task(self._heartbeat_scan(), name="controller-heartbeat-scan"),
                       loop.create_task(self._inactive_master_scan(), name="controller-master-scan")]

    def begin_shutdown(self) -> None:
        """Stop acting on brokers (the door closing their connections is no broker failure)."""
        self.stopping = True
        self._ready_term = None

    async def shutdown(self) -> None:
        self.begin_shutdown()
        tasks = self._tasks + list(self._background) + ([self._leader_task] if self._leader_task else [])
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        self._tasks = []
        await self.notifier.close()
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_result(Reply(RC.SYSTEM_ERROR, "the controller is shutting down"))
        await self.dledger.shutdown()

    # ------------------------------------------------------------------ the replicated state
    def _replay_local(self) -> None:
        """Restart: apply what the local log already knows to be committed."""
        committed = self.dledger.store.committed_index
        if committed >= 0:
            self._apply_through(committed)
            log.info("%s: replayed the committed log up to index %d (%d broker sets)",
                     self.config.controller_d_leger_self_id, committed, len(self.replicas.replica_info_table))

    def _on_commit(self, committed_index: int) -> None:
        self._apply_through(committed_index)

    def _apply_through(self, committed_index: int) -> None:
        end = min(committed_index, self.dledger.log_view.ledger_end_index)
        while self.applied_index < end:
            index = self.applied_index + 1
            body = self.dledger.log_view.get_entry(index)["body"]
            self.applied_index = index
            if not body:
                continue  # barrier / read / initial proposal
            try:
                event = decode_event(body)
            except EventDecodeError as exc:  # same bytes on every member: all skip it alike
                self.counters["bad_entries"] += 1
                log.error("%s: log entry %d is not a controller event (%s); skipped",
                          self.config.controller_d_leger_self_id, index, exc)
                continue
            if event is not None:
                self.replicas.apply_event(event)
                self.counters["applied_events"] += 1
        if self._index_waiters:
            keep = []
            for i, fut in self._index_waiters:
                if i <= self.applied_index:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    keep.append((i, fut))
            self._index_waiters = keep

    async def _wait_applied(self, index: int) -> None:
        if self.applied_index >= index:
            return
        fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._index_waiters.append((index, fut))
        try:
            await fut
        finally:
            if not fut.done():
                fut.cancel()
            self._index_waiters = [(i, f) for i, f in self._index_waiters if f is not fut]

    async def _append_and_wait(self, bodies: list[bytes]) -> Optional[Reply]:
        """None when committed and applied, else the failure to answer."""
        fut = self.dledger.append_batch(bodies)
        fut.add_done_callback(_retrieve)  # a waiter cancelled at shutdown must not leave it unretrieved
        try:
            await wait_for(asyncio.shield(fut), APPEND_WAIT_S)
            await wait_for(self._wait_applied(fut.index + len(bodies) - 1), APPEND_WAIT_S)
            return None
        except DLedgerError as exc:
            self.counters["append_failures"] += 1
            if exc.code == Code.NOT_LEADER:
                return self.not_leader()
            return Reply(RC.SYSTEM_ERROR, f"Failed to append event to DLedger: {exc}")
        except asyncio.TimeoutError:
            self.counters["append_failures"] += 1
            return Reply(RC.SYSTEM_ERROR, f"Failed to append event to DLedger: not committed within {APPEND_WAIT_S} s")

    # ------------------------------------------------------------------ leadership
    @property
    def is_leader_ready(self) -> bool:
        """``isLeaderState``: DLedger leader and the initial proposal of this term applied."""
        return (self._ready_term is not None and self.dledger.is_leader
                and self.dledger.term == self._ready_term)

    def _on_role(self, term: int, role: Role) -> None:
        if role is Role.LEADER:
            log.info("%s: controller became DLedger leader of term %d; processing the initial proposal",
                     self.config.controller_d_leger_self_id, term)
            if self.stopping:
                return
            if self._leader_task is not None:
                self._leader_task.cancel()
            self._leader_task = asyncio.get_running_loop().create_task(self._become_leader(term))
        else:
            if self._ready_term is not None:
                log.info("%s: controller is %s now (leader %s); stopped scheduling",
                         self.config.controller_d_leger_self_id, role.value, self.dledger.leader_id)
            self._ready_term = None

    async def _become_leader(self, term: int) -> None:
        tries = 0
        while self.dledger.is_leader and self.dledger.term == term:
            failure = await self._append_and_wait([b""])
            if failure is None:
                if self.dledger.is_leader and self.dledger.term == term and not self.stopping:
                    self._ready_term = term
                    self._ready_since_ms = self.clock()
                    log.info("%s: controller leader of term %d ready (applied index %d, %d broker sets)",
                             self.config.controller_d_leger_self_id, term, self.applied_index,
                             len(self.replicas.replica_info_table))
                return
            tries += 1
            log.warning("%s: controller leader initial proposal failed (%d times): %s",
                        self.config.controller_d_leger_self_id, tries, failure.remark)
            await asyncio.sleep(0.05)

    def leader_door(self) -> Optional[str]:
        return self.config.remoting_address_of(self.dledger.leader_id)

    def not_leader(self) -> Reply:
        self.counters["not_leader"] += 1
        leader = self.leader_door()
        return Reply(RC.CONTROLLER_NOT_LEADER, NOT_LEADER_REMARK,
                     {"controllerLeaderAddress": leader} if leader else {})

    def metadata(self) -> GetMetaDataResponseHeader:
        """``getControllerMetadata``: the group's Raft view, with the members' doors."""
        cfg = self.dledger.config
        peers = "".join(f"{pid}:{self.config.remoting_address_of(pid)};" for pid in cfg.peer_map)
        return GetMetaDataResponseHeader(cfg.group, self.dledger.leader_id, self.leader_door(),
                                         self.is_leader_ready, peers)

    # ------------------------------------------------------------------ requests
    def live(self) -> LiveBrokers:
        return self.heartbeats.snapshot(self.clock())

    async def submit(self, name: str, supplier: Callable[[], ControllerResult[Any]], write: bool) -> Reply:
        """``EventScheduler.appendEvent``: run ``supplier`` in the worker, answer after commit."""
        self.counters["requests"] += 1
        if not self.is_leader_ready:
            return self.not_leader()
        fut: "asyncio.Future[Reply]" = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Job(name, supplier, write, fut))
        except asyncio.QueueFull:
            self.counters["requests_busy"] += 1
            return Reply(RC.SYSTEM_BUSY, f"[OVERLOAD] {self._queue.qsize()} controller requests are waiting "
                                         "(controllerRequestThreadPoolQueueCapacity); try later")
        return await fut

    async def _worker(self) -> None:
        while True:
            job = await self._queue.get()
            if job.future.done():
                continue
            try:
                reply = await self._run(job)
            except asyncio.CancelledError:
                if not job.future.done():
                    job.future.set_result(Reply(RC.SYSTEM_ERROR, "the controller is shutting down"))
                raise
            except Exception as exc:  # noqa: BLE001 - Apache: handleException -> the request fails
                log.exception("controller event %s failed", job.name)
                reply = Reply(RC.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            if not job.future.done():
                job.future.set_result(reply)

    async def _run(self, job: _Job) -> Reply:
        if not self.is_leader_ready:
            return self.not_leader()
        result = job.supplier()
        bodies = [encode_event(e) for e in result.events] if job.write else []
        failure: Optional[Reply] = None
        if bodies:
            failure = await self._append_and_wait(bodies)
            if failure is None:
                self.counters["appended_events"] += len(bodies)
        elif self.config.is_process_read_event:
            failure = await self._append_and_wait([b""])
        if failure is not None:
            return failure
        return Reply(result.response_code, result.remark, to_ext_fields(result.response), result.body)

    # ------------------------------------------------------------------ heartbeats and scans
    def on_channel_close(self, channel: object) -> None:
        """``BrokerHousekeepingService.onChannelClose`` / ``onChannelException``."""
        for cluster, name, broker_id in self.heartbeats.on_channel_close(channel):
            self.counters["channels_closed"] += 1
            log.info("broker %s/%d of %s: its connection closed", name, broker_id, cluster)
            self.on_broker_inactive(cluster, name, broker_id)

    async def _heartbeat_scan(self) -> None:
        await asyncio.sleep(min(2.0, self.config.scan_not_active_broker_interval / 1000.0))  # Apache: 2 s delay
        while True:
            for cluster, name, broker_id in self.heartbeats.expired(self.clock()):
                self.counters["brokers_expired"] += 1
                log.warning("the broker %s/%d of %s stopped heartbeating; removed", name, broker_id, cluster)
                self.on_broker_inactive(cluster, name, broker_id)
            await asyncio.sleep(self.config.scan_not_active_broker_interval / 1000.0)

    async def _inactive_master_scan(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_inactive_master_interval / 1000.0)
            interval_ms = self.config.scan_inactive_master_interval
            # scanInactiveMasterAndTriggerReelect, first run one interval after leadership (Apache's
            # initial delay): brokers heartbeat every member, but a member new to leadership (or
            # just restarted) may not have heard every master yet
            if self.is_leader_ready and self.clock() - self._ready_since_ms >= interval_ms:
                for name in self.replicas.scan_need_reelect_broker_sets(self.live()):
                    self.trigger_elect_master(name)

    def on_broker_inactive(self, cluster: str, broker_name: str, broker_id: Optional[int]) -> None:
        """``ControllerManager.onBrokerInactive``: the leader re-elects when the master went."""
        if not self.is_leader_ready:
            return
        state = self.replicas.sync_state_set_info_table.get(broker_name)
        if broker_id is None or (state is not None and state.master_broker_id == broker_id):
            self.trigger_elect_master(broker_name)

    def trigger_elect_master(self, broker_name: str) -> None:
        if broker_name in self._electing:
            return
        self._electing.add(broker_name)
        task = asyncio.get_running_loop().create_task(self._trigger_elect(broker_name))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _trigger_elect(self, broker_name: str) -> None:
        try:
            header = ElectMasterRequestHeader.of_controller_trigger(broker_name)
            for attempt in range(self.config.elect_master_max_retry_count):
                self.counters["elections_triggered"] += 1
                try:
                    reply = await wait_for(self.submit(
                        "electMaster", lambda: self.replicas.elect_master(header, self.live()), True), ELECT_WAIT_S)
                except asyncio.TimeoutError:
                    log.warning("elect-master in broker-set %s timed out (try %d)", broker_name, attempt)
                    continue
                if reply.code == RC.SUCCESS:
                    log.info("elected a new master in broker-set %s: %s", broker_name, reply.fields)
                    self.after_elect(broker_name)
                    return
                log.warning("failed to trigger elect-master in broker-set %s: %s %s", broker_name, reply.code,
                            reply.remark)
        finally:
            self._electing.discard(broker_name)

    def after_elect(self, broker_name: str) -> None:
        """A successful election: tell the set's live brokers (``notifyBrokerRoleChanged``)."""
        self.counters["elections_succeeded"] += 1
        if not self.config.notify_broker_role_changed:
            return
        replicas = self.replicas.replica_info_table.get(broker_name)
        state = self.replicas.sync_state_set_info_table.get(broker_name)
        if replicas is None or state is None or state.master_broker_id is None:
            return
        entry = RoleChangeEntry(replicas.broker_address(state.master_broker_id), state.master_broker_id,
                                state.master_epoch, state.sync_state_set_epoch, state.sync_state_set)
        live = self.live()
        for broker_id, addr in replicas.broker_id_table().items():
            if addr and live.check(replicas.cluster_name, broker_name, broker_id):
                self.notifier.notify(addr, entry)

    # ------------------------------------------------------------------ views
    def status(self) -> dict[str, Any]:
        now = self.clock()
        sets: dict[str, Any] = {}
        for name, replicas in self.replicas.replica_info_table.items():
            state = self.replicas.sync_state_set_info_table.get(name)
            sets[name] = {
                "clusterName": replicas.cluster_name,
                "brokers": {str(i): a for i, a in replicas.broker_id_table().items()},
                "aliveBrokers": sorted(i for i in replicas.broker_id_info
                                       if self.heartbeats.is_broker_active(replicas.cluster_name, name, i, now)),
                "masterBrokerId": state.master_broker_id if state else None,
                "masterEpoch": state.master_epoch if state else None,
                "syncStateSet": sorted(state.sync_state_set) if state else [],
                "syncStateSetEpoch": state.sync_state_set_epoch if state else None,
            }
        d = self.dledger
        return {
            "selfId": self.config.controller_d_leger_self_id, "group": d.config.group,
            "role": d.role.value, "term": d.term, "leaderId": d.leader_id, "leaderAddress": self.leader_door(),
            "isLeader": self.is_leader_ready, "appliedIndex": self.applied_index,
            "committedIndex": d.store.committed_index, "brokerSets": sets,
            "heartbeatBrokers": len(self.heartbeats), "pendingRequests": self._queue.qsize(),
            "counters": dict(self.counters), "notifier": dict(self.notifier.counters),
        }

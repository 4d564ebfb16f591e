"""The controller's state machine: Apache RocketMQ 5.3.3's ``ReplicasInfoManager`` (with
``BrokerReplicaInfo`` and ``SyncStateInfo``), deterministic, with no I/O and no clock.

Two kinds of calls, as in Apache:

- **Handlers** (``alter_sync_state_set``, ``elect_master``, ``get_next_broker_id``,
  ``apply_broker_id``, ``register_broker``, ``get_replica_info``, ``get_sync_state_data``,
  ``clean_broker_data``, ``scan_need_reelect_broker_sets``) check a request against the current
  state and return a :class:`ControllerResult` (response code, remark, header, body, events).
  They never change the state; liveness and heartbeat data come in as a
  :class:`controller.elect_policy.LiveBrokers` snapshot.
- :meth:`ReplicasInfoManager.apply_event` is the only mutation. The controller appends a
  handler's events to the replicated log and every controller applies them, once committed, in
  log order. Events are appended whatever the response code (a failed controller-triggered
  election still records that the master is gone).

Rules (Apache's; the design doc's names where it has them):
- Broker ids: a broker set's first broker must apply for id 1 (``FIRST_BROKER_CONTROLLER_ID``);
  later, any id not yet taken, or the id this broker already holds (same ``registerCheckCode``).
  ``getNextBrokerId`` is 1 + the number of ids handed out; nothing forces a broker to take it.
- Alter SyncStateSet ("Shrink"/"Expand"), refused in this order: unknown broker set
  (``CONTROLLER_ALTER_SYNC_STATE_SET_FAILED``), a set equal to the current one (same code), a
  request not from the current master (``CONTROLLER_INVALID_MASTER``), an old masterEpoch
  (``CONTROLLER_FENCED_MASTER_EPOCH``), an old syncStateSetEpoch
  (``CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH``), an unregistered replica
  (``CONTROLLER_INVALID_REPLICAS``), a dead replica (``CONTROLLER_BROKER_NOT_ALIVE``), a set
  without the master (``CONTROLLER_ALTER_SYNC_STATE_SET_FAILED``). Accepted: epoch + 1.
- Elect master: the first election of a broker set (masterEpoch 0) makes the asking broker
  master, unchecked. Later ones ask the :class:`~controller.elect_policy.ElectPolicy` (the
  SyncStateSet; every replica only with ``enable_elect_unclean_master``); the old master still
  alive is ``CONTROLLER_MASTER_STILL_EXIST``; a new master bumps masterEpoch and
  syncStateSetEpoch and the SyncStateSet becomes ``{master}``; no candidate is
  ``CONTROLLER_MASTER_NOT_AVAILABLE`` plus an ``ElectMasterEvent(false)`` (the master is gone, the
  set kept) when the controller asked (brokerId -1), ``CONTROLLER_ELECT_MASTER_FAILED`` and no
  event when a broker or an admin asked.
- Register: a known broker learns the master (only if alive) and the SyncStateSet; a changed
  address is an ``UpdateBrokerAddressEvent``.
- Clean broker data: refused (``CONTROLLER_INVALID_CLEAN_BROKER_METADATA``) while the broker set
  has a master and no ids are named, while a named id is alive, for a malformed id list, and for
  an unknown broker set; ``isCleanLivingBroker`` skips the liveness checks and (as in Apache)
  cleans the whole broker set even when ids are named.
- Where Apache would throw (a ``null`` it unboxes or dereferences), the answer is
  ``SYSTEM_ERROR`` naming the field and no events: what Apache's remoting layer answers for an
  exception.

Apache quirks kept, because the log must replay to the same state everywhere: a broker set
whose SyncStateSet has been emptied by cleaning loses its ``SyncStateInfo``, so the next
``ApplyBrokerIdEvent`` re-creates it *and* replaces the ``BrokerReplicaInfo`` (forgetting the other
ids); cleaning does not bump the syncStateSetEpoch. One deviation: an
``UpdateBrokerAddressEvent`` for an unknown broker set is ignored (Apache throws a
``NullPointerException`` in the apply loop).

Theory of operation: two dicts keyed by brokerName (``replica_info_table``,
``sync_state_set_info_table``); ``apply_event`` dispatches on the event's class through a table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Optional, Sequence, TypeVar

from controller.bodies import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from controller.codes import ControllerResponseCode as RC
from controller.elect_policy import DefaultElectPolicy, ElectPolicy, LiveBrokers
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    UpdateBrokerAddressEvent,
)
from controller.fastjson import long_set
from controller.headers import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    EmptyHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)

FIRST_BROKER_CONTROLLER_ID = 1
_JAVA_LONG = re.compile(r"[+-]?[0-9]+\Z")

R = TypeVar("R")


@dataclass(frozen=True)
class ControllerResult(Generic[R]):
    """Apache's ``ControllerResult``: the answer and the events to append."""

    response: R
    events: tuple[Event, ...] = ()
    body: Optional[bytes] = None
    response_code: int = RC.SUCCESS
    remark: Optional[str] = None


def _refuse(response: R, code: int, remark: str) -> ControllerResult[R]:
    return ControllerResult(response, (), None, code, remark)


@dataclass
class BrokerReplicaInfo:
    """A broker set's registered brokers: id -> (address, registerCheckCode)."""

    cluster_name: Optional[str]
    broker_name: str
    next_assign_broker_id: int = FIRST_BROKER_CONTROLLER_ID
    broker_id_info: dict[int, tuple[Optional[str], Optional[str]]] = field(default_factory=dict)

    def add_broker(self, broker_id: int, address: Optional[str], register_check_code: Optional[str]) -> None:
        self.broker_id_info[broker_id] = (address, register_check_code)
        self.next_assign_broker_id += 1

    def is_broker_exist(self, broker_id: Optional[int]) -> bool:
        return broker_id in self.broker_id_info

    def broker_address(self, broker_id: Optional[int]) -> Optional[str]:
        pair = self.broker_id_info.get(broker_id) if broker_id is not None else None
        return pair[0] if pair else None

    def register_check_code(self, broker_id: Optional[int]) -> Optional[str]:
        pair = self.broker_id_info.get(broker_id) if broker_id is not None else None
        return pair[1] if pair else None

    def broker_id_table(self) -> dict[int, Optional[str]]:
        return {i: a for i, (a, _) in self.broker_id_info.items()}

    def update_broker_address(self, broker_id: Optional[int], address: Optional[str]) -> None:
        if broker_id is not None and broker_id in self.broker_id_info:
            self.broker_id_info[broker_id] = (address, self.broker_id_info[broker_id][1])


@dataclass
class SyncStateInfo:
    """A broker set's master, SyncStateSet and their epochs."""

    cluster_name: Optional[str]
    broker_name: str
    master_epoch: int = 0
    sync_state_set_epoch: int = 0
    sync_state_set: tuple[int, ...] = ()
    master_broker_id: Optional[int] = None

    def update_master_info(self, master_broker_id: Optional[int]) -> None:
        self.master_broker_id = master_broker_id
        self.master_epoch += 1

    def update_sync_state_set_info(self, new_set: Iterable[int]) -> None:
        self.sync_state_set = tuple(dict.fromkeys(new_set))
        self.sync_state_set_epoch += 1

    @property
    def is_first_time_for_elect(self) -> bool:
        return self.master_epoch == 0

    def remove_from_sync_state(self, broker_id: int) -> None:
        self.sync_state_set = tuple(b for b in self.sync_state_set if b != broker_id)


def _java_split(text: str, sep: str) -> list[str]:
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _is_java_long(s: str) -> bool:
    """``Long.valueOf`` would take it."""
    return len(s) <= 40 and bool(_JAVA_LONG.match(s)) and -(2 ** 63) <= int(s) < 2 ** 63


def _is_blank(s: Optional[str]) -> bool:
    return s is None or s.strip() == ""


class ReplicasInfoManager:
    """The state machine (see the module rules)."""

    def __init__(self, enable_elect_unclean_master: bool = False) -> None:
        self.enable_elect_unclean_master = enable_elect_unclean_master
        self.replica_info_table: dict[str, BrokerReplicaInfo] = {}
        self.sync_state_set_info_table: dict[str, SyncStateInfo] = {}
        # the transitions, as data: event class -> how it changes the tables
        self._appliers: dict[type, Callable[[Any], None]] = {
            AlterSyncStateSetEvent: self._apply_alter_sync_state_set,
            ApplyBrokerIdEvent: self._apply_apply_broker_id,
            ElectMasterEvent: self._apply_elect_master,
            CleanBrokerDataEvent: self._apply_clean_broker_data,
            UpdateBrokerAddressEvent: self._apply_update_broker_address,
        }

    def is_contains_broker(self, broker_name: Optional[str]) -> bool:
        return (broker_name is not None and broker_name in self.replica_info_table
                and broker_name in self.sync_state_set_info_table)

    # ================================================================== handlers (no mutation)
    def alter_sync_state_set(self, request: AlterSyncStateSetRequestHeader, sync_state_set: Optional[SyncStateSet],
                             live: LiveBrokers) -> ControllerResult[AlterSyncStateSetResponseHeader]:
        response = AlterSyncStateSetResponseHeader()
        name = request.broker_name
        if name is None:
            return _refuse(response, RC.SYSTEM_ERROR, "brokerName is null")
        if not self.is_contains_broker(name):
            return _refuse(response, RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, "Broker metadata is not existed")
        if sync_state_set is None:
            return _refuse(response, RC.SYSTEM_ERROR, "the request has no SyncStateSet body")
        state = self.sync_state_set_info_table[name]
        replicas = self.replica_info_table[name]
        new_set = long_set(sync_state_set.sync_state_set)
        if set(new_set) == set(state.sync_state_set):
            return _refuse(response, RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                           "The newSyncStateSet is equal with oldSyncStateSet, no needed to update syncStateSet")
        if state.master_broker_id is None or state.master_broker_id != request.master_broker_id:
            return _refuse(response, RC.CONTROLLER_INVALID_MASTER,
                           f"Rejecting alter syncStateSet request because the current leader is:"
                           f"{{{_j(state.master_broker_id)}}}, not {{{_j(request.master_broker_id)}}}")
        if request.master_epoch is None:
            return _refuse(response, RC.SYSTEM_ERROR, "masterEpoch is null")
        if request.master_epoch != state.master_epoch:
            return _refuse(response, RC.CONTROLLER_FENCED_MASTER_EPOCH,
                           f"Rejecting alter syncStateSet request because the current master epoch is:"
                           f"{{{state.master_epoch}}}, not {{{request.master_epoch}}}")
        if sync_state_set.sync_state_set_epoch != state.sync_state_set_epoch:
            return _refuse(response, RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                           f"Rejecting alter syncStateSet request because the current syncStateSet epoch is:"
                           f"{{{state.sync_state_set_epoch}}}, not {{{sync_state_set.sync_state_set_epoch}}}")
        for replica in new_set:
            if not replicas.is_broker_exist(replica):
                return _refuse(response, RC.CONTROLLER_INVALID_REPLICAS,
                               f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't exist")
            if not live.check(replicas.cluster_name, replicas.broker_name, replica):
                return _refuse(response, RC.CONTROLLER_BROKER_NOT_ALIVE,
                               f"Rejecting alter syncStateSet request because the replicas {{{replica}}} don't alive")
        if state.master_broker_id not in new_set:
            return _refuse(response, RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                           f"Rejecting alter syncStateSet request because the newSyncStateSet don't contains "
                           f"origin leader {{{state.master_broker_id}}}")
        epoch = state.sync_state_set_epoch + 1
        ordered = tuple(sync_state_set.sync_state_set)
        return ControllerResult(AlterSyncStateSetResponseHeader(epoch), (AlterSyncStateSetEvent(name, ordered),),
                                SyncStateSet(ordered, epoch).encode())

    def elect_master(self, request: ElectMasterRequestHeader, live: LiveBrokers,
                     policy: Optional[ElectPolicy] = None) -> ControllerResult[ElectMasterResponseHeader]:
        name = request.broker_name
        broker_id = request.broker_id
        if not self.is_contains_broker(name):
            return _refuse(ElectMasterResponseHeader(), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                           "Broker hasn't been registered")
        state = self.sync_state_set_info_table[name]
        replicas = self.replica_info_table[name]
        old_master = state.master_broker_id
        all_replicas = list(replicas.broker_id_info) if self.enable_elect_unclean_master else None
        new_master: Optional[int] = None
        if state.is_first_time_for_elect:
            new_master = broker_id
        if new_master is None or new_master == -1:
            assigned = broker_id if request.designate_elect else None
            elect = policy if policy is not None else DefaultElectPolicy(live)
            new_master = elect.elect(replicas.cluster_name or "", replicas.broker_name, state.sync_state_set,
                                     all_replicas, old_master, assigned)
        if new_master is not None and new_master == old_master:
            return ControllerResult(
                ElectMasterResponseHeader(old_master, replicas.broker_address(old_master), state.master_epoch,
                                          state.sync_state_set_epoch),
                (), ElectMasterResponseBody(state.sync_state_set).encode(), RC.CONTROLLER_MASTER_STILL_EXIST,
                f"The old master {old_master} is still alive, not need to elect new master for broker "
                f"{replicas.broker_name}")
        if new_master is not None:
            group = BrokerMemberGroup(replicas.cluster_name, replicas.broker_name,
                                      {i: a for i, a in replicas.broker_id_table().items() if a is not None})
            return ControllerResult(
                ElectMasterResponseHeader(new_master, replicas.broker_address(new_master), state.master_epoch + 1,
                                          state.sync_state_set_epoch + 1),
                (ElectMasterEvent(True, name, new_master),),
                ElectMasterResponseBody((new_master,), group).encode())
        if broker_id == -1:
            return ControllerResult(ElectMasterResponseHeader(), (ElectMasterEvent(False, name),), None,
                                    RC.CONTROLLER_MASTER_NOT_AVAILABLE,
                                    "Old master has down and failed to elect a new broker master")
        return _refuse(ElectMasterResponseHeader(), RC.CONTROLLER_ELECT_MASTER_FAILED, "Failed to elect a new master")

    def get_next_broker_id(self, request: GetNextBrokerIdRequestHeader) -> ControllerResult[GetNextBrokerIdResponseHeader]:
        if request.broker_name is None:
            return _refuse(GetNextBrokerIdResponseHeader(request.cluster_name), RC.SYSTEM_ERROR, "brokerName is null")
        replicas = self.replica_info_table.get(request.broker_name)
        next_id = FIRST_BROKER_CONTROLLER_ID if replicas is None else replicas.next_assign_broker_id
        return ControllerResult(GetNextBrokerIdResponseHeader(request.cluster_name, request.broker_name, next_id))

    def apply_broker_id(self, request: ApplyBrokerIdRequestHeader) -> ControllerResult[ApplyBrokerIdResponseHeader]:
        response = ApplyBrokerIdResponseHeader(request.cluster_name, request.broker_name)
        name, broker_id, code = request.broker_name, request.applied_broker_id, request.register_check_code
        if code is None or name is None or broker_id is None:
            return _refuse(response, RC.SYSTEM_ERROR, "registerCheckCode, brokerName and appliedBrokerId are required")
        pieces = _java_split(code, ";")
        if not pieces:
            return _refuse(response, RC.SYSTEM_ERROR, f"registerCheckCode {code!r} has no broker address")
        event = ApplyBrokerIdEvent(request.cluster_name, name, pieces[0], broker_id, code)
        replicas = self.replica_info_table.get(name)
        if replicas is None:
            if broker_id == FIRST_BROKER_CONTROLLER_ID:
                return ControllerResult(response, (event,))
            return _refuse(response, RC.CONTROLLER_BROKER_ID_INVALID,
                           f"Broker-set: {name} hasn't been registered in controller, but broker try to apply "
                           f"brokerId: {broker_id}")
        if not replicas.is_broker_exist(broker_id) or code == replicas.register_check_code(broker_id):
            return ControllerResult(response, (event,))
        return _refuse(response, RC.CONTROLLER_BROKER_ID_INVALID,
                       f"Fail to apply brokerId: {broker_id} in broker-set: {name}")

    def register_broker(self, request: RegisterBrokerToControllerRequestHeader,
                        live: LiveBrokers) -> ControllerResult[RegisterBrokerToControllerResponseHeader]:
        cluster, name, broker_id = request.cluster_name, request.broker_name, request.broker_id
        response = RegisterBrokerToControllerResponseHeader(cluster, name)
        if name is None or broker_id is None:
            return _refuse(response, RC.SYSTEM_ERROR, "brokerName and brokerId are required")
        if not self.is_contains_broker(name):
            return _refuse(response, RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                           f"Broker-set: {name} hasn't been registered in controller")
        replicas = self.replica_info_table[name]
        state = self.sync_state_set_info_table[name]
        if not replicas.is_broker_exist(broker_id):
            return _refuse(response, RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                           f"BrokerId: {broker_id} hasn't been registered in broker-set: {name}")
        if request.broker_address is None:
            return _refuse(response, RC.SYSTEM_ERROR, "brokerAddress is null")
        master = state.master_broker_id
        if master is not None and live.check(cluster, name, master):
            response = RegisterBrokerToControllerResponseHeader(
                cluster, name, master, replicas.broker_address(master), state.master_epoch, state.sync_state_set_epoch)
        events: tuple[Event, ...] = ()
        if request.broker_address != replicas.broker_address(broker_id):
            events = (UpdateBrokerAddressEvent(cluster, name, request.broker_address, broker_id),)
        return ControllerResult(response, events, SyncStateSet(state.sync_state_set, state.sync_state_set_epoch).encode())

    def get_replica_info(self, request: GetReplicaInfoRequestHeader) -> ControllerResult[GetReplicaInfoResponseHeader]:
        name = request.broker_name
        if name is None:
            return _refuse(GetReplicaInfoResponseHeader(), RC.SYSTEM_ERROR, "brokerName is null")
        if not self.is_contains_broker(name):
            return _refuse(GetReplicaInfoResponseHeader(), RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                           "Broker metadata is not existed")
        state = self.sync_state_set_info_table[name]
        replicas = self.replica_info_table[name]
        master = state.master_broker_id
        return ControllerResult(
            GetReplicaInfoResponseHeader(master, replicas.broker_address(master), state.master_epoch), (),
            SyncStateSet(state.sync_state_set, state.sync_state_set_epoch).encode())

    def get_sync_state_data(self, broker_names: Sequence[str], live: LiveBrokers) -> ControllerResult[EmptyHeader]:
        table: dict[str, ReplicasInfo] = {}
        for name in broker_names:
            if not self.is_contains_broker(name):
                continue
            state = self.sync_state_set_info_table[name]
            replicas = self.replica_info_table[name]
            in_sync: list[ReplicaIdentity] = []
            not_in_sync: list[ReplicaIdentity] = []
            ids = replicas.broker_id_table()
            for broker_id in long_set(ids):
                r = ReplicaIdentity(name, broker_id, ids[broker_id], live.check(replicas.cluster_name, name, broker_id))
                (in_sync if broker_id in state.sync_state_set else not_in_sync).append(r)
            master = state.master_broker_id
            table[name] = ReplicasInfo(master, replicas.broker_address(master), state.master_epoch,
                                       state.sync_state_set_epoch, tuple(in_sync), tuple(not_in_sync))
        return ControllerResult(EmptyHeader(), (), BrokerReplicasInfo(table).encode())

    def clean_broker_data(self, request: CleanControllerBrokerDataRequestHeader,
                          live: LiveBrokers) -> ControllerResult[EmptyHeader]:
        name = request.broker_name
        ids_text = request.broker_controller_ids_to_clean
        ids: Optional[tuple[int, ...]] = None
        if not request.is_clean_living_broker:
            state = self.sync_state_set_info_table.get(name)
            if _is_blank(ids_text) and state is not None and state.master_broker_id is not None:
                return _refuse(EmptyHeader(), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                               f"Broker {name} is still alive, clean up failure")
            if ids_text is not None and not _is_blank(ids_text):
                pieces = _java_split(ids_text, ";")
                bad = [p for p in pieces if not _is_java_long(p)]
                if bad:
                    return _refuse(EmptyHeader(), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                   f"Please set the option <brokerControllerIdsToClean> according to the format, "
                                   f"exception: java.lang.NumberFormatException: For input string: \"{bad[0]}\"")
                ids = tuple(long_set(int(p) for p in pieces))
                for broker_id in ids:
                    if live.check(request.cluster_name, name, broker_id):
                        return _refuse(EmptyHeader(), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                       f"Broker [{name},  {broker_id}] is still alive, clean up failure")
        if self.is_contains_broker(name):
            return ControllerResult(EmptyHeader(), (CleanBrokerDataEvent(name, ids),))
        return _refuse(EmptyHeader(), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                       f"Broker {name} is not existed,clean broker data failure.")

    def scan_need_reelect_broker_sets(self, live: LiveBrokers) -> list[str]:
        """Broker sets whose master is dead while another of their brokers is alive."""
        out: list[str] = []
        for name, state in self.sync_state_set_info_table.items():
            master = state.master_broker_id
            if master is None or live.check(state.cluster_name, name, master):
                continue
            replicas = self.replica_info_table.get(name)
            if replicas is not None and any(live.check(state.cluster_name, name, b) for b in replicas.broker_id_info):
                out.append(name)
        return out

    # ================================================================== apply (the only mutation)
    def apply_event(self, event: Event) -> None:
        applier = self._appliers.get(type(event))
        if applier is not None:
            applier(event)

    def _apply_alter_sync_state_set(self, event: AlterSyncStateSetEvent) -> None:
        if self.is_contains_broker(event.broker_name):
            self.sync_state_set_info_table[event.broker_name].update_sync_state_set_info(event.new_sync_state_set)

    def _apply_apply_broker_id(self, event: ApplyBrokerIdEvent) -> None:
        name = event.broker_name
        if self.is_contains_broker(name):
            replicas = self.replica_info_table[name]
            if not replicas.is_broker_exist(event.new_broker_id):
                replicas.add_broker(event.new_broker_id, event.broker_address, event.register_check_code)
            return
        replicas = BrokerReplicaInfo(event.cluster_name, name)
        replicas.add_broker(event.new_broker_id, event.broker_address, event.register_check_code)
        self.replica_info_table[name] = replicas
        self.sync_state_set_info_table[name] = SyncStateInfo(event.cluster_name, name)

    def _apply_update_broker_address(self, event: UpdateBrokerAddressEvent) -> None:
        replicas = self.replica_info_table.get(event.broker_name)
        if replicas is not None:
            replicas.update_broker_address(event.broker_id, event.broker_address)

    def _apply_elect_master(self, event: ElectMasterEvent) -> None:
        if not self.is_contains_broker(event.broker_name):
            return
        state = self.sync_state_set_info_table[event.broker_name]
        if event.new_master_elected:
            state.update_master_info(event.new_master_broker_id)
            state.update_sync_state_set_info(() if event.new_master_broker_id is None else (event.new_master_broker_id,))
        else:
            state.update_master_info(None)

    def _apply_clean_broker_data(self, event: CleanBrokerDataEvent) -> None:
        name = event.broker_name
        ids = event.broker_id_set_to_clean
        if not ids:
            self.replica_info_table.pop(name, None)
            self.sync_state_set_info_table.pop(name, None)
            return
        if not self.is_contains_broker(name):
            return
        replicas = self.replica_info_table[name]
        state = self.sync_state_set_info_table[name]
        for broker_id in ids:
            replicas.broker_id_info.pop(broker_id, None)
            state.remove_from_sync_state(broker_id)
        if not replicas.broker_id_info:
            del self.replica_info_table[name]
        if not state.sync_state_set:
            del self.sync_state_set_info_table[name]


def _j(value: Optional[int]) -> str:
    """Java's ``String.valueOf`` of a boxed Long."""
    return "null" if value is None else str(value)

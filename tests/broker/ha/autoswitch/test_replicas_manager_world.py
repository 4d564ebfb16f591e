"""ReplicasManager (broker/ha/autoswitch/replicas_manager.py) against a pure fake world: controllers
that answer with the real ``controller.replicas_info.ReplicasInfoManager`` (the leader) or
``CONTROLLER_NOT_LEADER`` (the others), brokers whose "disk" is a dict. Crash points of the
register sequence, and hypothesis properties over random leader changes, lost answers, crashes
and role notifications."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.ha.autoswitch.metadata_file import BrokerMetadata, TempBrokerMetadata
from broker.ha.autoswitch.replicas_manager import ReplicasManager
from broker.ha.autoswitch.replicas_messages import (
    ON_DISK, Action, Answered, CallFailed, ChangeToMaster, ChangeToSlave, ClearTempMetadata, ControllerCall,
    Event, FileDone, RegisterState, ReplicasConfig, RoleChangeNotified, SendHeartbeat, SetLocalBrokerId,
    Start, State, Tick, WriteMetadata, WriteTempMetadata,
)
from controller.bodies import SyncStateSet
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from controller.elect_policy import BrokerLiveInfo, LiveBrokers
from controller.headers import (
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, ElectMasterRequestHeader, GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader, GetReplicaInfoRequestHeader, RegisterBrokerToControllerRequestHeader,
    from_ext_fields, to_ext_fields,
)
from controller.replicas_info import ControllerResult, ReplicasInfoManager

CLUSTER, NAME = "c", "b"
CONTROLLERS = ("10.0.0.1:9878", "10.0.0.2:9878", "10.0.0.3:9878")


class HA:
    """The HAView of a broker: fixed offsets, no shrink."""

    def __init__(self) -> None:
        self.epoch = 0
        self.max_offset = 0

    def last_epoch(self) -> int:
        return self.epoch

    def max_phy_offset(self) -> int:
        return self.max_offset

    def confirm_offset(self) -> int:
        return self.max_offset

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
        return frozenset()


class Controllers:
    """The controller group: one leader answering from a ReplicasInfoManager, the rest NOT_LEADER;
    ``down`` members do not answer."""

    def __init__(self) -> None:
        self.rim = ReplicasInfoManager()
        self.leader = CONTROLLERS[0]
        self.down: set[str] = set()
        self.live: dict[tuple[str, str, int], BrokerLiveInfo] = {}
        self.processed = 0

    def live_brokers(self) -> LiveBrokers:
        return LiveBrokers(dict(self.live))

    def heartbeat(self, hb: SendHeartbeat) -> None:
        h = hb.header
        assert h.broker_id is not None
        self.live[(h.cluster_name, h.broker_name, h.broker_id)] = BrokerLiveInfo(
            h.broker_name, h.broker_addr, h.broker_id, h.epoch or 0, h.max_offset or 0,
            h.election_priority or 0, h.confirm_offset or 0)

    def answer(self, call: ControllerCall, now: int) -> Event:
        if call.address in self.down:
            return CallFailed(call.rid, now, "timeout")
        self.processed += 1
        if call.code == Q.CONTROLLER_GET_METADATA_INFO:
            return Answered(call.rid, now, RC.SUCCESS, None,
                            to_ext_fields(GetMetaDataResponseHeader("g", "n0", self.leader, call.address == self.leader)))
        if call.address != self.leader:
            return Answered(call.rid, now, RC.CONTROLLER_NOT_LEADER, "not leader",
                            {"controllerLeaderAddress": self.leader})
        fields = to_ext_fields(call.header)  # over the wire and back, as the door decodes it
        result: ControllerResult[Any]
        if call.code == Q.CONTROLLER_GET_NEXT_BROKER_ID:
            result = self.rim.get_next_broker_id(from_ext_fields(GetNextBrokerIdRequestHeader, fields))
        elif call.code == Q.CONTROLLER_APPLY_BROKER_ID:
            result = self.rim.apply_broker_id(from_ext_fields(ApplyBrokerIdRequestHeader, fields))
        elif call.code == Q.CONTROLLER_REGISTER_BROKER:
            result = self.rim.register_broker(from_ext_fields(RegisterBrokerToControllerRequestHeader, fields),
                                              self.live_brokers())
        elif call.code == Q.CONTROLLER_ELECT_MASTER:
            result = self.rim.elect_master(from_ext_fields(ElectMasterRequestHeader, fields), self.live_brokers())
        elif call.code == Q.CONTROLLER_GET_REPLICA_INFO:
            result = self.rim.get_replica_info(from_ext_fields(GetReplicaInfoRequestHeader, fields))
        elif call.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET:
            body = SyncStateSet.decode(call.body.encode()) if call.body is not None else None
            result = self.rim.alter_sync_state_set(from_ext_fields(AlterSyncStateSetRequestHeader, fields), body,
                                                   self.live_brokers())
        else:
            raise AssertionError(f"unexpected request {call.code}")
        for ev in result.events:
            self.rim.apply_event(ev)
        return Answered(call.rid, now, result.response_code, result.remark, to_ext_fields(result.response),
                        result.body)


@dataclass
class Broker:
    """A broker: its disk survives a crash, its ReplicasManager does not."""

    address: str
    controllers: Controllers
    disk: dict[str, object] = field(default_factory=dict)
    rm: Optional[ReplicasManager] = None
    log: list[Action] = field(default_factory=list)
    queue: list[Event] = field(default_factory=list)
    effects: int = 0  # controller calls processed + files changed, over all lives
    ids_set: list[int] = field(default_factory=list)

    def config(self) -> ReplicasConfig:
        return ReplicasConfig(CLUSTER, NAME, self.address, CONTROLLERS)

    def boot(self, now: int) -> None:
        self.rm = ReplicasManager(self.config(), HA())
        self.log = []
        self.queue = [Start(now, self.meta(), self.temp())]

    def meta(self) -> Optional[BrokerMetadata]:
        m = self.disk.get("meta")
        assert m is None or isinstance(m, BrokerMetadata)
        return m

    def temp(self) -> Optional[TempBrokerMetadata]:
        t = self.disk.get("temp")
        assert t is None or isinstance(t, TempBrokerMetadata)
        return t

    def run(self, now: int, budget: Optional[int] = None) -> bool:
        """Handle queued events until none is left; False when the effect budget ran out first
        (a crash: whatever was queued is lost)."""
        assert self.rm is not None
        while self.queue:
            ev = self.queue.pop(0)
            for a in self.rm.handle(ev):
                self.log.append(a)
                if isinstance(a, (ControllerCall, WriteTempMetadata, WriteMetadata, ClearTempMetadata)):
                    if budget is not None and self.effects >= budget:
                        self.queue.clear()
                        return False
                    self.effects += 1
                self._do(a, now)
        return True

    def _do(self, a: Action, now: int) -> None:
        if isinstance(a, ControllerCall):
            self.queue.append(self.controllers.answer(a, now))
        elif isinstance(a, SendHeartbeat):
            if a.address == self.controllers.leader:
                self.controllers.heartbeat(a)
        elif isinstance(a, WriteTempMetadata):
            self.disk["temp"] = a.metadata
            self.queue.append(FileDone(now))
        elif isinstance(a, WriteMetadata):
            self.disk["meta"] = a.metadata
            self.queue.append(FileDone(now))
        elif isinstance(a, ClearTempMetadata):
            self.disk.pop("temp", None)
            self.queue.append(FileDone(now))
        elif isinstance(a, SetLocalBrokerId):
            self.ids_set.append(a.broker_id)

    def tick(self, now: int) -> None:
        self.queue.append(Tick(now))
        self.run(now)


def register_until_running(b: Broker, start: int, limit: int = 200) -> int:
    now = start
    for _ in range(limit):
        assert b.rm is not None
        if b.rm.state is State.RUNNING:
            return now
        now += 250
        b.tick(now)
    raise AssertionError(f"not RUNNING: {b.rm.state if b.rm else None}, {b.log[-5:]}")


# ------------------------------------------------------------------------------ crash points
def _register_effects() -> int:
    """How many effects a clean first start of one broker has until it is registered (its first
    ELECT included: the register answer names no master)."""
    c = Controllers()
    b = Broker("10.0.1.1:10911", c)
    b.boot(0)
    b.run(0)
    assert b.rm is not None and b.rm.register_state is RegisterState.REGISTERED
    return b.effects


CLEAN_EFFECTS = _register_effects()


def test_a_clean_first_start_is_metadata_next_id_temp_apply_meta_clear_register() -> None:
    c = Controllers()
    b = Broker("10.0.1.1:10911", c)
    b.boot(0)
    b.run(0)
    seq = [(type(a).__name__, a.code if isinstance(a, ControllerCall) else None) for a in b.log
           if isinstance(a, (ControllerCall, WriteTempMetadata, WriteMetadata, ClearTempMetadata))]
    assert seq == [("ControllerCall", Q.CONTROLLER_GET_METADATA_INFO), ("ControllerCall", Q.CONTROLLER_GET_NEXT_BROKER_ID),
                   ("WriteTempMetadata", None), ("ControllerCall", Q.CONTROLLER_APPLY_BROKER_ID),
                   ("WriteMetadata", None), ("ClearTempMetadata", None),
                   ("ControllerCall", Q.CONTROLLER_REGISTER_BROKER), ("ControllerCall", Q.CONTROLLER_ELECT_MASTER)]
    assert CLEAN_EFFECTS == 8
    assert b.disk == {"meta": BrokerMetadata(CLUSTER, NAME, 1)}


# crash after k effects: (brokerIdentity on disk, -temp on disk, the controller granted the id)
CRASH_TABLE = [
    (0, False, False, False),  # before anything
    (1, False, False, False),  # after GET_METADATA_INFO
    (2, False, False, False),  # after GET_NEXT_BROKER_ID: nothing written yet
    (3, False, True, False),  # temp written, APPLY not sent
    (4, False, True, True),  # APPLY granted, its answer lost
    (5, True, True, True),  # brokerIdentity written, temp not yet cleared
    (6, True, False, True),  # temp cleared, REGISTER not sent
    (7, True, False, True),  # REGISTER answered, lost
]


@pytest.mark.parametrize("k, has_meta, has_temp, granted", CRASH_TABLE)
def test_every_crash_point_of_the_register_sequence_resumes_to_one_id(
        k: int, has_meta: bool, has_temp: bool, granted: bool) -> None:
    c = Controllers()
    b = Broker("10.0.1.1:10911", c)
    b.boot(0)
    assert b.run(0, budget=k) is False or k >= CLEAN_EFFECTS
    assert ("meta" in b.disk, "temp" in b.disk) == (has_meta, has_temp)
    replicas = c.rim.replica_info_table.get(NAME)
    assert (replicas is not None and replicas.is_broker_exist(1)) == granted
    # the restart reads the disk and resumes where ON_DISK says
    b.boot(1000)
    assert b.rm is not None
    b.run(1000)
    expected_first = {RegisterState.INITIAL: Q.CONTROLLER_GET_NEXT_BROKER_ID,
                      RegisterState.CREATE_TEMP_METADATA_FILE_DONE: Q.CONTROLLER_APPLY_BROKER_ID,
                      RegisterState.CREATE_METADATA_FILE_DONE: Q.CONTROLLER_REGISTER_BROKER}[ON_DISK[(has_meta, has_temp)]]
    calls = [a for a in b.log if isinstance(a, ControllerCall) and a.code != Q.CONTROLLER_GET_METADATA_INFO]
    assert calls[0].code == expected_first
    register_until_running(b, 1000)
    assert b.disk == {"meta": BrokerMetadata(CLUSTER, NAME, 1)}  # the temp file is gone
    assert sorted(c.rim.replica_info_table[NAME].broker_id_info) == [1]  # no orphaned id
    assert c.rim.replica_info_table[NAME].broker_address(1) == "10.0.1.1:10911"
    assert set(b.ids_set) == {1}


def test_an_applied_id_taken_by_another_broker_is_dropped_and_a_new_one_applied() -> None:
    c = Controllers()
    other = Broker("10.0.1.2:10911", c)
    other.boot(0)
    other.run(0)
    b = Broker("10.0.1.1:10911", c)
    b.disk["temp"] = TempBrokerMetadata(CLUSTER, NAME, 1, "10.0.1.1:10911;5")  # id 1 is the other's
    b.boot(0)
    register_until_running(b, 0)
    applies = [a for a in b.log if isinstance(a, ControllerCall) and a.code == Q.CONTROLLER_APPLY_BROKER_ID]
    assert [a.header.applied_broker_id for a in applies] == [1, 2]  # type: ignore[union-attr]
    assert b.disk == {"meta": BrokerMetadata(CLUSTER, NAME, 2)}


def test_two_brokers_elect_one_master_and_one_slave() -> None:
    c = Controllers()
    a, b = Broker("10.0.1.1:10911", c), Broker("10.0.1.2:10911", c)
    a.boot(0)
    b.boot(0)
    a.run(0)
    b.run(0)
    register_until_running(a, 0)
    register_until_running(b, 0)
    masters = [x for x in a.log + b.log if isinstance(x, ChangeToMaster)]
    slaves = [x for x in b.log if isinstance(x, ChangeToSlave)]
    assert [m.new_master_epoch for m in masters] == [1]
    assert [x for x in a.log if isinstance(x, ChangeToMaster)] == masters
    assert len(slaves) == 1 and slaves[0].master_broker_id == 1 and slaves[0].master_address == a.address
    assert slaves[0].master_epoch == 1


# ------------------------------------------------------------------------------ properties
OPS = st.lists(st.one_of(
    st.tuples(st.just("tick"), st.integers(0, 1), st.integers(1, 6000)),
    st.tuples(st.just("crash"), st.integers(0, 1), st.integers(0, 9)),
    st.tuples(st.just("leader"), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("down"), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("notify"), st.integers(0, 1), st.integers(0, 6)),
), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None)
@given(OPS)
def test_properties_under_crashes_leader_changes_and_notifications(ops: list[tuple[str, int, int]]) -> None:
    c = Controllers()
    brokers = [Broker(f"10.0.1.{i + 1}:10911", c) for i in range(2)]
    now = 0
    for br in brokers:
        br.boot(now)
        br.run(now)
    first_id: dict[int, int] = {}
    for op, who, arg in ops:
        now += 100
        br = brokers[who % 2]
        if op == "tick":
            now += arg
            br.tick(now)
        elif op == "crash":
            br.queue.append(Tick(now))
            br.run(now, budget=br.effects + arg)
            _check_life(br)
            br.boot(now)
            br.run(now)
        elif op == "leader":
            c.leader = CONTROLLERS[who]
        elif op == "down":
            addr = CONTROLLERS[who]
            if arg and addr != c.leader:
                c.down.add(addr)
            else:
                c.down.discard(addr)
        elif op == "notify":
            state = c.rim.sync_state_set_info_table.get(NAME)
            if state is not None and state.master_broker_id is not None:
                fields = {"masterBrokerId": str(state.master_broker_id), "masterEpoch": str(arg),
                          "syncStateSetEpoch": str(state.sync_state_set_epoch),
                          "masterAddress": c.rim.replica_info_table[NAME].broker_address(state.master_broker_id) or ""}
                br.queue.append(RoleChangeNotified(now, fields, SyncStateSet(tuple(state.sync_state_set), 1).encode()))
                br.run(now)
        for i, x in enumerate(brokers):
            m = x.meta()
            if m is not None:  # once brokerIdentity exists, the broker id never changes
                assert first_id.setdefault(i, m.broker_id) == m.broker_id
                assert x.rm is not None
                assert x.rm.broker_id in (None, m.broker_id)
            _check_life(x)
    ids = {x.meta().broker_id for x in brokers if x.meta() is not None}  # type: ignore[union-attr]
    assert len(ids) == len([x for x in brokers if x.meta() is not None])  # two brokers, two ids


def _check_life(b: Broker) -> None:
    """Within one life: role-change epochs strictly grow; no ChangeToMaster below an applied epoch;
    SetLocalBrokerId is the id on disk."""
    epochs = [a.new_master_epoch if isinstance(a, ChangeToMaster) else a.master_epoch
              for a in b.log if isinstance(a, (ChangeToMaster, ChangeToSlave))]
    assert epochs == sorted(set(epochs)), epochs
    meta = b.meta()
    for a in b.log:
        if isinstance(a, SetLocalBrokerId):
            assert meta is not None and a.broker_id == meta.broker_id

"""Two slaves joining a fresh Controller-mode master at once (issue 27, H9).

The master's log is empty (a fresh cluster); both slaves connect together, so their first acks
raise two SyncStateSet proposals built from the same local set {1}: {1,2} and {1,3}. The
ReplicasManager sends one ``CONTROLLER_ALTER_SYNC_STATE_SET`` at a time; a fake controller applies
Apache's rules (a request whose syncStateSetEpoch is not the current one is fenced). Wanted: both
slaves end up in the set, whatever the order the answers come in, and it stays whole while
``maybeShrinkSyncStateSet`` runs (haMaxTimeSlaveNotCatchup 3 s, heartbeats every 500 ms).

The world is driven by hand on a virtual clock: :class:`Pump` moves the bytes of each connection,
acks go to :class:`SyncStateSet` (as ``AutoSwitchHAService`` does), its proposals to the
:class:`ReplicasManager`, whose calls the controller answers after ``latency_ms``. Then the two
parts of the fix alone (proposals built on the one on its way; a slave in HANDSHAKE looked at again
every heartbeat interval), and one real-socket run: an empty in-process master, two slaves, a
proposal lost, repeated at the next heartbeat (before the fix: after haHousekeepingInterval, 20 s).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from broker.ha.autoswitch.client import AutoSwitchHAClient
from broker.ha.autoswitch.epoch_file import EpochEntry
from broker.ha.autoswitch.replicas_manager import ReplicasManager
from broker.ha.autoswitch.metadata_file import BrokerMetadata
from broker.ha.autoswitch.replicas_messages import (
    Action, Answered, ChangeSyncStateSet, ControllerCall, ReplicasConfig, Start, State, SyncStateSetProposed, Tick,
)
from broker.ha.autoswitch.protocol import SlaveMachine
from broker.ha.autoswitch.service import AutoSwitchHAService
from broker.ha.autoswitch.sync_state import SyncStateSet
from controller.bodies import ElectMasterResponseBody
from controller.bodies import SyncStateSet as SyncStateSetBody
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from controller.headers import (
    AlterSyncStateSetResponseHeader, ElectMasterResponseHeader, GetMetaDataResponseHeader,
    GetReplicaInfoResponseHeader, RegisterBrokerToControllerResponseHeader, to_ext_fields,
)
from tests.broker.ha.autoswitch.harness import Pump, Replica
from tests.broker.ha.autoswitch.test_service import Node, settings, wait_until

ME, C0 = "10.0.1.1:10911", "10.0.0.1:9878"
MASTER_ID, EPOCH = 1, 3
HEARTBEAT_MS, NOT_CATCHUP_MS = 500.0, 3000.0
CFG = ReplicasConfig("c", "b", ME, (C0,), check_sync_state_set_period_ms=500, sync_broker_metadata_period_ms=500,
                     first_task_delay_ms=0)


@dataclass
class Controller:
    """The controller's SyncStateSet of broker ``b`` and its ALTER_SYNC_STATE_SET rules."""

    members: tuple[int, ...] = (MASTER_ID,)
    epoch: int = 1
    refused: list[str] = field(default_factory=list)

    def answer(self, call: ControllerCall, now: int) -> Answered:
        def ok(header: object, body: Optional[bytes]) -> Answered:
            return Answered(call.rid, now, RC.SUCCESS, "", to_ext_fields(header), body)

        if call.code == Q.CONTROLLER_GET_METADATA_INFO:
            return ok(GetMetaDataResponseHeader("g", "n1", C0, True), None)
        if call.code == Q.CONTROLLER_GET_REPLICA_INFO:
            return ok(GetReplicaInfoResponseHeader(MASTER_ID, ME, EPOCH),
                      SyncStateSetBody(self.members, self.epoch).encode())
        assert call.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET and call.body is not None
        asked = call.body
        why, code = None, RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
        if set(asked.sync_state_set) == set(self.members):
            why = "equal to the current set"
        elif asked.sync_state_set_epoch != self.epoch:
            why = f"fenced: syncStateSetEpoch {asked.sync_state_set_epoch}, not {self.epoch}"
            code = RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        elif MASTER_ID not in asked.sync_state_set:
            why = "no master"
        if why is not None:
            self.refused.append(why)
            return Answered(call.rid, now, code, why, {}, None)
        self.members, self.epoch = tuple(sorted(asked.sync_state_set)), self.epoch + 1
        return ok(AlterSyncStateSetResponseHeader(self.epoch), SyncStateSetBody(self.members, self.epoch).encode())


class View:
    """The ReplicasManager's view of the HA service (``HAView``)."""

    def __init__(self, sync: SyncStateSet) -> None:
        self.sync = sync

    def last_epoch(self) -> int:
        return EPOCH

    def max_phy_offset(self) -> int:
        return 0

    def confirm_offset(self) -> int:
        return 0

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
        return self.sync.maybe_shrink(float(now_ms))[0]


class World:
    """One empty master (epoch 3 from offset 0), its ReplicasManager and controller, and slaves."""

    def __init__(self, latency_ms: int = 20) -> None:
        self.master = Replica.with_log(b"", [(EPOCH, 0)])
        self.sync = SyncStateSet(MASTER_ID, ha_max_time_slave_not_catchup_ms=NOT_CATCHUP_MS)
        self.controller = Controller()
        self.latency_ms = latency_ms
        self.now = 1000
        self.in_flight: list[tuple[int, ControllerCall]] = []  # (due, call)
        self.pumps: dict[int, Pump] = {}
        self.seen_acks: dict[int, int] = {}
        self.history: list[tuple[int, tuple[int, ...]]] = []  # (time, the set the master applied)
        self.rm = ReplicasManager(CFG, View(self.sync))
        self._become_master()

    def _become_master(self) -> None:
        rm, now = self.rm, self.now
        self._carry(rm.handle(Start(now, BrokerMetadata("c", "b", MASTER_ID), None)))
        for call in self._take_calls():  # probe, register, elect: answered at once
            self._answer_setup(call)
        assert rm.state is State.RUNNING and rm.is_master

    def _answer_setup(self, call: ControllerCall) -> None:
        now = self.now
        if call.code == Q.CONTROLLER_REGISTER_BROKER:
            out = self.rm.handle(Answered(call.rid, now, RC.SUCCESS, "", to_ext_fields(
                RegisterBrokerToControllerResponseHeader("c", "b")), SyncStateSetBody((), 0).encode()))
        elif call.code == Q.CONTROLLER_ELECT_MASTER:
            out = self.rm.handle(Answered(call.rid, now, RC.SUCCESS, "", to_ext_fields(
                ElectMasterResponseHeader(MASTER_ID, ME, EPOCH, 1)), ElectMasterResponseBody((MASTER_ID,)).encode()))
        else:
            out = self.rm.handle(self.controller.answer(call, now))
        self._carry(out)
        for nxt in self._take_calls():
            self._answer_setup(nxt)

    def _take_calls(self) -> list[ControllerCall]:
        calls = [c for _, c in self.in_flight]
        self.in_flight.clear()
        return calls

    def _carry(self, actions: list[Action]) -> None:
        """The driver: calls go out (answered ``latency_ms`` later), answers become the HA set."""
        for a in actions:
            if isinstance(a, ControllerCall):
                self.in_flight.append((self.now + self.latency_ms, a))
            elif isinstance(a, ChangeSyncStateSet):
                self.sync.set_sync_state_set(a.sync_state_set, self.master.max_offset)
                self.history.append((self.now, tuple(sorted(a.sync_state_set))))

    def connect(self, slave_id: int) -> None:
        pump = Pump.start(self.master, Replica(), slave_id)
        pump.m.heartbeat_interval_ms = pump.s.heartbeat_interval_ms = HEARTBEAT_MS
        pump.now = self.now
        self.pumps[slave_id] = pump
        self.seen_acks[slave_id] = 0

    def _ha(self) -> None:
        """Each connection's bytes, then its new acks (``AutoSwitchHAService``'s reader)."""
        for slave_id, pump in self.pumps.items():
            pump.now = self.now
            pump.run()
            assert pump.closed is None, pump.closed
            if pump.m.slave is not None:
                self.sync.connection_added(slave_id)
            for ack in pump.acked[self.seen_acks[slave_id]:]:
                proposal = self.sync.on_slave_ack(ack.slave_id, ack.offset, ack.caught_up_ms,
                                                  max_phy_offset=self.master.max_offset,
                                                  leader_epoch=self.master.epochs.last_entry())
                if proposal is not None:
                    self._carry(self.rm.handle(SyncStateSetProposed(self.now, proposal)))
            self.seen_acks[slave_id] = len(pump.acked)
            if pump.m.transfer_from is not None and not self.master.get_data(pump.m.transfer_from):
                self.sync.update_connection_last_caught_up_time(slave_id, float(self.now))  # the writer's rule

    def step(self, ms: int = 10) -> None:
        self.now += ms
        for pump in self.pumps.values():
            pump.now = float(self.now)
            pump.fire_timers()
        self._ha()
        due = [(t, c) for t, c in self.in_flight if t <= self.now]
        self.in_flight = [(t, c) for t, c in self.in_flight if t > self.now]
        for _, call in due:
            self._carry(self.rm.handle(self.controller.answer(call, self.now)))
        self._carry(self.rm.handle(Tick(self.now)))

    def run_for(self, ms: int) -> None:
        end = self.now + ms
        while self.now < end:
            self.step()




def _grows(history: list[tuple[int, tuple[int, ...]]]) -> bool:
    return all(set(a) <= set(b) for (_, a), (_, b) in zip(history, history[1:]))


@pytest.mark.parametrize("latency_ms", [20, 700])  # 700: heartbeats re-ack while the first alteration is out
@pytest.mark.parametrize("first", [2, 3])
def test_two_slaves_joining_an_empty_master_are_both_in_the_set_after_two_alterations(latency_ms: int,
                                                                                    first: int) -> None:
    w = World(latency_ms)
    w.connect(first)
    w.connect(5 - first)
    w.run_for(2 * latency_ms + 100)
    assert w.controller.members == (1, 2, 3), (w.history, w.controller.refused)
    assert w.controller.epoch == 3 and w.controller.refused == []  # two alterations, both accepted
    assert w.history[-1] == (w.history[-1][0], (1, 2, 3)) and _grows(w.history), w.history
    assert w.sync.get_local_sync_state_set() == {1, 2, 3} and not w.sync.synchronizing
    # and it stays whole: both slaves re-ack every heartbeat, the shrink check runs every 500 ms
    w.run_for(int(2 * NOT_CATCHUP_MS))
    assert w.controller.members == (1, 2, 3) and w.controller.epoch == 3, w.history


def test_a_shrink_while_an_expansion_is_out_keeps_the_expansion() -> None:
    """The ReplicasManager sends only the latest waiting proposal: each one holds those before it."""
    s = SyncStateSet(MASTER_ID, ha_max_time_slave_not_catchup_ms=NOT_CATCHUP_MS)
    s.set_sync_state_set({1, 2}, 0)
    for sid in (2, 3):
        s.connection_added(sid)
    s.update_connection_last_caught_up_time(2, 0.0)
    leader = EpochEntry(EPOCH, 0)
    assert s.on_slave_ack(3, 0, 1000.0, max_phy_offset=0, leader_epoch=leader) == {1, 2, 3}
    assert s.maybe_shrink(NOT_CATCHUP_MS + 1) == ({1, 3}, True)  # 2 lags: out, 3 stays proposed
    assert s.connection_removed(3) == {1}
    assert s.get_local_sync_state_set() == {1, 2}  # nothing agreed yet
    # a slave already proposed is proposed again on its next ack (Apache's retry of a lost alteration)
    t = SyncStateSet(MASTER_ID)
    t.set_sync_state_set({1}, 0)
    t.connection_added(2)
    assert t.on_slave_ack(2, 0, 1.0, max_phy_offset=0, leader_epoch=leader) == {1, 2}
    assert t.on_slave_ack(2, 0, 2.0, max_phy_offset=0, leader_epoch=leader) == {1, 2}


def test_a_slave_in_handshake_is_looked_at_again_every_heartbeat_interval() -> None:
    """A driver sleeping until next_deadline is not woken by the master's handshake: the deadline
    it read at connect must come by the first re-ack, not after haHousekeepingInterval."""
    m = SlaveMachine(2, heartbeat_interval_ms=500, housekeeping_interval_ms=20000)
    m.connected(1000.0, 0)
    assert m.next_deadline() == 1500.0
    assert m.poll(1500.0) is None and m.next_deadline() == 2000.0  # still in HANDSHAKE: no busy loop
    # the slave in an empty-log world: the handshake arrives, the first ack goes, the re-ack follows
    p = Pump.start(Replica.with_log(b"", [(EPOCH, 0)]), Replica(), 2)
    p.s.heartbeat_interval_ms = 500
    p.s.look_again_ms = p.now + 500
    p.run()
    assert len(p.acked) == 1
    wake = p.s.next_deadline()
    assert wake is not None and wake <= p.now + 500
    p.tick(wake - p.now)
    p.tick(max(1.0, (p.s.next_deadline() or 0) - p.now + 1))
    assert len(p.acked) == 2 and p.acked[1].caught_up_ms is not None


@pytest.mark.timeout(30)
async def test_a_lost_proposal_on_an_empty_master_is_repeated_at_the_next_heartbeat(tmp_path: Path) -> None:
    """Real sockets: an empty master, two slaves; the controller takes only the first proposal. The
    other slave is proposed again within heartbeats (it took haHousekeepingInterval, 20 s)."""
    master = Node(tmp_path / "m", MASTER_ID)
    master.become_master(EPOCH)
    nodes = [Node(tmp_path / f"s{i}", i) for i in (2, 3)]
    sync = SyncStateSet(MASTER_ID, ha_max_time_slave_not_catchup_ms=NOT_CATCHUP_MS)
    sync.set_sync_state_set({MASTER_ID}, 0)
    proposals: list[frozenset[int]] = []
    fast = settings(ha_send_heartbeat_interval=200, ha_housekeeping_interval=20000)
    service = AutoSwitchHAService(master.cl, master.epochs, sync, fast, host="127.0.0.1",
                                  on_sync_state_set_changed=proposals.append)
    clients: list[AutoSwitchHAClient] = []
    try:
        await service.start()
        for n in nodes:
            c = AutoSwitchHAClient(n.cl, n.epochs, n.broker_id, fast, master_address=f"127.0.0.1:{service.port}")
            await c.start()
            clients.append(c)
        await wait_until(lambda: len(sync.acks) == 2 and min(sync.acks.values()) == 0, 5.0, "both first acks")
        assert proposals
        service.set_sync_state_set(proposals[0])  # the controller agreed to the first proposal only
        agreed = len(proposals)
        await wait_until(lambda: any(p == {1, 2, 3} for p in proposals[agreed:]), 5.0,
                         "the other slave proposed again")
        service.set_sync_state_set(frozenset({1, 2, 3}))
        assert sync.get_sync_state_set() == {1, 2, 3}
        assert master.cl.max_offset == 0  # not a byte was written: only heartbeats made the acks
    finally:
        for c in clients:
            await c.shutdown()
        await service.shutdown()
        for n in [master, *nodes]:
            n.close()

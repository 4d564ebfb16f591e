"""ReplicasManager (broker/ha/autoswitch/replicas_manager.py) as tables of (state, event) ->
(state, actions): Apache 5.3.3's register sequence, brokerElect, the role-change and stale-epoch
rules, SyncStateSet alteration, heartbeats, and the bounded rerouting on a controller leader change.
Heartbeats are left out of the action lists (their own test checks them); Problem texts are
compared by type only."""
from __future__ import annotations

from typing import Any, Callable, Optional

import pytest

from broker.ha.autoswitch.metadata_file import BrokerMetadata, TempBrokerMetadata
from broker.ha.autoswitch.replicas_manager import ReplicasManager
from broker.ha.autoswitch.sync_state import SyncStateSet as HASyncStateSet
from broker.ha.autoswitch.replicas_messages import (
    Action, Answered, CallFailed, ChangeSyncStateSet, ChangeToMaster, ChangeToSlave, ClearTempMetadata,
    ControllerCall, Event, FileDone, Problem, RegisterState, ReplicasConfig, RoleChangeNotified, SendHeartbeat,
    SetFenced, SetLocalBrokerId, Shutdown, Start, State, SyncStateSetProposed, Tick, WriteMetadata,
    WriteTempMetadata,
)
from controller.bodies import ElectMasterResponseBody, SyncStateSet
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from controller.headers import (
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, ElectMasterRequestHeader, ElectMasterResponseHeader,
    EmptyHeader, GetMetaDataResponseHeader, GetNextBrokerIdRequestHeader, GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader, GetReplicaInfoResponseHeader, RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader, to_ext_fields,
)

C0, C1, C2 = "10.0.0.1:9878", "10.0.0.2:9878", "10.0.0.3:9878"
ME, OTHER, THIRD = "10.0.1.1:10911", "10.0.1.2:10911", "10.0.1.3:10911"
CFG = ReplicasConfig("c", "b", ME, (C0, C1, C2))
META = BrokerMetadata("c", "b", 1)


class HA:
    def __init__(self, shrink: frozenset[int] = frozenset()) -> None:
        self.shrink = shrink

    def last_epoch(self) -> int:
        return 7

    def max_phy_offset(self) -> int:
        return 4096

    def confirm_offset(self) -> int:
        return 2048

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
        return self.shrink


def shown(actions: list[Action]) -> list[Action]:
    return [Problem("") if isinstance(a, Problem) else a for a in actions if not isinstance(a, SendHeartbeat)]


def call(rid: int, address: str, code: int, header: Any, body: Optional[SyncStateSet] = None) -> ControllerCall:
    return ControllerCall(rid, address, code, header, body)


def ans(rid: int, header: Any = None, body: Optional[bytes] = None, code: int = RC.SUCCESS, now: int = 0,
        fields: Optional[dict[str, str]] = None) -> Answered:
    f = dict(fields or {})
    if header is not None:
        f.update(to_ext_fields(header))
    return Answered(rid, now, code, "remark", f, body)


def sse(members: tuple[int, ...], epoch: int) -> bytes:
    return SyncStateSet(members, epoch).encode()


def leader_is(address: str) -> GetMetaDataResponseHeader:
    return GetMetaDataResponseHeader("g", "n1", address, True)


def last_rid(rm: ReplicasManager) -> int:
    return rm._rid


# ------------------------------------------------------------------------------ setups
def initial() -> ReplicasManager:
    rm = ReplicasManager(CFG, HA())
    rm.handle(Start(0, None, None))
    return rm


def next_id_asked() -> ReplicasManager:
    rm = initial()
    rm.handle(ans(1, leader_is(C1)))
    return rm


def temp_written() -> ReplicasManager:
    rm = next_id_asked()
    rm.handle(ans(2, GetNextBrokerIdResponseHeader("c", "b", 1), now=7))
    rm.handle(FileDone(7))
    return rm  # rid 3: APPLY


def applied() -> ReplicasManager:
    rm = temp_written()
    rm.handle(ans(3))
    return rm  # WriteMetadata pending


def meta_written() -> ReplicasManager:
    rm = applied()
    rm.handle(FileDone(8))
    return rm  # ClearTempMetadata pending


def registering() -> ReplicasManager:
    """brokerIdentity on disk: rid 1 probe, rid 2 REGISTER to C1."""
    rm = ReplicasManager(CFG, HA())
    rm.handle(Start(0, META, None))
    rm.handle(ans(1, leader_is(C1)))
    return rm


def electing() -> ReplicasManager:
    rm = registering()
    rm.handle(ans(2, RegisterBrokerToControllerResponseHeader("c", "b"), sse((), 0)))
    return rm  # rid 3: ELECT


def elect_answer(master: int, address: str, epoch: int, members: tuple[int, ...], sse_epoch: int,
                 code: int = RC.SUCCESS, now: int = 0) -> Answered:
    return ans(3, ElectMasterResponseHeader(master, address, epoch, sse_epoch),
               ElectMasterResponseBody(members).encode(), code, now)


def running_slave() -> ReplicasManager:
    rm = electing()
    rm.handle(elect_answer(2, OTHER, 3, (2,), 1))
    return rm


def running_master(shrink: frozenset[int] = frozenset()) -> ReplicasManager:
    rm = electing()
    rm.ha = HA(shrink)
    rm.handle(elect_answer(1, ME, 3, (1,), 1))
    return rm


def notify(master: Optional[int], address: Optional[str], epoch: int, members: tuple[int, ...],
           sse_epoch: int) -> RoleChangeNotified:
    f = {"masterEpoch": str(epoch), "syncStateSetEpoch": str(sse_epoch)}
    if master is not None:
        f["masterBrokerId"] = str(master)
    if address is not None:
        f["masterAddress"] = address
    return RoleChangeNotified(0, f, sse(members, sse_epoch))


def replica_info(rid: int, master: Optional[int], address: Optional[str], epoch: int,
                 members: tuple[int, ...], sse_epoch: int) -> Answered:
    return ans(rid, GetReplicaInfoResponseHeader(master, address, epoch), sse(members, sse_epoch))


def polled(make: Callable[[], ReplicasManager]) -> Callable[[], ReplicasManager]:
    """The machine after its first CONTROLLER_GET_REPLICA_INFO went out (rid 5, to C1; rid 4 is the
    first periodic CONTROLLER_GET_METADATA_INFO, due at the same time)."""
    def setup() -> ReplicasManager:
        rm = make()
        out = rm.handle(Tick(CFG.first_task_delay_ms))
        assert shown(out) == [call(4, C0, Q.CONTROLLER_GET_METADATA_INFO, EmptyHeader()),
                              call(5, C1, Q.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader("b"))]
        return rm
    return setup


def pushed(make: Callable[[], ReplicasManager]) -> Callable[[], ReplicasManager]:
    """The machine after a 1008 push made it ask CONTROLLER_GET_REPLICA_INFO (rid 4, to C1)."""
    def setup() -> ReplicasManager:
        rm = make()
        assert shown(rm.handle(notify(1, ME, 99, (1,), 99))) == [call(4, C1, Q.CONTROLLER_GET_REPLICA_INFO,
                                                                      GetReplicaInfoRequestHeader("b"))]
        return rm
    return setup


REGISTER_ME = RegisterBrokerToControllerRequestHeader("c", "b", 1, ME)
ELECT_ME = ElectMasterRequestHeader.of_broker_trigger("c", "b", 1)
REPLICA_INFO = GetReplicaInfoRequestHeader("b")

# (name, setup, event, state after, actions)
ROWS: list[tuple[str, Callable[[], ReplicasManager], Event, State, list[Action]]] = [
    ("start with nothing on disk: fenced, ask the first controller for the leader",
     lambda: ReplicasManager(CFG, HA()), Start(0, None, None), State.INITIAL,
     [SetFenced(True), call(1, C0, Q.CONTROLLER_GET_METADATA_INFO, EmptyHeader())]),
    ("the leader is named: GET_NEXT_BROKER_ID to it",
     initial, ans(1, leader_is(C1)), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [call(2, C1, Q.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader("c", "b"))]),
    ("no leader named: ask the next controller",
     initial, ans(1, GetMetaDataResponseHeader("g")), State.INITIAL,
     [call(2, C1, Q.CONTROLLER_GET_METADATA_INFO, EmptyHeader())]),
    ("no answer: ask the next controller",
     initial, CallFailed(1, 0), State.INITIAL, [call(2, C1, Q.CONTROLLER_GET_METADATA_INFO, EmptyHeader())]),
    ("next id: the temp file first, with the check code address;time",
     next_id_asked, ans(2, GetNextBrokerIdResponseHeader("c", "b", 1), now=7),
     State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [WriteTempMetadata(TempBrokerMetadata("c", "b", 1, f"{ME};7"))]),
    ("temp file durable: APPLY_BROKER_ID with its id and check code",
     lambda: (lambda rm: (rm.handle(ans(2, GetNextBrokerIdResponseHeader("c", "b", 1), now=7)), rm)[1])(
         next_id_asked()), FileDone(7), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [call(3, C1, Q.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader("c", "b", 1, f"{ME};7"))]),
    ("id granted: brokerIdentity written", temp_written, ans(3), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [WriteMetadata(META)]),
    ("brokerIdentity durable: the id is known, the temp file goes",
     applied, FileDone(8), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [SetLocalBrokerId(1), ClearTempMetadata()]),
    ("temp file gone: REGISTER_BROKER", meta_written, FileDone(8), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [call(4, C1, Q.CONTROLLER_REGISTER_BROKER, REGISTER_ME)]),
    ("id refused: the temp file is cleared (the sequence starts again)",
     temp_written, ans(3, code=RC.CONTROLLER_BROKER_ID_INVALID), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [Problem(""), ClearTempMetadata()]),
    ("apply unanswered: the temp file stays, the next controller is asked",
     temp_written, CallFailed(3, 7), State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
     [call(4, C2, Q.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader("c", "b", 1, f"{ME};7"))]),
    ("registered, no master: brokerElect", registering,
     ans(2, RegisterBrokerToControllerResponseHeader("c", "b"), sse((), 0)), State.REGISTER_TO_CONTROLLER_DONE,
     [call(3, C1, Q.CONTROLLER_ELECT_MASTER, ELECT_ME)]),
    ("registered, another master: slave, running", registering,
     ans(2, RegisterBrokerToControllerResponseHeader("c", "b", 2, OTHER, 3, 1), sse((2,), 1)), State.RUNNING,
     [ChangeToSlave(OTHER, 3, 2), SetFenced(False)]),
    ("registered, this broker is master: master, running", registering,
     ans(2, RegisterBrokerToControllerResponseHeader("c", "b", 1, ME, 3, 1), sse((1,), 1)), State.RUNNING,
     [ChangeSyncStateSet(frozenset({1}), 1), ChangeToMaster(3, frozenset({1}), 1), SetFenced(False)]),
    ("elected itself", electing, elect_answer(1, ME, 1, (1,), 1), State.RUNNING,
     [ChangeSyncStateSet(frozenset({1}), 1), ChangeToMaster(1, frozenset({1}), 1), SetFenced(False)]),
    ("another master still exists", electing, elect_answer(2, OTHER, 2, (2,), 1, RC.CONTROLLER_MASTER_STILL_EXIST),
     State.RUNNING, [ChangeToSlave(OTHER, 2, 2), SetFenced(False)]),
    ("election failed: stay, retry later", electing, ans(3, code=RC.CONTROLLER_ELECT_MASTER_FAILED),
     State.REGISTER_TO_CONTROLLER_DONE, [Problem("")]),
    ("election retried after retry_interval_ms",
     lambda: (lambda rm: (rm.handle(ans(3, code=RC.CONTROLLER_ELECT_MASTER_FAILED)), rm)[1])(electing()),
     Tick(CFG.retry_interval_ms), State.REGISTER_TO_CONTROLLER_DONE,
     [call(4, C1, Q.CONTROLLER_ELECT_MASTER, ELECT_ME), call(5, C0, Q.CONTROLLER_GET_METADATA_INFO, EmptyHeader())]),
    # ---------------------------------------------------------------- role changes and stale epochs (slave of 2, epoch 3)
    # a 1008 push is a wake-up: whatever it says, only a CONTROLLER_GET_REPLICA_INFO goes out (issue 27)
    ("push naming this slave master at epoch 99: only the query", running_slave, notify(1, ME, 99, (1,), 99),
     State.RUNNING, [call(4, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]),
    ("push naming no master: only the query", running_slave, notify(None, None, 9, (), 9), State.RUNNING,
     [call(4, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]),
    ("undecodable push: only the query", running_slave, RoleChangeNotified(0, {"masterEpoch": "x"}, b"{garbage"),
     State.RUNNING, [call(4, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]),
    ("push before RUNNING: nothing (the elect sequence is asking)", electing, notify(1, ME, 99, (1,), 99),
     State.REGISTER_TO_CONTROLLER_DONE, []),
    # ... and the controller's answer drives the role (slave of 2, epoch 3)
    ("pushed, answer: same epoch is stale", pushed(running_slave), replica_info(4, 3, THIRD, 3, (3,), 2),
     State.RUNNING, []),
    ("pushed, answer: older epoch is stale", pushed(running_slave), replica_info(4, 1, ME, 2, (1,), 2),
     State.RUNNING, []),
    ("pushed, answer: newer epoch, this broker: master", pushed(running_slave), replica_info(4, 1, ME, 4, (1,), 2),
     State.RUNNING, [ChangeSyncStateSet(frozenset({1}), 2), ChangeToMaster(4, frozenset({1}), 2)]),
    ("pushed, answer: newer epoch, same master", pushed(running_slave), replica_info(4, 2, OTHER, 4, (2,), 2),
     State.RUNNING, [ChangeToSlave(OTHER, 4, 2, master_unchanged=True)]),
    ("pushed, answer: newer epoch, another master", pushed(running_slave), replica_info(4, 3, THIRD, 4, (3,), 2),
     State.RUNNING, [ChangeToSlave(THIRD, 4, 3)]),
    ("replica info: same epoch on a slave", polled(running_slave), replica_info(5, 2, OTHER, 3, (2, 1), 2),
     State.RUNNING, []),
    ("replica info: newer epoch, another master", polled(running_slave), replica_info(5, 3, THIRD, 5, (3,), 2),
     State.RUNNING, [ChangeToSlave(THIRD, 5, 3)]),
    ("replica info: newer epoch, no master: brokerElect", polled(running_slave),
     replica_info(5, None, None, 5, (), 2), State.RUNNING, [call(6, C1, Q.CONTROLLER_ELECT_MASTER, ELECT_ME)]),
    ("replica info: metadata gone: register again", polled(running_slave),
     ans(5, code=RC.CONTROLLER_BROKER_METADATA_NOT_EXIST), State.RUNNING,
     [call(6, C1, Q.CONTROLLER_REGISTER_BROKER, REGISTER_ME)]),
    # ---------------------------------------------------------------- the master (epoch 3, SyncStateSet {1} epoch 1)
    ("replica info: same epoch, newer SyncStateSet", polled(running_master), replica_info(5, 1, ME, 3, (1, 2), 2),
     State.RUNNING, [ChangeSyncStateSet(frozenset({1, 2}), 2)]),
    ("replica info: same epoch, same SyncStateSet epoch", polled(running_master),
     replica_info(5, 1, ME, 3, (1, 2), 1), State.RUNNING, []),
    ("push naming another master to the master: only the query", running_master, notify(2, OTHER, 99, (2,), 99),
     State.RUNNING, [call(4, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]),
    ("pushed, answer: same epoch on the master", pushed(running_master), replica_info(4, 1, ME, 3, (1,), 1),
     State.RUNNING, []),
    ("pushed, answer: newer epoch, still this master", pushed(running_master), replica_info(4, 1, ME, 4, (1,), 2),
     State.RUNNING,
     [ChangeSyncStateSet(frozenset({1}), 2), ChangeToMaster(4, frozenset({1}), 2, master_unchanged=True)]),
    ("pushed, answer: newer epoch, another master", pushed(running_master), replica_info(4, 2, OTHER, 4, (2,), 2),
     State.RUNNING, [ChangeToSlave(OTHER, 4, 2)]),
    ("the HA service proposes a set: ALTER_SYNC_STATE_SET", running_master,
     SyncStateSetProposed(0, frozenset({1, 2})), State.RUNNING,
     [call(4, C1, Q.CONTROLLER_ALTER_SYNC_STATE_SET, AlterSyncStateSetRequestHeader("b", 1, 3),
           SyncStateSet((1, 2), 1))]),
    ("a slave proposes nothing", running_slave, SyncStateSetProposed(0, frozenset({1, 2})), State.RUNNING, []),
    ("shutdown: nothing more", running_master, Shutdown(0), State.SHUTDOWN, []),
]


@pytest.mark.parametrize("name, setup, event, state, actions", ROWS, ids=[r[0] for r in ROWS])
def test_table(name: str, setup: Callable[[], ReplicasManager], event: Event, state: State,
               actions: list[Action]) -> None:
    rm = setup()
    assert shown(rm.handle(event)) == actions
    assert rm.state is state


# ------------------------------------------------------------------------------ beyond one row
def test_the_master_sends_one_alteration_at_a_time_and_the_latest_waiting_one_after() -> None:
    rm = running_master()
    first = rm.handle(SyncStateSetProposed(0, frozenset({1, 2})))
    assert [a.rid for a in first if isinstance(a, ControllerCall)] == [4]
    assert rm.handle(SyncStateSetProposed(0, frozenset({1, 2, 3}))) == []
    assert rm.handle(SyncStateSetProposed(0, frozenset({1, 3}))) == []
    out = shown(rm.handle(ans(4, None, sse((1, 2), 2))))
    assert out == [ChangeSyncStateSet(frozenset({1, 2}), 2),
                   call(5, C1, Q.CONTROLLER_ALTER_SYNC_STATE_SET, AlterSyncStateSetRequestHeader("b", 1, 3),
                        SyncStateSet((1, 3), 2))]


def test_becoming_master_checks_the_set_at_once() -> None:
    rm = electing()
    rm.ha = HA(frozenset({2}))  # the HA service already counts slave 2 in
    out = shown(rm.handle(elect_answer(1, ME, 3, (1,), 1, now=10)))
    assert out == [ChangeSyncStateSet(frozenset({1}), 1), ChangeToMaster(3, frozenset({1}), 1), SetFenced(False)]
    # the check runs on the next event, once the driver has carried the change out
    assert shown(rm.handle(Tick(11))) == [call(4, C1, Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                                               AlterSyncStateSetRequestHeader("b", 1, 3), SyncStateSet((1, 2), 1))]


def test_the_periodic_check_reports_a_shrunk_set_with_the_master_in_it() -> None:
    rm = running_master()
    rm.sync_state_set, rm.sync_state_set_epoch = frozenset({1, 2, 3}), 2
    rm.ha = HA(frozenset({2}))  # maybeShrinkSyncStateSet's answer, without the master
    out = shown(rm.handle(Tick(CFG.first_task_delay_ms)))
    alters = [a for a in out if isinstance(a, ControllerCall) and a.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET]
    assert alters and alters[0].body == SyncStateSet((1, 2), 2)


def test_heartbeats_carry_apaches_fields_to_every_controller_on_the_interval() -> None:
    rm = registering()  # the id is known from brokerIdentity: heartbeats have started
    hb = [a for a in rm.handle(Tick(CFG.broker_heartbeat_interval_ms - 1)) if isinstance(a, SendHeartbeat)]
    assert hb == []
    hb = [a for a in rm.handle(Tick(CFG.broker_heartbeat_interval_ms)) if isinstance(a, SendHeartbeat)]
    assert [a.address for a in hb] == [C0, C1, C2]
    h = hb[0].header
    assert (h.cluster_name, h.broker_name, h.broker_addr, h.broker_id) == ("c", "b", ME, 1)
    assert (h.epoch, h.max_offset, h.confirm_offset) == (7, 4096, 2048)
    assert (h.heartbeat_timeout_mills, h.election_priority) == (10000, 2 ** 31 - 1)


def test_no_heartbeat_before_the_broker_id_is_known() -> None:
    rm = next_id_asked()
    assert [a for a in rm.handle(Tick(60_000)) if isinstance(a, SendHeartbeat)] == []


def test_not_leader_naming_the_leader_is_resent_there() -> None:
    rm = polled(running_slave)()
    out = rm.handle(ans(5, code=RC.CONTROLLER_NOT_LEADER, fields={"controllerLeaderAddress": C2}))
    assert shown(out) == [call(6, C2, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]
    assert rm.leader == C2


def test_not_leader_naming_nobody_and_no_answer_try_the_next_controller() -> None:
    rm = polled(running_slave)()
    out = rm.handle(ans(5, code=RC.CONTROLLER_NOT_LEADER))
    assert rm.leader is None
    (c6,) = [a for a in out if isinstance(a, ControllerCall)]
    out = rm.handle(CallFailed(6, 0))
    (c7,) = [a for a in out if isinstance(a, ControllerCall)]
    assert (c6.address, c7.address) == (C2, C0)  # C1 said no, then C2 did not answer
    assert rm.handle(CallFailed(7, 0)) == []  # each controller asked once: the poll waits for its period


def test_a_silent_call_times_out_by_itself() -> None:
    rm = polled(running_slave)()
    sent = CFG.first_task_delay_ms
    assert [a for a in rm.handle(Tick(sent + CFG.request_timeout_ms - 1)) if isinstance(a, ControllerCall)] == []
    rm.handle(ans(4, leader_is(C1)))  # the metadata probe sent with it is answered
    out = [a for a in rm.handle(Tick(sent + CFG.request_timeout_ms)) if isinstance(a, ControllerCall)]
    assert [(a.code, a.address) for a in out] == [(Q.CONTROLLER_GET_REPLICA_INFO, C2)]


def test_rerouting_is_bounded_and_a_failed_register_step_is_retried_later() -> None:
    rm = next_id_asked()
    sent = 0
    rid = 2
    for _ in range(20):  # every controller says "not me, ask C1"
        out = [a for a in rm.handle(ans(rid, code=RC.CONTROLLER_NOT_LEADER, fields={"controllerLeaderAddress": C1}))
               if isinstance(a, ControllerCall)]
        if not out:
            break
        sent += 1
        rid = out[0].rid
    assert 0 < sent <= CFG.max_redirects + len(CFG.controller_addresses)
    assert rm.state is State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE
    retry = [a for a in rm.handle(Tick(CFG.register_backoff_ms)) if isinstance(a, ControllerCall)]
    assert [a.code for a in retry] == [Q.CONTROLLER_GET_NEXT_BROKER_ID]


def _calls(actions: list[Action]) -> list[ControllerCall]:
    """The calls, without the periodic leader probes."""
    return [a for a in actions if isinstance(a, ControllerCall) and a.code != Q.CONTROLLER_GET_METADATA_INFO]


def test_register_gives_up_for_retry_interval_after_five_attempts() -> None:
    rm = next_id_asked()
    now, rid = 0, 2
    for attempt in range(CFG.register_attempts):
        for _ in range(len(CFG.controller_addresses)):
            out = _calls(rm.handle(CallFailed(rid, now)))
            if not out:
                break
            rid = out[0].rid
        if attempt < CFG.register_attempts - 1:
            now += CFG.register_backoff_ms
            (nxt,) = _calls(rm.handle(Tick(now)))
            rid = nxt.rid
    assert _calls(rm.handle(Tick(now + CFG.retry_interval_ms - 1))) == []
    again = _calls(rm.handle(Tick(now + CFG.retry_interval_ms)))
    assert [a.code for a in again] == [Q.CONTROLLER_GET_NEXT_BROKER_ID]


def test_refused_id_starts_again_from_get_next_broker_id() -> None:
    rm = temp_written()
    rm.handle(ans(3, code=RC.CONTROLLER_BROKER_ID_INVALID))
    assert rm.register_state is RegisterState.INITIAL and rm.temp is None
    assert shown(rm.handle(FileDone(8))) == []
    out = shown(rm.handle(Tick(8 + CFG.register_backoff_ms)))
    assert out == [call(4, C1, Q.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader("c", "b"))]


def test_both_files_on_disk_the_metadata_wins_and_the_temp_file_goes() -> None:
    rm = ReplicasManager(CFG, HA())
    rm.handle(Start(0, META, TempBrokerMetadata("c", "b", 5, f"{ME};1")))
    assert shown(rm.handle(ans(1, leader_is(C0)))) == [SetLocalBrokerId(1), ClearTempMetadata()]
    assert shown(rm.handle(FileDone(0))) == [call(3 - 1, C0, Q.CONTROLLER_REGISTER_BROKER, REGISTER_ME)]


@pytest.mark.parametrize("meta, temp", [
    (BrokerMetadata("other", "b", 1), None), (BrokerMetadata("c", "other", 1), None),
    (None, TempBrokerMetadata("c", "other", 1, f"{ME};1")),
])
def test_files_of_another_broker_stop_the_sequence(meta: Optional[BrokerMetadata],
                                                   temp: Optional[TempBrokerMetadata]) -> None:
    rm = ReplicasManager(CFG, HA())
    rm.handle(Start(0, meta, temp))
    out = rm.handle(ans(1, leader_is(C0)))
    assert [type(a) for a in shown(out)] == [Problem]
    assert rm.broker_id is None
    later = rm.handle(Tick(CFG.retry_interval_ms * 3))
    assert not [a for a in later if isinstance(a, ControllerCall) and a.code != Q.CONTROLLER_GET_METADATA_INFO]


def test_answers_nobody_waits_for_are_dropped() -> None:
    rm = running_slave()
    assert rm.handle(ans(99, GetReplicaInfoResponseHeader(3, THIRD, 9), sse((3,), 9))) == []
    assert rm.master_epoch == 3


def test_the_real_sync_state_shrink_becomes_an_alteration_and_its_answer_the_new_set() -> None:
    ha_set = HASyncStateSet(1, ha_max_time_slave_not_catchup_ms=15000)

    class View(HA):
        def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
            return ha_set.maybe_shrink(now_ms)[0]

    rm = electing()
    rm.ha = View()
    out = rm.handle(elect_answer(1, ME, 3, (1, 2), 1, now=0))
    for a in out:  # the driver: the HA service takes the controller's set
        if isinstance(a, ChangeSyncStateSet):
            ha_set.set_sync_state_set(a.sync_state_set, 0)
    ha_set.update_connection_last_caught_up_time(2, 100)
    assert _calls(rm.handle(Tick(200))) == []  # slave 2 caught up recently: nothing to report
    now = 100 + 15000 + CFG.check_sync_state_set_period_ms
    # behind for more than haMaxTimeSlaveNotCatchup: shrink
    alters = [a for a in _calls(rm.handle(Tick(now))) if a.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET]
    assert alters == [call(alters[0].rid, C1, Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                           AlterSyncStateSetRequestHeader("b", 1, 3), SyncStateSet((1,), 1))]
    assert shown(rm.handle(ans(alters[0].rid, None, sse((1,), 2), now=now))) == [ChangeSyncStateSet(frozenset({1}), 2)]
    assert rm.sync_state_set == frozenset({1})


def test_a_failed_temp_write_retries_from_get_next_broker_id() -> None:
    rm = next_id_asked()
    rm.handle(ans(2, GetNextBrokerIdResponseHeader("c", "b", 1), now=7))
    assert [type(a) for a in shown(rm.handle(FileDone(7, ok=False, reason="disk full")))] == [Problem]
    assert rm.temp is None
    out = _calls(rm.handle(Tick(7 + CFG.register_backoff_ms)))
    assert [a.code for a in out] == [Q.CONTROLLER_GET_NEXT_BROKER_ID]


def test_a_failed_metadata_write_keeps_the_temp_file_and_applies_the_same_id_again() -> None:
    rm = applied()
    assert [type(a) for a in shown(rm.handle(FileDone(8, ok=False)))] == [Problem]
    assert rm.broker_id is None and rm.temp is not None
    out = _calls(rm.handle(Tick(8 + CFG.register_backoff_ms)))
    assert out == [call(out[0].rid, C1, Q.CONTROLLER_APPLY_BROKER_ID,
                        ApplyBrokerIdRequestHeader("c", "b", 1, f"{ME};7"))]


def test_pushes_while_a_query_is_in_flight_coalesce_into_one_follow_up() -> None:
    rm = pushed(running_slave)()  # rid 4 in flight
    for epoch in range(100, 110):  # a flood of forged pushes
        assert shown(rm.handle(notify(1, ME, epoch, (1,), epoch))) == []
    assert (rm.hints.hints, rm.hints.coalesced, rm.hints.dropped) == (11, 1, 9)
    # the answer (nothing new) is taken, then the one follow-up goes out
    assert shown(rm.handle(replica_info(4, 2, OTHER, 3, (2, 1), 2))) == [
        call(5, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]
    assert shown(rm.handle(replica_info(5, 2, OTHER, 3, (2, 1), 2))) == []  # and no more
    assert rm.master_broker_id == 2 and not rm.is_master and rm.master_epoch == 3
    # a failed query also releases the follow-up
    assert shown(rm.handle(notify(1, ME, 99, (1,), 99))) == [call(6, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]
    assert shown(rm.handle(notify(1, ME, 99, (1,), 99))) == []
    out = shown(rm.handle(CallFailed(6, 10)))
    assert out == [call(7, C2, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]  # rerouted: still one in flight
    assert shown(rm.handle(CallFailed(7, 11))) == [call(8, C0, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]
    assert shown(rm.handle(CallFailed(8, 12))) == [call(9, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]


def test_the_poll_is_skipped_while_a_pushed_query_is_in_flight() -> None:
    rm = running_slave()
    assert shown(rm.handle(RoleChangeNotified(1000, {}, None))) == [
        call(4, C1, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]
    # the poll falls due with rid 4 unanswered: only the controller-metadata refresh goes out
    assert shown(rm.handle(Tick(CFG.first_task_delay_ms))) == [call(5, C0, Q.CONTROLLER_GET_METADATA_INFO,
                                                                    EmptyHeader())]
    later = rm.handle(Tick(CFG.first_task_delay_ms + CFG.sync_broker_metadata_period_ms))
    queries = [a for a in later if isinstance(a, ControllerCall) and a.code == Q.CONTROLLER_GET_REPLICA_INFO]
    assert queries == [call(6, C2, Q.CONTROLLER_GET_REPLICA_INFO, REPLICA_INFO)]  # rid 4 timed out: rerouted, not doubled

"""The controller's state machine (Apache 5.3.3 ReplicasInfoManager), table-driven: (state,
request) -> (response code, events). Rules named after docs/en/controller/design.md and
persistent_unique_broker_id.md; handlers never mutate, only apply_event does."""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import pytest

from controller.bodies import SyncStateSet
from controller.codes import ControllerResponseCode as RC
from controller.elect_policy import BrokerLiveInfo, LiveBrokers
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)
from controller.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)
from controller.replicas_info import ControllerResult, ReplicasInfoManager

CLUSTER, NAME = "DefaultCluster", "broker-a"
ADDR = {1: "127.0.0.1:30911", 2: "127.0.0.1:30921", 3: "127.0.0.1:30931"}


def check_code(i: int) -> str:
    return f"{ADDR[i]};170000000000{i}"


def live(*ids: int, **progress: tuple[int, int, int]) -> LiveBrokers:
    """Brokers ``ids`` alive; ``progress["b2"] = (epoch, maxOffset, electionPriority)``."""
    infos = []
    for i in ids:
        epoch, offset, prio = progress.get(f"b{i}", (0, 0, 2 ** 31 - 1))
        infos.append(BrokerLiveInfo(NAME, ADDR[i], i, epoch, offset, prio))
    return LiveBrokers.of(CLUSTER, *infos)


def apply(m: ReplicasInfoManager, result: ControllerResult[Any]) -> None:
    """What every controller does with a committed result: apply its events, from their bytes."""
    for e in result.events:
        back = decode_event(encode_event(e))
        assert back is not None
        m.apply_event(back)


def registered(*ids: int, unclean: bool = False) -> ReplicasInfoManager:
    m = ReplicasInfoManager(enable_elect_unclean_master=unclean)
    for i in ids:
        r = m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, i, check_code(i)))
        assert r.response_code == RC.SUCCESS, r.remark
        apply(m, r)
    return m


def three_in_sync(unclean: bool = False) -> ReplicasInfoManager:
    """Brokers 1, 2, 3; 1 elected first (masterEpoch 1); SyncStateSet {1,2,3} (epoch 2)."""
    m = registered(1, 2, 3, unclean=unclean)
    r = m.elect_master(ElectMasterRequestHeader.of_broker_trigger(CLUSTER, NAME, 1), live(1, 2, 3))
    assert r.response_code == RC.SUCCESS
    apply(m, r)
    r2 = m.alter_sync_state_set(AlterSyncStateSetRequestHeader(NAME, 1, 1), SyncStateSet((1, 2, 3), 1), live(1, 2, 3))
    assert r2.response_code == RC.SUCCESS, r2.remark
    apply(m, r2)
    return m


def state(m: ReplicasInfoManager) -> tuple[Any, ...]:
    s = m.sync_state_set_info_table[NAME]
    return (s.master_broker_id, s.master_epoch, s.sync_state_set_epoch, set(s.sync_state_set))


# ---------------------------------------------------------------- broker ids
def test_a_broker_set_starts_with_id_1_and_next_id_counts_up() -> None:
    m = ReplicasInfoManager()
    assert m.get_next_broker_id(GetNextBrokerIdRequestHeader(CLUSTER, NAME)).response.next_broker_id == 1
    refused = m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 2, check_code(2)))
    assert (refused.response_code, refused.events) == (RC.CONTROLLER_BROKER_ID_INVALID, ())
    r = m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 1, check_code(1)))
    assert r.events == (ApplyBrokerIdEvent(CLUSTER, NAME, ADDR[1], 1, check_code(1)),)
    assert m.get_next_broker_id(GetNextBrokerIdRequestHeader(CLUSTER, NAME)).response.next_broker_id == 1  # not applied yet
    apply(m, r)
    assert m.get_next_broker_id(GetNextBrokerIdRequestHeader(CLUSTER, NAME)).response.next_broker_id == 2


def test_an_id_taken_by_another_broker_is_refused_but_its_owner_may_apply_again() -> None:
    m = registered(1, 2)
    other = m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 2, "10.0.0.9:30911;1"))
    assert (other.response_code, other.events) == (RC.CONTROLLER_BROKER_ID_INVALID, ())
    again = m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 2, check_code(2)))
    assert again.response_code == RC.SUCCESS and len(again.events) == 1
    apply(m, again)  # applying an id already held changes nothing
    assert m.replica_info_table[NAME].next_assign_broker_id == 3


def test_a_null_check_code_is_a_system_error_as_apaches_npe() -> None:
    r = ReplicasInfoManager().apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 1, None))
    assert (r.response_code, r.events) == (RC.SYSTEM_ERROR, ())


# ---------------------------------------------------------------- register
def test_register_unknown_broker_set_or_id_needs_registration() -> None:
    m = registered(1)
    for name, bid in ((("other"), 1), (NAME, 7)):
        r = m.register_broker(RegisterBrokerToControllerRequestHeader(CLUSTER, name, bid, ADDR[1]), live(1))
        assert r.response_code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED


def test_register_tells_the_master_only_when_it_is_alive_and_records_a_new_address() -> None:
    m = three_in_sync()
    r = m.register_broker(RegisterBrokerToControllerRequestHeader(CLUSTER, NAME, 2, ADDR[2]), live(1, 2))
    assert (r.response.master_broker_id, r.response.master_address, r.response.master_epoch) == (1, ADDR[1], 1)
    assert r.events == () and SyncStateSet.decode(r.body or b"") == SyncStateSet((1, 2, 3), 2)
    dead = m.register_broker(RegisterBrokerToControllerRequestHeader(CLUSTER, NAME, 2, "10.9.9.9:1"), live(2))
    assert dead.response.master_broker_id is None
    assert dead.events == (UpdateBrokerAddressEvent(CLUSTER, NAME, "10.9.9.9:1", 2),)
    apply(m, dead)
    assert m.replica_info_table[NAME].broker_address(2) == "10.9.9.9:1"


# ---------------------------------------------------------------- elect master
def test_the_first_broker_to_ask_is_the_first_master() -> None:
    m = registered(1, 2)
    r = m.elect_master(ElectMasterRequestHeader.of_broker_trigger(CLUSTER, NAME, 2), live())
    assert r.response_code == RC.SUCCESS and r.events == (ElectMasterEvent(True, NAME, 2),)
    assert (r.response.master_epoch, r.response.sync_state_set_epoch) == (1, 1)
    apply(m, r)
    assert state(m) == (2, 1, 1, {2})


def _elect(m: ReplicasInfoManager, header: ElectMasterRequestHeader, alive: LiveBrokers) -> tuple[int, tuple[Any, ...], Optional[int]]:
    before = copy.deepcopy(m.sync_state_set_info_table)
    r = m.elect_master(header, alive)
    assert m.sync_state_set_info_table == before  # handlers never mutate
    return r.response_code, r.events, r.response.master_broker_id


CONTROLLER = ElectMasterRequestHeader.of_controller_trigger(NAME)

ELECT_TABLE = [
    ("the old master still alive stays master", CONTROLLER, live(1, 2, 3), RC.CONTROLLER_MASTER_STILL_EXIST, 0, 1),
    ("a dead master is replaced from the SyncStateSet", CONTROLLER, live(2, 3), RC.SUCCESS, 1, 2),
    ("the higher epoch wins", CONTROLLER, live(2, 3, b2=(1, 900, 0), b3=(2, 100, 0)), RC.SUCCESS, 1, 3),
    ("with equal epochs the larger offset wins", CONTROLLER, live(2, 3, b2=(1, 100, 0), b3=(1, 900, 5)), RC.SUCCESS, 1, 3),
    ("offsets 2 GiB apart are still ordered by size", CONTROLLER,
     live(2, 3, b2=(1, 0, 0), b3=(1, 2 ** 31, 0)), RC.SUCCESS, 1, 3),
    ("with equal epoch and offset the lower priority number wins", CONTROLLER,
     live(2, 3, b2=(1, 100, 9), b3=(1, 100, 1)), RC.SUCCESS, 1, 3),
    ("a full tie goes to the smaller id", CONTROLLER, live(2, 3, b2=(1, 1, 1), b3=(1, 1, 1)), RC.SUCCESS, 1, 2),
    ("no live replica in the set: master not available, and recorded", CONTROLLER, live(), RC.CONTROLLER_MASTER_NOT_AVAILABLE, 1, None),
    ("a broker asking while none can be elected fails without an event",
     ElectMasterRequestHeader.of_broker_trigger(CLUSTER, NAME, 2), live(), RC.CONTROLLER_ELECT_MASTER_FAILED, 0, None),
    ("an admin's designated broker is elected", ElectMasterRequestHeader.of_admin_trigger(CLUSTER, NAME, 3),
     live(1, 2, 3), RC.SUCCESS, 1, 3),
    ("an admin's designated broker that is dead: nobody", ElectMasterRequestHeader.of_admin_trigger(CLUSTER, NAME, 3),
     live(1, 2), RC.CONTROLLER_ELECT_MASTER_FAILED, 0, None),
    ("an admin designating the live master: still exists", ElectMasterRequestHeader.of_admin_trigger(CLUSTER, NAME, 1),
     live(1, 2, 3), RC.CONTROLLER_MASTER_STILL_EXIST, 0, 1),
    ("an unregistered broker set must register first", ElectMasterRequestHeader.of_controller_trigger("nope"),
     live(1), RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, 0, None),
]


@pytest.mark.parametrize("rule, header, alive, code, n_events, master", ELECT_TABLE, ids=[t[0] for t in ELECT_TABLE])
def test_elect_master(rule: str, header: ElectMasterRequestHeader, alive: LiveBrokers, code: int,
                      n_events: int, master: Optional[int]) -> None:
    got_code, events, got_master = _elect(three_in_sync(), header, alive)
    assert (got_code, len(events), got_master) == (code, n_events, master)


def test_a_slave_outside_the_sync_state_set_is_never_elected() -> None:
    m = three_in_sync()
    r = m.alter_sync_state_set(AlterSyncStateSetRequestHeader(NAME, 1, 1), SyncStateSet((1, 2), 2), live(1, 2, 3))
    apply(m, r)  # Shrink: 3 fell behind
    got = m.elect_master(CONTROLLER, live(3, b3=(9, 10 ** 12, 0)))
    assert (got.response_code, got.events) == (RC.CONTROLLER_MASTER_NOT_AVAILABLE, (ElectMasterEvent(False, NAME),))
    apply(m, got)
    assert state(m) == (None, 2, 3, {1, 2})  # the master is gone, the set is kept


def test_enable_elect_unclean_master_falls_back_to_any_live_replica() -> None:
    m = three_in_sync(unclean=True)
    apply(m, m.alter_sync_state_set(AlterSyncStateSetRequestHeader(NAME, 1, 1), SyncStateSet((1,), 2), live(1, 2, 3)))
    r = m.elect_master(CONTROLLER, live(3))
    assert (r.response_code, r.response.master_broker_id) == (RC.SUCCESS, 3)


def test_a_new_master_bumps_both_epochs_and_the_set_becomes_the_master() -> None:
    m = three_in_sync()
    r = m.elect_master(CONTROLLER, live(2, 3, b2=(1, 5, 0)))
    assert (r.response.master_epoch, r.response.sync_state_set_epoch, r.response.master_address) == (2, 3, ADDR[2])
    apply(m, r)
    assert state(m) == (2, 2, 3, {2})
    assert b'"brokerAddrs":{1:"127.0.0.1:30911",2:"127.0.0.1:30921",3:"127.0.0.1:30931"}' in (r.body or b"")


# ---------------------------------------------------------------- alter SyncStateSet
ALTER_TABLE = [
    ("Expand/Shrink by the master with current epochs", NAME, 1, 1, ((1, 2), 2), live(1, 2, 3), RC.SUCCESS),
    ("an unknown broker set", "nope", 1, 1, ((1, 2), 2), live(1, 2), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    ("the same set again", NAME, 1, 1, ((3, 2, 1), 2), live(1, 2, 3), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    ("only the current master may alter the set", NAME, 2, 1, ((1, 2), 2), live(1, 2, 3), RC.CONTROLLER_INVALID_MASTER),
    ("an old masterEpoch is refused", NAME, 1, 0, ((1, 2), 2), live(1, 2, 3), RC.CONTROLLER_FENCED_MASTER_EPOCH),
    ("an old syncStateSetEpoch is refused", NAME, 1, 1, ((1, 2), 1), live(1, 2, 3), RC.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
    ("an unregistered replica is refused", NAME, 1, 1, ((1, 4), 2), live(1, 2, 3), RC.CONTROLLER_INVALID_REPLICAS),
    ("a dead replica is refused", NAME, 1, 1, ((1, 2), 2), live(1, 3), RC.CONTROLLER_BROKER_NOT_ALIVE),
    ("a set without the master is refused", NAME, 1, 1, ((2, 3), 2), live(1, 2, 3), RC.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
]


@pytest.mark.parametrize("rule, name, master, master_epoch, body, alive, code", ALTER_TABLE, ids=[t[0] for t in ALTER_TABLE])
def test_alter_sync_state_set(rule: str, name: str, master: int, master_epoch: int, body: tuple[tuple[int, ...], int],
                              alive: LiveBrokers, code: int) -> None:
    m = three_in_sync()
    before = state(m)
    r = m.alter_sync_state_set(AlterSyncStateSetRequestHeader(name, master, master_epoch), SyncStateSet(*body), alive)
    assert r.response_code == code, r.remark
    assert state(m) == before
    if code == RC.SUCCESS:
        assert r.events == (AlterSyncStateSetEvent(NAME, body[0]),) and r.response.new_sync_state_set_epoch == 3
        assert r.body == b'{"syncStateSet":[1,2],"syncStateSetEpoch":3}'
        apply(m, r)
        assert state(m) == (1, 1, 3, {1, 2})
    else:
        assert r.events == ()


# ---------------------------------------------------------------- replica info, sync state data
def test_get_replica_info() -> None:
    m = three_in_sync()
    r = m.get_replica_info(GetReplicaInfoRequestHeader(NAME))
    assert (r.response.master_broker_id, r.response.master_address, r.response.master_epoch) == (1, ADDR[1], 1)
    assert r.body == b'{"syncStateSet":[1,2,3],"syncStateSetEpoch":2}'
    assert m.get_replica_info(GetReplicaInfoRequestHeader("nope")).response_code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST


def test_get_sync_state_data_body() -> None:
    m = three_in_sync()
    apply(m, m.alter_sync_state_set(AlterSyncStateSetRequestHeader(NAME, 1, 1), SyncStateSet((1, 2), 2), live(1, 2, 3)))
    r = m.get_sync_state_data([NAME, "nope"], live(1, 3))
    rep = '{"alive":%s,"brokerAddress":"%s","brokerId":%d,"brokerName":"broker-a"}'
    assert r.body == ('{"replicasInfoTable":{"broker-a":{"inSyncReplicas":[%s,%s],"masterAddress":"%s",'
                      '"masterBrokerId":1,"masterEpoch":1,"notInSyncReplicas":[%s],"syncStateSetEpoch":3}}}' % (
                          rep % ("true", ADDR[1], 1), rep % ("false", ADDR[2], 2), ADDR[1],
                          rep % ("true", ADDR[3], 3))).encode()


def test_scan_finds_broker_sets_whose_master_died_while_a_replica_lives() -> None:
    m = three_in_sync()
    assert m.scan_need_reelect_broker_sets(live(1, 2)) == []
    assert m.scan_need_reelect_broker_sets(live(2)) == [NAME]
    assert m.scan_need_reelect_broker_sets(live()) == []


# ---------------------------------------------------------------- clean broker data
CLEAN_TABLE = [
    ("a broker set with a master cannot be cleaned whole", None, False, live(), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, None),
    ("a live broker cannot be cleaned", "2", False, live(2), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, None),
    ("a dead broker can be cleaned", "3;2", False, live(1), RC.SUCCESS, (3, 2)),
    ("ids must be numbers", "2;x", False, live(), RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, None),
    ("isCleanLivingBroker cleans the whole set even with ids", "2", True, live(1, 2, 3), RC.SUCCESS, "all"),
]


@pytest.mark.parametrize("rule, ids, living, alive, code, cleaned", CLEAN_TABLE, ids=[t[0] for t in CLEAN_TABLE])
def test_clean_broker_data(rule: str, ids: Optional[str], living: bool, alive: LiveBrokers, code: int, cleaned: Any) -> None:
    m = three_in_sync()
    r = m.clean_broker_data(CleanControllerBrokerDataRequestHeader(NAME, CLUSTER, ids, living), alive)
    assert r.response_code == code, r.remark
    if cleaned is None:
        assert r.events == ()
    elif cleaned == "all":
        assert r.events == (CleanBrokerDataEvent(NAME, None),)
        apply(m, r)
        assert NAME not in m.replica_info_table and NAME not in m.sync_state_set_info_table
    else:
        assert r.events == (CleanBrokerDataEvent(NAME, (2, 3)),)
        apply(m, r)
        assert set(m.replica_info_table[NAME].broker_id_info) == {1} and state(m) == (1, 1, 2, {1})


def test_clean_an_unknown_broker_set_is_refused() -> None:
    r = ReplicasInfoManager().clean_broker_data(CleanControllerBrokerDataRequestHeader("nope", CLUSTER, "1", True), live())
    assert (r.response_code, r.remark) == (RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                           "Broker nope is not existed,clean broker data failure.")


def test_apaches_quirk_an_emptied_sync_state_set_drops_the_set_and_the_next_id_recreates_it() -> None:
    m = registered(1, 2)  # never elected: SyncStateSet empty
    apply(m, m.clean_broker_data(CleanControllerBrokerDataRequestHeader(NAME, CLUSTER, "1"), live()))
    assert NAME in m.replica_info_table and NAME not in m.sync_state_set_info_table
    apply(m, m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 3, check_code(3))))
    assert set(m.replica_info_table[NAME].broker_id_info) == {3}  # broker 2 forgotten, as in Apache


def test_replaying_the_log_gives_the_same_state() -> None:
    """Every controller applies the same committed events: same tables."""
    log: list[bytes] = []
    m = ReplicasInfoManager()
    steps: list[Callable[[], ControllerResult[Any]]] = [
        lambda: m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 1, check_code(1))),
        lambda: m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, 2, check_code(2))),
        lambda: m.elect_master(ElectMasterRequestHeader.of_broker_trigger(CLUSTER, NAME, 1), live(1, 2)),
        lambda: m.alter_sync_state_set(AlterSyncStateSetRequestHeader(NAME, 1, 1), SyncStateSet((2, 1), 1), live(1, 2)),
        lambda: m.elect_master(CONTROLLER, live(2)),
        lambda: m.register_broker(RegisterBrokerToControllerRequestHeader(CLUSTER, NAME, 1, "10.0.0.1:1"), live(2)),
    ]
    for step in steps:
        r = step()
        log.extend(encode_event(e) for e in r.events)
        apply(m, r)
    replica = ReplicasInfoManager()
    for entry in log:
        ev = decode_event(entry)
        assert ev is not None
        replica.apply_event(ev)
    assert replica.replica_info_table == m.replica_info_table
    assert replica.sync_state_set_info_table == m.sync_state_set_info_table
    assert state(m) == (2, 2, 3, {2})

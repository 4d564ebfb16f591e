"""Properties of the controller's state machine over random request sequences (hypothesis):
handlers never mutate; epochs never go back; a new master comes from the SyncStateSet unless
enableElectUncleanMaster; a replayed log gives the same tables."""
from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.bodies import SyncStateSet
from controller.codes import ControllerResponseCode as RC
from controller.elect_policy import BrokerLiveInfo, LiveBrokers
from controller.events import decode_event, encode_event
from controller.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    RegisterBrokerToControllerRequestHeader,
)
from controller.replicas_info import ControllerResult, ReplicasInfoManager

CLUSTER, NAME = "c", "b"
IDS = st.integers(min_value=1, max_value=5)

op = st.one_of(
    st.tuples(st.just("apply"), IDS, st.booleans()),
    st.tuples(st.just("elect_controller"), st.just(0), st.booleans()),
    st.tuples(st.just("elect_broker"), IDS, st.booleans()),
    st.tuples(st.just("elect_admin"), IDS, st.booleans()),
    st.tuples(st.just("alter"), st.frozensets(IDS, min_size=1), st.booleans()),
    st.tuples(st.just("register"), IDS, st.booleans()),
    st.tuples(st.just("clean"), st.frozensets(IDS, min_size=1), st.booleans()),
)


def live(ids: frozenset[int], seed: int) -> LiveBrokers:
    return LiveBrokers.of(CLUSTER, *(BrokerLiveInfo(NAME, f"h{i}:1", i, 1, (i * seed) % 7, i % 3) for i in ids))


def request(m: ReplicasInfoManager, kind: str, arg: Any, flag: bool, alive: LiveBrokers) -> ControllerResult[Any]:
    s = m.sync_state_set_info_table.get(NAME)
    if kind == "apply":
        return m.apply_broker_id(ApplyBrokerIdRequestHeader(CLUSTER, NAME, arg, f"h{arg}:1;{int(flag)}"))
    if kind == "elect_controller":
        return m.elect_master(ElectMasterRequestHeader.of_controller_trigger(NAME), alive)
    if kind == "elect_broker":
        return m.elect_master(ElectMasterRequestHeader.of_broker_trigger(CLUSTER, NAME, arg), alive)
    if kind == "elect_admin":
        return m.elect_master(ElectMasterRequestHeader.of_admin_trigger(CLUSTER, NAME, arg), alive)
    if kind == "alter":
        # the master with current epochs (flag) or a stale request
        master = s.master_broker_id if s else None
        me, se = (s.master_epoch, s.sync_state_set_epoch) if s else (0, 0)
        if not flag:
            me, se = me - 1, se
        return m.alter_sync_state_set(AlterSyncStateSetRequestHeader(NAME, master, me), SyncStateSet(tuple(sorted(arg)), se), alive)
    if kind == "register":
        return m.register_broker(RegisterBrokerToControllerRequestHeader(CLUSTER, NAME, arg, f"h{arg}:{int(flag) + 1}"), alive)
    return m.clean_broker_data(CleanControllerBrokerDataRequestHeader(NAME, CLUSTER, ";".join(map(str, sorted(arg))), flag), alive)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(op, st.frozensets(IDS), st.integers(1, 5)), max_size=30), unclean=st.booleans())
def test_state_machine_properties(ops: list[tuple[tuple[str, Any, bool], frozenset[int], int]], unclean: bool) -> None:
    m = ReplicasInfoManager(enable_elect_unclean_master=unclean)
    log: list[bytes] = []
    for (kind, arg, flag), alive_ids, seed in ops:
        alive = live(alive_ids, seed)
        before = (copy.deepcopy(m.replica_info_table), copy.deepcopy(m.sync_state_set_info_table))
        r = request(m, kind, arg, flag, alive)
        assert (m.replica_info_table, m.sync_state_set_info_table) == before, "a handler mutated the state"
        s = m.sync_state_set_info_table.get(NAME)
        old = (s.master_epoch, s.sync_state_set_epoch, set(s.sync_state_set)) if s else None
        if kind.startswith("elect") and r.response_code == RC.SUCCESS and old is not None and old[0] > 0:
            new_master = r.response.master_broker_id
            assert new_master in alive_ids
            if not unclean:
                assert new_master in old[2], "a slave outside the SyncStateSet was elected"
        for e in r.events:
            data = encode_event(e)
            log.append(data)
            back = decode_event(data)
            assert back is not None
            m.apply_event(back)
        s2 = m.sync_state_set_info_table.get(NAME)
        if old is not None and s2 is not None:
            assert s2.master_epoch >= old[0] and s2.sync_state_set_epoch >= old[1]
    replica = ReplicasInfoManager(enable_elect_unclean_master=unclean)
    for data in log:
        ev = decode_event(data)
        assert ev is not None
        replica.apply_event(ev)
    assert replica.replica_info_table == m.replica_info_table
    assert replica.sync_state_set_info_table == m.sync_state_set_info_table

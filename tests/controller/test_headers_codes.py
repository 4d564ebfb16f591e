"""Controller codes (numbers as Apache 5.3.3) and headers <-> extFields (Java field names)."""
from __future__ import annotations

import pytest

from controller.codes import ControllerRequestCode as Req
from controller.codes import ControllerResponseCode as Resp
from controller.codes import request_name, response_name
from controller.headers import (
    AlterSyncStateSetRequestHeader,
    AlterSyncStateSetResponseHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    HeaderError,
    RegisterBrokerToControllerResponseHeader,
    from_ext_fields,
    to_ext_fields,
)


def test_request_codes_are_apaches() -> None:
    assert (Req.CONTROLLER_ALTER_SYNC_STATE_SET, Req.CONTROLLER_ELECT_MASTER, Req.CONTROLLER_REGISTER_BROKER,
            Req.CONTROLLER_GET_REPLICA_INFO, Req.CONTROLLER_GET_METADATA_INFO, Req.CONTROLLER_GET_SYNC_STATE_DATA,
            Req.GET_BROKER_EPOCH_CACHE, Req.NOTIFY_BROKER_ROLE_CHANGED, Req.UPDATE_CONTROLLER_CONFIG,
            Req.GET_CONTROLLER_CONFIG, Req.CLEAN_BROKER_DATA, Req.CONTROLLER_GET_NEXT_BROKER_ID,
            Req.CONTROLLER_APPLY_BROKER_ID) == tuple(range(1001, 1014))
    assert (Req.BROKER_HEARTBEAT, Req.GET_SYNC_STATE_DATA_REQUEST) == (904, 1017)


def test_response_codes_are_apaches() -> None:
    names = ["CONTROLLER_FENCED_MASTER_EPOCH", "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH", "CONTROLLER_INVALID_MASTER",
             "CONTROLLER_INVALID_REPLICAS", "CONTROLLER_MASTER_NOT_AVAILABLE", "CONTROLLER_INVALID_REQUEST",
             "CONTROLLER_BROKER_NOT_ALIVE", "CONTROLLER_NOT_LEADER", "CONTROLLER_BROKER_METADATA_NOT_EXIST",
             "CONTROLLER_INVALID_CLEAN_BROKER_METADATA", "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
             "CONTROLLER_MASTER_STILL_EXIST", "CONTROLLER_ELECT_MASTER_FAILED",
             "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED", "CONTROLLER_BROKER_ID_INVALID",
             "CONTROLLER_JRAFT_INTERNAL_ERROR", "CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS"]
    assert [getattr(Resp, n) for n in names] == list(range(2000, 2017))
    assert response_name(2011) == "CONTROLLER_MASTER_STILL_EXIST" and request_name(1013) == "CONTROLLER_APPLY_BROKER_ID"
    assert response_name(99999) == "RESPONSE_99999"


def test_fields_are_java_names_and_nulls_are_left_out() -> None:
    assert to_ext_fields(AlterSyncStateSetRequestHeader("broker-a", 1, 3, 1700000000000)) == {
        "brokerName": "broker-a", "masterBrokerId": "1", "masterEpoch": "3", "invokeTime": "1700000000000"}
    assert to_ext_fields(ElectMasterResponseHeader(None, None, 2, 3)) == {"masterEpoch": "2", "syncStateSetEpoch": "3"}
    assert to_ext_fields(CleanControllerBrokerDataRequestHeader("b", is_clean_living_broker=True)) == {
        "brokerName": "b", "isCleanLivingBroker": "true", "invokeTime": "0"}
    assert to_ext_fields(GetMetaDataResponseHeader("g", "n0", "127.0.0.1:9878", True, "n0:a;")) == {
        "group": "g", "controllerLeaderId": "n0", "controllerLeaderAddress": "127.0.0.1:9878", "isLeader": "true",
        "peers": "n0:a;"}
    assert to_ext_fields(AlterSyncStateSetResponseHeader(4)) == {"newSyncStateSetEpoch": "4"}


def test_controller_triggered_election_as_apache_sends_it() -> None:
    fields = to_ext_fields(ElectMasterRequestHeader.of_controller_trigger("broker-a"))
    assert fields == {"clusterName": "", "brokerName": "broker-a", "brokerId": "-1", "designateElect": "false"}
    assert from_ext_fields(ElectMasterRequestHeader, fields) == ElectMasterRequestHeader(broker_name="broker-a")


@pytest.mark.parametrize("cls, fields", [
    (AlterSyncStateSetRequestHeader, {"brokerName": "b", "masterBrokerId": "2", "masterEpoch": "5", "invokeTime": "9"}),
    (RegisterBrokerToControllerResponseHeader, {"clusterName": "c", "brokerName": "b", "masterBrokerId": "1",
                                                "masterAddress": "a:1", "masterEpoch": "2", "syncStateSetEpoch": "3"}),
    (BrokerHeartbeatRequestHeader, {"clusterName": "c", "brokerAddr": "a:1", "brokerName": "b", "brokerId": "2",
                                    "epoch": "3", "maxOffset": "4096", "electionPriority": "2147483647"}),
])
def test_round_trip(cls: type, fields: dict[str, str]) -> None:
    assert to_ext_fields(from_ext_fields(cls, fields)) == fields


def test_not_null_fields_are_required() -> None:
    with pytest.raises(HeaderError, match="brokerName"):
        from_ext_fields(ElectMasterRequestHeader, {"clusterName": "", "brokerId": "-1", "designateElect": "false"})
    with pytest.raises(HeaderError, match="brokerAddr"):
        from_ext_fields(BrokerHeartbeatRequestHeader, {"clusterName": "c", "brokerName": "b"})


@pytest.mark.parametrize("value", [" 1", "1_0", "1.0", "", "2147483648", "0x1"])
def test_numbers_parse_as_java_does(value: str) -> None:
    with pytest.raises(HeaderError):
        from_ext_fields(AlterSyncStateSetRequestHeader, {"masterEpoch": value})


def test_booleans_parse_as_java_parse_boolean() -> None:
    base = {"clusterName": "", "brokerName": "b", "brokerId": "1"}
    assert from_ext_fields(ElectMasterRequestHeader, {**base, "designateElect": "TRUE"}).designate_elect is True
    assert from_ext_fields(ElectMasterRequestHeader, {**base, "designateElect": "yes"}).designate_elect is False
    assert from_ext_fields(AlterSyncStateSetRequestHeader, {"masterEpoch": "+7"}).master_epoch == 7

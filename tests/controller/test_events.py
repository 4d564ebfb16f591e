"""The controller's events and their bytes (Apache 5.3.3 EventSerializer / ListEventSerializer).

The expected JSON below is derived by hand from the Java classes (fastjson 1.2.83 writes a bean's
getters in alphabetical order, leaves nulls out, writes an enum by name, and the controller's
FastJsonSerializer adds BrowserSecure); each string was also checked once against fastjson
1.2.83 itself (the jar in /work/shared/apache-rocketmq-4.9.8/lib)."""
from __future__ import annotations

import struct

import pytest

from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    EventDecodeError,
    EventType,
    UpdateBrokerAddressEvent,
    decode_event,
    decode_event_list,
    encode_event,
    encode_event_list,
)
from controller.fastjson import java_string_hash, long_set

CASES: list[tuple[Event, int, bytes]] = [
    (ApplyBrokerIdEvent("DefaultCluster", "broker-a", "127.0.0.1:30911", 1, "127.0.0.1:30911;1700000000000"), 2,
     b'{"brokerAddress":"127.0.0.1:30911","brokerName":"broker-a","clusterName":"DefaultCluster",'
     b'"eventType":"APPLY_BROKER_ID_EVENT","newBrokerId":1,"registerCheckCode":"127.0.0.1:30911;1700000000000"}'),
    (AlterSyncStateSetEvent("broker-a", (3, 1, 2)), 1,
     b'{"brokerName":"broker-a","eventType":"ALTER_SYNC_STATE_SET_EVENT","newSyncStateSet":[1,2,3]}'),
    # 17 and 1 share HashSet bucket 1 (kept in insertion order), 100 is in bucket 4
    (AlterSyncStateSetEvent("broker-a", (100, 17, 1)), 1,
     b'{"brokerName":"broker-a","eventType":"ALTER_SYNC_STATE_SET_EVENT","newSyncStateSet":[17,1,100]}'),
    (ElectMasterEvent(True, "broker-a", 2), 3,
     b'{"brokerName":"broker-a","eventType":"ELECT_MASTER_EVENT","newMasterBrokerId":2,"newMasterElected":true}'),
    (ElectMasterEvent(False, "broker-a"), 3,
     b'{"brokerName":"broker-a","eventType":"ELECT_MASTER_EVENT","newMasterElected":false}'),
    (CleanBrokerDataEvent("broker-a"), 5, b'{"brokerName":"broker-a","eventType":"CLEAN_BROKER_DATA_EVENT"}'),
    (CleanBrokerDataEvent("broker-a", (2, 1)), 5,
     b'{"brokerIdSetToClean":[1,2],"brokerName":"broker-a","eventType":"CLEAN_BROKER_DATA_EVENT"}'),
    (UpdateBrokerAddressEvent("DefaultCluster", "broker-a", "127.0.0.1:30921", 2), 6,
     b'{"brokerAddress":"127.0.0.1:30921","brokerId":2,"brokerName":"broker-a","clusterName":"DefaultCluster",'
     b'"eventType":"UPDATE_BROKER_ADDRESS"}'),
    # BrowserSecure escapes < > ( ), fastjson always escapes U+2028; other non-ASCII stays UTF-8
    (ApplyBrokerIdEvent("c<>()&'\"\u00e9\u2028", "b", None, 1, "x"), 2,
     b'{"brokerName":"b","clusterName":"c\\u003C\\u003E\\u0028\\u0029&\'\\"\xc3\xa9\\u2028",'
     b'"eventType":"APPLY_BROKER_ID_EVENT","newBrokerId":1,"registerCheckCode":"x"}'),
]


@pytest.mark.parametrize("event, type_id, json", CASES)
def test_event_serializer_bytes(event: Event, type_id: int, json: bytes) -> None:
    data = encode_event(event)
    assert data == struct.pack(">h", type_id) + json
    back = decode_event(data)
    assert back is not None and encode_event(back) == data


def test_event_type_numbers_are_apaches() -> None:
    assert [(t.name, t.value) for t in EventType] == [
        ("ALTER_SYNC_STATE_SET_EVENT", 1), ("APPLY_BROKER_ID_EVENT", 2), ("ELECT_MASTER_EVENT", 3),
        ("READ_EVENT", 4), ("CLEAN_BROKER_DATA_EVENT", 5), ("UPDATE_BROKER_ADDRESS", 6)]


def test_round_trip_keeps_every_field() -> None:
    for event, _, _ in CASES:
        back = decode_event(encode_event(event))
        if isinstance(event, (AlterSyncStateSetEvent, CleanBrokerDataEvent)):
            assert type(back) is type(event)
        else:
            assert back == event


def test_empty_body_unknown_and_read_types_are_not_events() -> None:
    assert decode_event(b"") is None and decode_event(b"\x00") is None
    assert decode_event(b"\x00\x04{}") is None  # READ_EVENT has no class
    assert decode_event(b"\x00\x63{}") is None  # unknown type: Apache returns null
    assert decode_event(b"\xff\xff{}") is None  # negative id


@pytest.mark.parametrize("data", [b"\x00\x03", b"\x00\x03[1]", b"\x00\x03{\"brokerName\":5}", b"\x00\x03{",
                                  b"\x00\x02{\"brokerName\":\"b\",\"newBrokerId\":\"1\"}"])
def test_a_body_that_is_not_the_event_is_an_error(data: bytes) -> None:
    with pytest.raises(EventDecodeError):
        decode_event(data)


def test_list_event_serializer_bytes() -> None:
    e1 = ElectMasterEvent(False, "b")
    e2 = CleanBrokerDataEvent("b")
    j1 = b'{"brokerName":"b","eventType":"ELECT_MASTER_EVENT","newMasterElected":false}'
    j2 = b'{"brokerName":"b","eventType":"CLEAN_BROKER_DATA_EVENT"}'
    data = encode_event_list([e1, e2])
    assert data == b"\x00\x03" + struct.pack(">i", len(j1)) + j1 + b"\x00\x05" + struct.pack(">i", len(j2)) + j2
    assert decode_event_list(data) == [e1, e2]
    assert decode_event_list(b"\x00\x03\x00\x00\x00\x00") == []  # six bytes or fewer: nothing


def test_list_decoder_is_bounded() -> None:
    with pytest.raises(EventDecodeError, match="says"):
        decode_event_list(b"\x00\x03\x7f\xff\xff\xff{}")
    with pytest.raises(EventDecodeError, match="trailing"):
        decode_event_list(encode_event_list([CleanBrokerDataEvent("b")]) + b"\x00\x03\x00")


def test_list_decoder_skips_unknown_types_as_apache() -> None:
    j = b'{"brokerName":"b","eventType":"CLEAN_BROKER_DATA_EVENT"}'
    data = b"\x00\x09\x00\x00\x00\x02{}" + b"\x00\x05" + struct.pack(">i", len(j)) + j
    assert decode_event_list(data) == [CleanBrokerDataEvent("b")]


def test_java_hash_order() -> None:
    assert long_set([3, 1, 2]) == [1, 2, 3]
    assert long_set([100, 17, 1]) == [17, 1, 100]
    # the copy constructor sizes 12 elements for 32 buckets: 16 moves after 15
    twelve = [16, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert long_set(twelve) == [16, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert long_set(twelve, copies=1) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 16]
    # String.hashCode as Java computes it ("broker-a".hashCode() == 372697965)
    assert java_string_hash("broker-a") == 372697965 and java_string_hash("zz") == 3904

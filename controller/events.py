"""The controller's events (Apache RocketMQ 5.3.3 ``controller.impl.event``) and their bytes.

An event is what a request handler proposes and what the replicated log carries: the
DLedgerController appends one log entry per event, whose body is :func:`encode_event` (Apache's
``EventSerializer``), and every controller applies the committed entries in order to its
:class:`controller.replicas_info.ReplicasInfoManager`. An empty body is a read barrier (Apache's
``processReadEvent``), not an event.

``EventSerializer`` bytes: ``type`` (2 bytes, big-endian :class:`EventType` number) + the event as
fastjson JSON (``BrowserSecure``; sorted keys, null fields left out, ``"eventType"`` with the
enum's name). ``ListEventSerializer`` bytes: per event ``type`` (2) + ``length`` (4, big-endian)
+ JSON; Apache has it but the DLedger controller does not use it; it is here for the JRaft
layout.

Rules:
- Type numbers: AlterSyncStateSet 1, ApplyBrokerId 2, ElectMaster 3, Read 4 (never serialised:
  it has no class), CleanBrokerData 5, UpdateBrokerAddress 6.
- Sets are written in Java's ``HashSet`` order for the path Apache takes (see
  :mod:`controller.fastjson`): the AlterSyncStateSet set went through three copies, the
  CleanBrokerData set none; so our log is byte-for-byte Apache's.
- Decoding is strict where Apache's would throw (a short frame, a bad length, JSON that is not the
  event) and raises :class:`EventDecodeError`; an unknown type number, which Apache logs and
  skips (returns null), is skipped the same way by :func:`decode_event` (``None``) and
  :func:`decode_event_list`.
- Bounded: a length field larger than the bytes left is an error, never an allocation.

Theory of operation: events are frozen dataclasses with RocketMQ's names in snake_case; each has
``EVENT_TYPE``, ``to_json()`` (the fastjson bean) and ``from_json(dict)``.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Mapping, Optional, Sequence, Union

from controller.fastjson import (
    JsonBodyError,
    bean,
    dumps,
    get_bool,
    get_int,
    get_long_list,
    get_str,
    loads_object,
    long_set,
)

_H = struct.Struct(">h")
_HI = struct.Struct(">hi")


class EventType(IntEnum):
    ALTER_SYNC_STATE_SET_EVENT = 1
    APPLY_BROKER_ID_EVENT = 2
    ELECT_MASTER_EVENT = 3
    READ_EVENT = 4
    CLEAN_BROKER_DATA_EVENT = 5
    UPDATE_BROKER_ADDRESS = 6


class EventDecodeError(ValueError):
    """Bytes that are not an event Apache's serializer would read."""


@dataclass(frozen=True)
class AlterSyncStateSetEvent:
    """The master's new SyncStateSet (``new_sync_state_set`` in the order the request listed it)."""

    EVENT_TYPE: ClassVar[EventType] = EventType.ALTER_SYNC_STATE_SET_EVENT
    broker_name: str
    new_sync_state_set: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return bean(brokerName=self.broker_name, eventType=self.EVENT_TYPE.name,
                    newSyncStateSet=long_set(self.new_sync_state_set, copies=3))

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "AlterSyncStateSetEvent":
        return cls(_req_str(o, "brokerName"), tuple(get_long_list(o, "newSyncStateSet") or ()))


@dataclass(frozen=True)
class ApplyBrokerIdEvent:
    """A brokerId given to a broker (the first of a broker set creates its records)."""

    EVENT_TYPE: ClassVar[EventType] = EventType.APPLY_BROKER_ID_EVENT
    cluster_name: Optional[str]
    broker_name: str
    broker_address: Optional[str]
    new_broker_id: int
    register_check_code: Optional[str]

    def to_json(self) -> dict[str, Any]:
        return bean(brokerAddress=self.broker_address, brokerName=self.broker_name,
                    clusterName=self.cluster_name, eventType=self.EVENT_TYPE.name,
                    newBrokerId=self.new_broker_id, registerCheckCode=self.register_check_code)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "ApplyBrokerIdEvent":
        return cls(get_str(o, "clusterName"), _req_str(o, "brokerName"), get_str(o, "brokerAddress"),
                   get_int(o, "newBrokerId") or 0, get_str(o, "registerCheckCode"))


@dataclass(frozen=True)
class ElectMasterEvent:
    """A new master (``new_master_elected``) or, ``False``, the master is gone and none was found."""

    EVENT_TYPE: ClassVar[EventType] = EventType.ELECT_MASTER_EVENT
    new_master_elected: bool
    broker_name: str
    new_master_broker_id: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        return bean(brokerName=self.broker_name, eventType=self.EVENT_TYPE.name,
                    newMasterBrokerId=self.new_master_broker_id, newMasterElected=self.new_master_elected)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "ElectMasterEvent":
        return cls(get_bool(o, "newMasterElected"), _req_str(o, "brokerName"), get_int(o, "newMasterBrokerId"))


@dataclass(frozen=True)
class CleanBrokerDataEvent:
    """Forget brokers of a broker set (``None`` or empty: the whole broker set)."""

    EVENT_TYPE: ClassVar[EventType] = EventType.CLEAN_BROKER_DATA_EVENT
    broker_name: str
    broker_id_set_to_clean: Optional[tuple[int, ...]] = None

    def to_json(self) -> dict[str, Any]:
        ids = None if self.broker_id_set_to_clean is None else long_set(self.broker_id_set_to_clean)
        return bean(brokerIdSetToClean=ids, brokerName=self.broker_name, eventType=self.EVENT_TYPE.name)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "CleanBrokerDataEvent":
        ids = get_long_list(o, "brokerIdSetToClean")
        return cls(_req_str(o, "brokerName"), None if ids is None else tuple(ids))


@dataclass(frozen=True)
class UpdateBrokerAddressEvent:
    """A registered broker now answers at another address."""

    EVENT_TYPE: ClassVar[EventType] = EventType.UPDATE_BROKER_ADDRESS
    cluster_name: Optional[str]
    broker_name: str
    broker_address: Optional[str]
    broker_id: Optional[int]

    def to_json(self) -> dict[str, Any]:
        return bean(brokerAddress=self.broker_address, brokerId=self.broker_id, brokerName=self.broker_name,
                    clusterName=self.cluster_name, eventType=self.EVENT_TYPE.name)

    @classmethod
    def from_json(cls, o: Mapping[str, Any]) -> "UpdateBrokerAddressEvent":
        return cls(get_str(o, "clusterName"), _req_str(o, "brokerName"), get_str(o, "brokerAddress"),
                   get_int(o, "brokerId"))


Event = Union[AlterSyncStateSetEvent, ApplyBrokerIdEvent, ElectMasterEvent, CleanBrokerDataEvent,
              UpdateBrokerAddressEvent]

_CLASSES: dict[int, Any] = {
    EventType.ALTER_SYNC_STATE_SET_EVENT: AlterSyncStateSetEvent,
    EventType.APPLY_BROKER_ID_EVENT: ApplyBrokerIdEvent,
    EventType.ELECT_MASTER_EVENT: ElectMasterEvent,
    EventType.CLEAN_BROKER_DATA_EVENT: CleanBrokerDataEvent,
    EventType.UPDATE_BROKER_ADDRESS: UpdateBrokerAddressEvent,
}


def _req_str(o: Mapping[str, Any], key: str) -> str:
    v = get_str(o, key, required=True)
    assert v is not None
    return v


def event_json(event: Event) -> bytes:
    """The event's JSON as Apache's ``FastJsonSerializer`` writes it."""
    return dumps(event.to_json(), browser_secure=True)


def _from_json(type_id: int, data: bytes) -> Optional[Event]:
    cls = _CLASSES.get(type_id)
    if cls is None:
        return None
    try:
        event: Event = cls.from_json(loads_object(data))
    except JsonBodyError as e:
        raise EventDecodeError(f"{EventType(type_id).name}: {e}") from None
    return event


def encode_event(event: Event) -> bytes:
    """``EventSerializer.serialize``: type (2 bytes) + JSON."""
    return _H.pack(event.EVENT_TYPE) + event_json(event)


def decode_event(data: bytes) -> Optional[Event]:
    """``EventSerializer.deserialize``; ``None`` for an empty body (a read barrier), a type number
    of 0 or less, an unknown type or ``READ_EVENT``, as Apache."""
    if len(data) < 2:
        return None
    (type_id,) = _H.unpack_from(data)
    if type_id <= 0:
        return None
    return _from_json(type_id, data[2:])


def encode_event_list(events: Sequence[Event]) -> bytes:
    """``ListEventSerializer.serialize``: per event type (2) + length (4) + JSON."""
    out = bytearray()
    for e in events:
        data = event_json(e)
        out += _HI.pack(e.EVENT_TYPE, len(data))
        out += data
    return bytes(out)


def decode_event_list(data: bytes) -> list[Event]:
    """``ListEventSerializer.deserialize``: 6 bytes or fewer is no events (as Apache); a length
    of 0 or less skips just the 6 header bytes; unknown types are skipped."""
    events: list[Event] = []
    if len(data) <= 6:
        return events
    index = 0
    while index < len(data):
        if len(data) - index < 6:
            raise EventDecodeError(f"{len(data) - index} trailing bytes at {index}, not an event header")
        type_id, length = _HI.unpack_from(data, index)
        index += 6
        if length <= 0:
            continue
        if length > len(data) - index:
            raise EventDecodeError(f"event at {index - 6} says {length} bytes, {len(data) - index} left")
        event = _from_json(type_id, data[index:index + length])
        if event is not None:
            events.append(event)
        index += length
    return events

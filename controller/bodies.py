"""JSON bodies of the controller's requests and responses (Apache RocketMQ 5.3.3
``remoting.protocol.body``: ``SyncStateSet``, ``ElectMasterResponseBody``, ``BrokerMemberGroup``,
``BrokerReplicasInfo``), written as ``RemotingSerializable.encode`` writes them (fastjson, default
features: sorted bean keys, nulls left out, ``Map<Long,?>`` keys unquoted, Java's hash order;
see :mod:`controller.fastjson`).

Rules:
- ``encode()`` gives Apache's bytes; ``decode(bytes)`` accepts what fastjson writes (numeric map
  keys unquoted or quoted) and raises :class:`controller.fastjson.JsonBodyError` for anything else.
- Sets are kept as tuples in the order they were given (a request's order); they are written in
  Java's order.

Theory of operation: frozen dataclasses; nothing here knows the state machine.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from controller.fastjson import (
    JsonBodyError,
    MAX_JSON_BYTES,
    bean,
    dumps,
    get_int,
    get_long_list,
    loads_object,
    long_key_map,
    long_set,
    string_key_map,
)


@dataclass(frozen=True)
class SyncStateSet:
    """``{"syncStateSet":[ids],"syncStateSetEpoch":n}``: the body of CONTROLLER_ALTER_SYNC_STATE_SET
    and of the register / get-replica-info answers."""

    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int

    def to_json(self) -> dict[str, Any]:
        return bean(syncStateSet=long_set(self.sync_state_set, copies=2), syncStateSetEpoch=self.sync_state_set_epoch)

    def encode(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def decode(cls, data: bytes) -> "SyncStateSet":
        o = loads_object(data)
        return cls(tuple(get_long_list(o, "syncStateSet") or ()), get_int(o, "syncStateSetEpoch") or 0)


@dataclass(frozen=True)
class BrokerMemberGroup:
    """A broker set's members: ``{"brokerAddrs":{id:addr},"brokerName":..,"cluster":..}``."""

    cluster: Optional[str]
    broker_name: Optional[str]
    broker_addrs: Mapping[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return bean(brokerAddrs=long_key_map(self.broker_addrs), brokerName=self.broker_name, cluster=self.cluster)

    def minimum_broker_id(self) -> int:
        return min(self.broker_addrs) if self.broker_addrs else 0


@dataclass(frozen=True)
class ElectMasterResponseBody:
    """The body of a CONTROLLER_ELECT_MASTER answer."""

    sync_state_set: tuple[int, ...]
    broker_member_group: Optional[BrokerMemberGroup] = None

    def to_json(self) -> dict[str, Any]:
        group = None if self.broker_member_group is None else self.broker_member_group.to_json()
        return bean(brokerMemberGroup=group, syncStateSet=long_set(self.sync_state_set))

    def encode(self) -> bytes:
        return dumps(self.to_json())


@dataclass(frozen=True)
class ReplicaIdentity:
    broker_name: str
    broker_id: int
    broker_address: Optional[str]
    alive: bool = False

    def to_json(self) -> dict[str, Any]:
        return bean(alive=self.alive, brokerAddress=self.broker_address, brokerId=self.broker_id,
                    brokerName=self.broker_name)


@dataclass(frozen=True)
class ReplicasInfo:
    master_broker_id: Optional[int]
    master_address: Optional[str]
    master_epoch: int
    sync_state_set_epoch: int
    in_sync_replicas: tuple[ReplicaIdentity, ...]
    not_in_sync_replicas: tuple[ReplicaIdentity, ...]

    def to_json(self) -> dict[str, Any]:
        return bean(inSyncReplicas=[r.to_json() for r in self.in_sync_replicas], masterAddress=self.master_address,
                    masterBrokerId=self.master_broker_id, masterEpoch=self.master_epoch,
                    notInSyncReplicas=[r.to_json() for r in self.not_in_sync_replicas],
                    syncStateSetEpoch=self.sync_state_set_epoch)


@dataclass(frozen=True)
class BrokerReplicasInfo:
    """The body of a CONTROLLER_GET_SYNC_STATE_DATA answer."""

    replicas_info_table: Mapping[str, ReplicasInfo] = field(default_factory=dict)

    def encode(self) -> bytes:
        table = {k: v.to_json() for k, v in self.replicas_info_table.items()}
        return dumps(bean(replicasInfoTable=string_key_map(table)))


def decode_broker_names(data: bytes) -> list[str]:
    """The body of CONTROLLER_GET_SYNC_STATE_DATA: a JSON array of broker names."""
    if len(data) > MAX_JSON_BYTES:
        raise JsonBodyError(f"JSON of {len(data)} bytes (at most {MAX_JSON_BYTES})")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise JsonBodyError(f"not JSON: {e}") from None
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise JsonBodyError("not a list of broker names")
    return value


def encode_broker_names(names: list[str]) -> bytes:
    return dumps(list(names))


__all__ = ["BrokerMemberGroup", "BrokerReplicasInfo", "ElectMasterResponseBody", "ReplicaIdentity",
           "ReplicasInfo", "SyncStateSet", "decode_broker_names", "encode_broker_names"]

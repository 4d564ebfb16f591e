"""Typed request and response headers of the controller (Apache RocketMQ 5.3.3
``remoting.protocol.header.controller`` and ``BrokerHeartbeatRequestHeader``), to and from the
``extFields`` of a remoting command (``broker.remoting.codec.RemotingCommand.ext_fields``).

Rules (Java's ``RemotingCommand.makeCustomHeaderToNet`` / ``decodeCommandCustomHeader``):
- The key is the Java field name, exactly (``isCleanLivingBroker``, ``isLeader`` included).
- Writing: a field whose value is ``None`` is left out; numbers in decimal, booleans
  ``true``/``false``. Java primitives (``int``, ``long``, ``boolean``) are never ``None`` here.
- Reading: an absent key keeps the Java default (``ElectMasterRequestHeader.brokerId`` is -1,
  ``designateElect`` false, ...); an absent ``@CFNotNull`` field is a :class:`HeaderError`
  ("the custom field <name> is null", Java's words). ``Integer``/``Long`` parse as
  ``Integer.parseInt``/``Long.parseLong`` (sign and digits, in range; else :class:`HeaderError`,
  where Java throws ``NumberFormatException``); ``Boolean.parseBoolean``: ``true`` in any case is
  true, anything else false.
- ``invokeTime`` is Java's ``System.currentTimeMillis()`` at construction; nothing here reads a
  clock, so it is a field the caller fills (0 when not given).

Theory of operation: each header is a frozen dataclass; its :data:`WIRE` table lists
``(attribute, javaName, kind, notNull)`` and one :class:`HeaderCodec` per class does both
directions from that table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Mapping, Optional, Sequence, TypeVar

_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")
_RANGES = {"int": (-(2 ** 31), 2 ** 31 - 1), "long": (-(2 ** 63), 2 ** 63 - 1)}


class HeaderError(ValueError):
    """extFields that do not decode as the header (Java: RemotingCommandException or
    NumberFormatException)."""


@dataclass(frozen=True)
class WireField:
    attr: str
    java: str
    kind: str  # "str" | "int" | "long" | "bool"
    not_null: bool = False


H = TypeVar("H")


def _parse(kind: str, name: str, raw: str) -> Any:
    if kind == "str":
        return raw
    if kind == "bool":
        return raw.lower() == "true"
    lo, hi = _RANGES[kind]
    if len(raw) > 21 or not _JAVA_INT.match(raw) or not lo <= int(raw) <= hi:
        raise HeaderError(f"the custom field {name} is not a Java {kind}: {raw[:40]!r}")
    return int(raw)


def _text(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


class HeaderCodec(Generic[H]):
    """Both directions for one header class, driven by its wire table."""

    def __init__(self, cls: type[H], wire: Sequence[WireField]) -> None:
        self.cls = cls
        self.wire = tuple(wire)

    def encode(self, header: H) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in self.wire:
            v = getattr(header, f.attr)
            if v is not None:
                out[f.java] = _text(v)
        return out

    def decode(self, ext_fields: Mapping[str, str]) -> H:
        kwargs: dict[str, Any] = {}
        for f in self.wire:
            raw = ext_fields.get(f.java)
            if raw is None:
                if f.not_null:
                    raise HeaderError(f"the custom field <{f.java}> is null")
                continue
            kwargs[f.attr] = _parse(f.kind, f.java, raw)
        return self.cls(**kwargs)


def _w(attr: str, java: str, kind: str = "str", not_null: bool = False) -> WireField:
    return WireField(attr, java, kind, not_null)


# ------------------------------------------------------------------------------ requests
@dataclass(frozen=True)
class AlterSyncStateSetRequestHeader:
    """CONTROLLER_ALTER_SYNC_STATE_SET (1001); the body is a ``SyncStateSet``."""

    broker_name: Optional[str] = None
    master_broker_id: Optional[int] = None
    master_epoch: Optional[int] = None
    invoke_time: int = 0
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("broker_name", "brokerName"), _w("master_broker_id", "masterBrokerId", "long"),
        _w("master_epoch", "masterEpoch", "int"), _w("invoke_time", "invokeTime", "long"))


@dataclass(frozen=True)
class ElectMasterRequestHeader:
    """CONTROLLER_ELECT_MASTER (1002). ``broker_id`` -1 and an empty cluster: triggered by the
    controller (``ofControllerTrigger``); ``designate_elect``: by an admin (``ofAdminTrigger``)."""

    cluster_name: str = ""
    broker_name: str = ""
    broker_id: int = -1
    designate_elect: bool = False
    invoke_time: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName", not_null=True), _w("broker_name", "brokerName", not_null=True),
        _w("broker_id", "brokerId", "long", True), _w("designate_elect", "designateElect", "bool", True),
        _w("invoke_time", "invokeTime", "long"))

    @classmethod
    def of_broker_trigger(cls, cluster_name: str, broker_name: str, broker_id: int) -> "ElectMasterRequestHeader":
        return cls(cluster_name, broker_name, broker_id)

    @classmethod
    def of_controller_trigger(cls, broker_name: str) -> "ElectMasterRequestHeader":
        return cls(broker_name=broker_name)

    @classmethod
    def of_admin_trigger(cls, cluster_name: str, broker_name: str, broker_id: int) -> "ElectMasterRequestHeader":
        return cls(cluster_name, broker_name, broker_id, True)


@dataclass(frozen=True)
class GetReplicaInfoRequestHeader:
    """CONTROLLER_GET_REPLICA_INFO (1004)."""

    broker_name: Optional[str] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (_w("broker_name", "brokerName"),)


@dataclass(frozen=True)
class CleanControllerBrokerDataRequestHeader:
    """CLEAN_BROKER_DATA (1011). ``broker_controller_ids_to_clean``: ids joined by ``;``."""

    broker_name: str
    cluster_name: Optional[str] = None
    broker_controller_ids_to_clean: Optional[str] = None
    is_clean_living_broker: bool = False
    invoke_time: int = 0
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName"), _w("broker_name", "brokerName", not_null=True),
        _w("broker_controller_ids_to_clean", "brokerControllerIdsToClean"),
        _w("is_clean_living_broker", "isCleanLivingBroker", "bool"), _w("invoke_time", "invokeTime", "long"))


@dataclass(frozen=True)
class GetNextBrokerIdRequestHeader:
    """CONTROLLER_GET_NEXT_BROKER_ID (1012)."""

    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (_w("cluster_name", "clusterName"), _w("broker_name", "brokerName"))


@dataclass(frozen=True)
class ApplyBrokerIdRequestHeader:
    """CONTROLLER_APPLY_BROKER_ID (1013). ``register_check_code`` is ``<address>;<timestamp>``."""

    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    applied_broker_id: Optional[int] = None
    register_check_code: Optional[str] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName"), _w("broker_name", "brokerName"),
        _w("applied_broker_id", "appliedBrokerId", "long"), _w("register_check_code", "registerCheckCode"))


@dataclass(frozen=True)
class RegisterBrokerToControllerRequestHeader:
    """CONTROLLER_REGISTER_BROKER (1003)."""

    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    broker_id: Optional[int] = None
    broker_address: Optional[str] = None
    invoke_time: int = 0
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName"), _w("broker_name", "brokerName"), _w("broker_id", "brokerId", "long"),
        _w("broker_address", "brokerAddress"), _w("invoke_time", "invokeTime", "long"))


@dataclass(frozen=True)
class BrokerHeartbeatRequestHeader:
    """BROKER_HEARTBEAT (904) to the controller: what its liveness and election data come from."""

    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: Optional[int] = None
    epoch: Optional[int] = None
    max_offset: Optional[int] = None
    confirm_offset: Optional[int] = None
    heartbeat_timeout_mills: Optional[int] = None
    election_priority: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName", not_null=True), _w("broker_addr", "brokerAddr", not_null=True),
        _w("broker_name", "brokerName", not_null=True), _w("broker_id", "brokerId", "long"),
        _w("epoch", "epoch", "int"), _w("max_offset", "maxOffset", "long"),
        _w("confirm_offset", "confirmOffset", "long"), _w("heartbeat_timeout_mills", "heartbeatTimeoutMills", "long"),
        _w("election_priority", "electionPriority", "int"))


# ------------------------------------------------------------------------------ responses
@dataclass(frozen=True)
class AlterSyncStateSetResponseHeader:
    new_sync_state_set_epoch: int = 0
    WIRE: ClassVar[tuple[WireField, ...]] = (_w("new_sync_state_set_epoch", "newSyncStateSetEpoch", "int"),)


@dataclass(frozen=True)
class ElectMasterResponseHeader:
    master_broker_id: Optional[int] = None
    master_address: Optional[str] = None
    master_epoch: Optional[int] = None
    sync_state_set_epoch: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("master_broker_id", "masterBrokerId", "long"), _w("master_address", "masterAddress"),
        _w("master_epoch", "masterEpoch", "int"), _w("sync_state_set_epoch", "syncStateSetEpoch", "int"))


@dataclass(frozen=True)
class GetReplicaInfoResponseHeader:
    master_broker_id: Optional[int] = None
    master_address: Optional[str] = None
    master_epoch: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("master_broker_id", "masterBrokerId", "long"), _w("master_address", "masterAddress"),
        _w("master_epoch", "masterEpoch", "int"))


@dataclass(frozen=True)
class GetMetaDataResponseHeader:
    """CONTROLLER_GET_METADATA_INFO (1005): the controller group's Raft view."""

    group: Optional[str] = None
    controller_leader_id: Optional[str] = None
    controller_leader_address: Optional[str] = None
    is_leader: bool = False
    peers: Optional[str] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("group", "group"), _w("controller_leader_id", "controllerLeaderId"),
        _w("controller_leader_address", "controllerLeaderAddress"), _w("is_leader", "isLeader", "bool"),
        _w("peers", "peers"))


@dataclass(frozen=True)
class ApplyBrokerIdResponseHeader:
    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (_w("cluster_name", "clusterName"), _w("broker_name", "brokerName"))


@dataclass(frozen=True)
class GetNextBrokerIdResponseHeader:
    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    next_broker_id: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName"), _w("broker_name", "brokerName"),
        _w("next_broker_id", "nextBrokerId", "long"))


@dataclass(frozen=True)
class RegisterBrokerToControllerResponseHeader:
    cluster_name: Optional[str] = None
    broker_name: Optional[str] = None
    master_broker_id: Optional[int] = None
    master_address: Optional[str] = None
    master_epoch: Optional[int] = None
    sync_state_set_epoch: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        _w("cluster_name", "clusterName"), _w("broker_name", "brokerName"),
        _w("master_broker_id", "masterBrokerId", "long"), _w("master_address", "masterAddress"),
        _w("master_epoch", "masterEpoch", "int"), _w("sync_state_set_epoch", "syncStateSetEpoch", "int"))


@dataclass(frozen=True)
class EmptyHeader:
    """A response without a custom header (Apache's ``ControllerResult<Void>``)."""

    WIRE: ClassVar[tuple[WireField, ...]] = ()


_CODECS: dict[type, HeaderCodec[Any]] = {}


def codec_for(cls: type[H]) -> HeaderCodec[H]:
    """The codec of a header class (built from its ``WIRE`` table once)."""
    c = _CODECS.get(cls)
    if c is None:
        c = _CODECS[cls] = HeaderCodec(cls, getattr(cls, "WIRE"))
    return c


def to_ext_fields(header: object) -> dict[str, str]:
    return codec_for(type(header)).encode(header)


def from_ext_fields(cls: type[H], ext_fields: Mapping[str, str]) -> H:
    return codec_for(cls).decode(ext_fields)

"""The vocabulary of :mod:`broker.ha.autoswitch.replicas_manager`: its configuration, the events
fed to it, the actions it returns, its states and its transition tables (data; the rules that
read them are in the manager's docstring), and :class:`HAView`, what it reads of the store.

Rules:
- Events carry the time (``now_ms``, any monotonic millisecond clock of the driver's); the
  machine never reads a clock.
- A request to the controller is a :class:`ControllerCall` with a request id; its outcome comes
  back as :class:`Answered` (the controller's code, remark, extFields and body, undecoded) or
  :class:`CallFailed` (timeout, refused connection: no answer). An outcome for an id the machine
  no longer waits for is dropped.
- A file action (:class:`WriteTempMetadata`, :class:`WriteMetadata`, :class:`ClearTempMetadata`)
  is followed by a :class:`FileDone` once it is durable (or failed); the machine emits at most one
  file action at a time and nothing that depends on it before its :class:`FileDone`.
- Heartbeats are oneway (:class:`SendHeartbeat`): no outcome is fed back.

Theory of operation: frozen dataclasses, grouped into the :data:`Event` and :data:`Action` unions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import enum
from typing import ClassVar, Mapping, Optional, Protocol, Union

from broker.ha.autoswitch.metadata_file import BrokerMetadata, TempBrokerMetadata
from controller.bodies import SyncStateSet
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from controller.fastjson import get_long_list, loads_object
from controller.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    EmptyHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    WireField,
)

INT_MAX = 2 ** 31 - 1


@dataclass(frozen=True)
class ReplicasConfig:
    """The BrokerConfig keys ReplicasManager reads (Apache's names and defaults, in ms)."""

    cluster_name: str  # brokerClusterName
    broker_name: str  # brokerName
    broker_address: str  # the broker's own ip:port (BrokerController.getBrokerAddr)
    controller_addresses: tuple[str, ...]  # controllerAddr split on ';'
    broker_heartbeat_interval_ms: int = 1000  # brokerHeartbeatInterval
    sync_broker_metadata_period_ms: int = 5000  # syncBrokerMetadataPeriod
    check_sync_state_set_period_ms: int = 5000  # checkSyncStateSetPeriod
    sync_controller_metadata_period_ms: int = 10000  # syncControllerMetadataPeriod
    controller_heartbeat_timeout_ms: int = 10000  # controllerHeartBeatTimeoutMills
    broker_election_priority: int = INT_MAX  # brokerElectionPriority
    first_task_delay_ms: int = 3000  # the 3 s initial delay of Apache's scheduled tasks
    retry_interval_ms: int = 5000  # RETRY_INTERVAL_SECOND: startBasicService retried after it
    metadata_retry_ms: int = 1000  # schedulingSyncControllerMetadata: 1 s between rounds
    register_attempts: int = 5  # register() tried 5 times before startBasicService fails
    register_backoff_ms: int = 500  # Apache: random.nextInt(1000) (here fixed: no randomness)
    max_redirects: int = 3  # CONTROLLER_NOT_LEADER answers naming a leader, per request
    request_timeout_ms: int = 3000  # BrokerOuterAPI's invokeSync timeout

    def __post_init__(self) -> None:
        if not self.controller_addresses or any(not a for a in self.controller_addresses):
            raise ValueError("controllerAddr: at least one controller address (ip:port;ip:port) is required")


# ------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class Start:
    """``start``: what the broker found on disk (``brokerIdentity``, ``brokerIdentity-temp``)."""

    now_ms: int
    metadata: Optional[BrokerMetadata]
    temp: Optional[TempBrokerMetadata]


@dataclass(frozen=True)
class Tick:
    now_ms: int


@dataclass(frozen=True)
class Answered:
    rid: int
    now_ms: int
    code: int
    remark: Optional[str] = None
    fields: Mapping[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None


@dataclass(frozen=True)
class CallFailed:
    rid: int
    now_ms: int
    reason: str = ""


@dataclass(frozen=True)
class FileDone:
    now_ms: int
    ok: bool = True
    reason: str = ""


@dataclass(frozen=True)
class RoleChangeNotified:
    """A ``NOTIFY_BROKER_ROLE_CHANGED`` (1008) request the broker's door received."""

    now_ms: int
    fields: Mapping[str, str]
    body: Optional[bytes]


@dataclass(frozen=True)
class SyncStateSetProposed:
    """The HA service proposes a new SyncStateSet (``syncStateSetChangedListener``)."""

    now_ms: int
    members: frozenset[int]


@dataclass(frozen=True)
class Shutdown:
    now_ms: int


Event = Union[Start, Tick, Answered, CallFailed, FileDone, RoleChangeNotified, SyncStateSetProposed, Shutdown]


@dataclass(frozen=True)
class NotifyBrokerRoleChangedRequestHeader:
    """``NotifyBrokerRoleChangedRequestHeader`` (what :mod:`controller.notify` writes)."""

    master_address: Optional[str] = None
    master_epoch: Optional[int] = None
    sync_state_set_epoch: Optional[int] = None
    master_broker_id: Optional[int] = None
    WIRE: ClassVar[tuple[WireField, ...]] = (
        WireField("master_address", "masterAddress", "str"), WireField("master_epoch", "masterEpoch", "int"),
        WireField("sync_state_set_epoch", "syncStateSetEpoch", "int"),
        WireField("master_broker_id", "masterBrokerId", "long"))


# ------------------------------------------------------------------------------ actions
RequestHeader = Union[EmptyHeader, GetNextBrokerIdRequestHeader, ApplyBrokerIdRequestHeader,
                      RegisterBrokerToControllerRequestHeader, ElectMasterRequestHeader,
                      GetReplicaInfoRequestHeader, AlterSyncStateSetRequestHeader]


@dataclass(frozen=True)
class ControllerCall:
    """Send ``code`` with ``header`` (and ``body``) to ``address``; feed back its outcome."""

    rid: int
    address: str
    code: int
    header: RequestHeader
    body: Optional[SyncStateSet] = None


@dataclass(frozen=True)
class SendHeartbeat:
    """``BROKER_HEARTBEAT`` oneway to one controller."""

    address: str
    header: BrokerHeartbeatRequestHeader


@dataclass(frozen=True)
class WriteTempMetadata:
    metadata: TempBrokerMetadata


@dataclass(frozen=True)
class WriteMetadata:
    metadata: BrokerMetadata


@dataclass(frozen=True)
class ClearTempMetadata:
    pass


@dataclass(frozen=True)
class SetLocalBrokerId:
    """``haService.setLocalBrokerId``: the broker's controller id is known."""

    broker_id: int


@dataclass(frozen=True)
class SetFenced:
    """``setFenced``: refuse writes (and stay isolated from the name server) while True."""

    fenced: bool


@dataclass(frozen=True)
class ChangeToMaster:
    """Become the master of epoch ``new_master_epoch`` (``master_unchanged``: it already was;
    Apache's ``changeToMasterWhenLastRoleIsMaster``)."""

    new_master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    master_unchanged: bool = False


@dataclass(frozen=True)
class ChangeToSlave:
    """Follow ``master_address`` in epoch ``master_epoch`` (``master_unchanged``: same master as
    before, a new epoch; Apache's ``changeToSlaveWhenMasterNotChange``)."""

    master_address: Optional[str]
    master_epoch: int
    master_broker_id: int
    master_unchanged: bool = False


@dataclass(frozen=True)
class ChangeSyncStateSet:
    """``haService.setSyncStateSet``: the controller's SyncStateSet of a newer epoch."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class Problem:
    """Something an operator must see (a log line); the machine keeps retrying."""

    text: str


Action = Union[ControllerCall, SendHeartbeat, WriteTempMetadata, WriteMetadata, ClearTempMetadata,
               SetLocalBrokerId, SetFenced, ChangeToMaster, ChangeToSlave, ChangeSyncStateSet, Problem]


# ------------------------------------------------------------------------------ states and tables
class State(enum.Enum):
    INITIAL = "INITIAL"
    FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE = "FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE"
    REGISTER_TO_CONTROLLER_DONE = "REGISTER_TO_CONTROLLER_DONE"
    RUNNING = "RUNNING"
    SHUTDOWN = "SHUTDOWN"


class RegisterState(enum.Enum):
    INITIAL = "INITIAL"
    CREATE_TEMP_METADATA_FILE_DONE = "CREATE_TEMP_METADATA_FILE_DONE"
    CREATE_METADATA_FILE_DONE = "CREATE_METADATA_FILE_DONE"
    REGISTERED = "REGISTERED"


class Step(enum.Enum):
    """What a state is waiting for to move on."""

    LEADER_FOUND = "a controller named the leader"
    REGISTERED = "CONTROLLER_REGISTER_BROKER answered"
    MASTER_KNOWN = "a master is known (register or elect answer)"


NEXT_STATE: dict[tuple[State, Step], State] = {
    (State.INITIAL, Step.LEADER_FOUND): State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE,
    (State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE, Step.REGISTERED): State.REGISTER_TO_CONTROLLER_DONE,
    (State.REGISTER_TO_CONTROLLER_DONE, Step.MASTER_KNOWN): State.RUNNING,
}

# (brokerIdentity present, brokerIdentity-temp present) -> where the register sequence resumes
ON_DISK: dict[tuple[bool, bool], RegisterState] = {
    (False, False): RegisterState.INITIAL,
    (False, True): RegisterState.CREATE_TEMP_METADATA_FILE_DONE,
    (True, False): RegisterState.CREATE_METADATA_FILE_DONE,
    (True, True): RegisterState.CREATE_METADATA_FILE_DONE,
}

# the request each register state sends
REGISTER_REQUEST: dict[RegisterState, int] = {
    RegisterState.INITIAL: Q.CONTROLLER_GET_NEXT_BROKER_ID,
    RegisterState.CREATE_TEMP_METADATA_FILE_DONE: Q.CONTROLLER_APPLY_BROKER_ID,
    RegisterState.CREATE_METADATA_FILE_DONE: Q.CONTROLLER_REGISTER_BROKER,
}

# the requests whose answers each state still acts on (others are dropped)
ACCEPTS: dict[State, frozenset[int]] = {
    State.INITIAL: frozenset({Q.CONTROLLER_GET_METADATA_INFO}),
    State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE: frozenset({
        Q.CONTROLLER_GET_METADATA_INFO, Q.CONTROLLER_GET_NEXT_BROKER_ID, Q.CONTROLLER_APPLY_BROKER_ID,
        Q.CONTROLLER_REGISTER_BROKER}),
    State.REGISTER_TO_CONTROLLER_DONE: frozenset({Q.CONTROLLER_GET_METADATA_INFO, Q.CONTROLLER_ELECT_MASTER}),
    State.RUNNING: frozenset({Q.CONTROLLER_GET_METADATA_INFO, Q.CONTROLLER_ELECT_MASTER,
                              Q.CONTROLLER_GET_REPLICA_INFO, Q.CONTROLLER_REGISTER_BROKER,
                              Q.CONTROLLER_ALTER_SYNC_STATE_SET}),
    State.SHUTDOWN: frozenset(),
}

# answers that say "ask another controller" rather than "no"
REROUTE = frozenset({RC.CONTROLLER_NOT_LEADER})


class HAView(Protocol):
    """What the machine reads of the store and the HA service (``getLastEpoch``,
    ``getMaxPhyOffset``, ``getConfirmOffset``, ``maybeShrinkSyncStateSet``)."""

    def last_epoch(self) -> int: ...

    def max_phy_offset(self) -> int: ...

    def confirm_offset(self) -> int: ...

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]: ...


def sync_state_set_of(body: Optional[bytes]) -> SyncStateSet:
    return SyncStateSet.decode(body) if body else SyncStateSet((), 0)


def elect_body_set(body: Optional[bytes]) -> tuple[int, ...]:
    """The ``syncStateSet`` of an ``ElectMasterResponseBody`` (:mod:`controller.bodies` writes it)."""
    if not body:
        return ()
    return tuple(get_long_list(loads_object(body), "syncStateSet") or ())


"""Shared pieces of the broker processors: header parsing, error mapping, raw store reads.

Rules:
- Header fields are strings (RocketMQ's ``decodeCommandCustomHeader``); a required field that is
  missing or not a number is answered ``SYSTEM_ERROR`` "the custom field <name> is null" / "...
  is not a number" (:class:`HeaderError`, ``broker.remoting.header_fields``), never a traceback.
- :func:`refusal_response` is the remoting door's one translation of a refusal
  (``broker.refusals.Refusal``, which the HTTP API calls ``BrokerApiError``) into a RocketMQ
  response code and RocketMQ's remark: NOT_MASTER and SERVICE_NOT_AVAILABLE ->
  ``SERVICE_NOT_AVAILABLE`` (a slave refuses writes that way in RocketMQ), TOPIC_NOT_EXIST,
  NO_PERMISSION, MESSAGE_ILLEGAL/PROPERTIES_SIZE_EXCEEDED -> ``MESSAGE_ILLEGAL``, the
  stored-but-not-durable statuses keep their codes, anything else ``SYSTEM_ERROR``.
- Raw reads (:func:`raw_message_at`) return the commitlog record bytes exactly as stored, which
  is what RocketMQ sends to clients in PULL/VIEW/QUERY bodies.

Theory of operation: small pure helpers; the only store access is through the controller's
StoreAccess object and the commitlog's ``get_message(offset, size)``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final, Optional, Protocol

from broker import refusals
from broker.refusals import Refusal, StoreNotOpen
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import ResponseCode as R
from broker.remoting.header_fields import HeaderError, field_bool, field_int, field_str  # noqa: F401 (the processors' names)

if TYPE_CHECKING:  # pragma: no cover
    from broker.api.metrics import BrokerMetrics
    from broker.config.broker_config import BrokerConfig, MessageStoreConfig
    from broker.metadata_access import MetadataAccessor
    from broker.remoting.processors.consumer_manager import ConsumerManager
    from broker.remoting.server import Handler, RemotingConnection
    from broker.send_service import SendMessageService
    from broker.store_access import StoreAccess

FAQ: Final = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
SERVICE_NOT_AVAILABLE_REMARK: Final = (
    "service not available now. It may be caused by one of the following reasons: the broker's disk is full, "
    "messages are put to the slave, message store has been shut down, etc.")

_CODE_MAP: Final = {
    refusals.NOT_MASTER: R.SERVICE_NOT_AVAILABLE, refusals.SERVICE_NOT_AVAILABLE: R.SERVICE_NOT_AVAILABLE,
    refusals.TOPIC_NOT_EXIST: R.TOPIC_NOT_EXIST, refusals.NO_PERMISSION: R.NO_PERMISSION,
    refusals.MESSAGE_ILLEGAL: R.MESSAGE_ILLEGAL, refusals.PROPERTIES_SIZE_EXCEEDED: R.MESSAGE_ILLEGAL,
    refusals.FLUSH_DISK_TIMEOUT: R.FLUSH_DISK_TIMEOUT, refusals.FLUSH_SLAVE_TIMEOUT: R.FLUSH_SLAVE_TIMEOUT,
    refusals.SLAVE_NOT_AVAILABLE: R.SLAVE_NOT_AVAILABLE, refusals.SUBSCRIPTION_GROUP_NOT_EXIST: R.SUBSCRIPTION_GROUP_NOT_EXIST,
}


class BrokerHost(Protocol):
    """What a processor may use of its broker (``BrokerController`` provides it; issue 26.3: the
    processors' context is typed, and none imports the controller)."""

    broker_name: str
    broker_id: int
    broker_role: str
    cluster_name: str
    broker_ip: str
    listen_port: int
    ha_listen_port: int
    store_host: tuple[str, int]
    max_message_size: int
    started_ms: int
    broker_config: BrokerConfig
    store_config: MessageStoreConfig
    metadata: MetadataAccessor
    metrics: BrokerMetrics
    store_access: Optional[StoreAccess]  # None until the store is open and after it closed

    def is_master(self) -> bool: ...

    def check_writable(self) -> None: ...


class TopicRules(Protocol):
    """What the processors share with the HTTP door's ``broker.processor.BrokerProcessor``."""

    def create_topic(self, topic: str, read_q: int, write_q: int, perm: int, *, order: bool = False) -> object: ...

    def is_offset_reset(self, group: str, topic: str, queue_id: int, offset: int) -> bool: ...


class OffsetByTime(Protocol):
    """``admin.AdminBrokerProcessor``'s SEARCH_OFFSET_BY_TIMESTAMP lookup, shared with topic admin."""

    def offset_by_time(self, topic: str, q: int, timestamp: int) -> int: ...


class RemotingContext(Protocol):
    """What a processor may use of the broker's remoting side (``BrokerRemoting`` provides it):
    a narrow contract instead of the object, so no processor imports the module that builds it.
    Read-only members are properties: a narrow view of a wider object (issue 26.3)."""

    controller: BrokerHost
    send_service: SendMessageService  # the send path both doors share (broker.send_service)
    consumers: ConsumerManager  # the live clients by group (processors.consumer_manager)
    stopping: bool

    @property
    def broker_processor(self) -> TopicRules: ...  # topic creation, offset-reset checks shared with HTTP

    @property
    def admin(self) -> OffsetByTime: ...  # offset-by-time lookups

    def registrar_wakeup(self) -> None: ...

    async def register_now(self, timeout_s: float) -> bool: ...


class HandlerRegistry(Protocol):
    """Where a processor registers its request handlers and the listeners called when a connection
    closes (``broker.remoting.server.RemotingServer``)."""

    close_listeners: list[Callable[[RemotingConnection], None]]

    def register(self, code: int, handler: Handler) -> None: ...


class Processor:
    """Base of the request processors: the broker's remoting context and its controller."""

    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx

    @property
    def c(self) -> BrokerHost:
        return self.ctx.controller

    @property
    def store(self) -> StoreAccess:
        """The broker's store; a request racing a stop (or a start) is refused, never an
        ``AttributeError`` on ``None``."""
        sa = self.ctx.controller.store_access
        if sa is None:
            raise StoreNotOpen()
        return sa


def refusal_response(cmd: RemotingCommand, exc: Refusal, header: Optional[dict[str, Any]] = None) -> RemotingCommand:
    """The remoting door's answer to a refusal (module rules)."""
    code = _CODE_MAP.get(exc.code, R.SYSTEM_ERROR)
    remark = exc.message
    if exc.code == refusals.NOT_MASTER:
        master = exc.extra.get("masterAddress")
        remark = f"{SERVICE_NOT_AVAILABLE_REMARK} ({exc.message}{'; master API ' + str(master) if master else ''})"
    elif exc.code == refusals.TOPIC_NOT_EXIST:
        remark = exc.message + FAQ
    elif exc.code == refusals.OS_PAGECACHE_BUSY:
        remark = "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
    return cmd.response(code, remark, header or {})


#: the old name, imported by the compiled ``processors/send.py``




def raw_message_at(controller: Any, offset: int) -> Optional[bytes]:
    """The stored record at a commitlog offset, verified (None if no record starts there).

    Through ``get_record`` (size from the record's own TOTALSIZE), which both commitlogs serve:
    DLedger mode refuses partial reads such as a 4-byte size header (issue 14.4)."""
    buf = controller.store_access.commitlog.get_record(offset)
    return None if buf is None else bytes(buf)

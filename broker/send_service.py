"""SendMessageService: the one send path both doors share (HTTP API and RocketMQ remoting).

Rules (RocketMQ 4.9.8's ``AbstractSendMessageProcessor.msgCheck`` and ``SendMessageProcessor``):
- The write gate first: ``check_writable()`` refuses on a slave or follower (``NOT_MASTER`` with
  the master's address). Refusals are ``broker.refusals`` types (``TopicNotFound``,
  ``NoPermission``, ``MessageIllegal``, ``StoreNotOpen``); each door translates them.
- The topic must exist, or is created when ``autoCreateTopicEnable`` (``defaultTopicQueueNums``
  queues, perm 6); its perm must allow writes; an ordered topic refuses sends at once when
  ``brokerPermission`` has no write bit (the others move away as routes refresh).
- An explicit queue id must be below ``writeQueueNums``; otherwise queues are chosen round-robin
  per topic (one counter per topic, shared by both doors).
- The put goes through ``StoreAccess`` (the dedup window unless the caller says the UNIQ_KEYs are
  the broker's own or a resend). A put that stored nothing raises ``PutRefused`` (its status); a
  ``SERVICE_NOT_AVAILABLE`` in DLedger mode re-asks the write gate first, so a leadership lost
  during the put is answered ``NOT_MASTER`` with the new master. Each door turns a status into
  its answer with its one table.
- Every put is counted once, whatever the door: latency by door, messages by status, and on
  ``PUT_OK`` bytes and ``TOPIC_PUT_NUMS`` (``mqadmin statsAll``), in one compiled call
  (``BrokerMetrics.observe_put``).
- Compiled with mypyc (``broker.native``, issue 22 H10): ``SendMessageService`` is a native
  class (no attribute assignment on its methods; a stand-in for it is not one: tests drive the
  real service over a fake ``SendHost``). The host's members are read through the Protocol.

Theory of operation: the doors keep what differs between them (parsing a request, building the
messages, the answer's shape and codes); this service holds what must not differ. It is built
by ``BrokerProcessor`` and handed to the remoting processors through their context.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, Optional, Protocol, Sequence

from broker.refusals import MessageIllegal, NoPermission, StoreNotOpen, TopicNotFound
from broker.store.put_result import PutMessageStatus, PutRefused

if TYPE_CHECKING:  # pragma: no cover
    from broker.api.metrics import BrokerMetrics
    from broker.config.broker_config import BrokerConfig
    from broker.metadata_access import MetadataAccessor, TopicView
    from broker.store.message import MessageExt
    from broker.store_access import PutOutcome, StoreAccess

PERM_WRITE: Final = 2


class SendHost(Protocol):
    """What the send path asks of its broker (``BrokerController`` is one)."""

    broker_ip: str
    broker_config: BrokerConfig  # brokerPermission
    default_topic_queue_nums: int
    auto_create_topic_enable: bool
    dledger_enabled: bool
    store_access: Optional[StoreAccess]
    metadata: MetadataAccessor
    metrics: BrokerMetrics

    def check_writable(self) -> None: ...


class SendMessageService:
    def __init__(self, host: SendHost) -> None:
        self.host = host
        self._rr: dict[str, int] = {}

    # --- before the put -------------------------------------------------------------------
    def prepare(self, topic: str, requested_queue: int | None) -> tuple[TopicView, int]:
        """The write gate, the topic's write rules and the queue (module rules)."""
        self.host.check_writable()
        tc = self.topic_for_write(topic)
        return tc, self.select_queue(topic, requested_queue, tc.write_queue_nums)

    def topic_for_write(self, topic: str) -> TopicView:
        h = self.host
        tc = h.metadata.topic(topic)
        if tc is None:
            if not h.auto_create_topic_enable:
                raise TopicNotFound(f"topic[{topic}] not exist, apply first please! (autoCreateTopicEnable=false)")
            tc = h.metadata.create_topic(topic, h.default_topic_queue_nums, h.default_topic_queue_nums, 6)
        if not tc.perm & PERM_WRITE:
            raise NoPermission(f"the topic[{topic}] sending message is forbidden (perm {tc.perm})")
        if tc.order and not int(getattr(h.broker_config, "broker_permission", 6)) & PERM_WRITE:
            # as 4.9.8's msgCheck: an ordered topic's sends stop at once; the others move away as the
            # producers' routes (registered read-only) refresh
            raise NoPermission(f"the broker[{h.broker_ip}] sending message is forbidden")
        return tc

    def select_queue(self, topic: str, requested: int | None, write_queue_nums: int) -> int:
        if requested is not None:
            if requested >= write_queue_nums:
                raise MessageIllegal(f"request queueId[{requested}] is illegal, topic {topic} "
                                     f"has writeQueueNums {write_queue_nums}")
            return requested
        n = self._rr.get(topic, -1) + 1
        self._rr[topic] = n
        return n % write_queue_nums

    # --- the put --------------------------------------------------------------------------
    async def put(self, msgs: Sequence[MessageExt], producer_keys: bool = True) -> PutOutcome:
        store = self.host.store_access
        if store is None:  # the doors open after the store: only a request racing a stop gets here
            raise StoreNotOpen()
        try:
            return await store.put_messages(msgs, producer_keys)
        except PutRefused as refused:
            if refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and self.host.dledger_enabled:
                self.host.check_writable()  # leadership lost mid-put: NOT_MASTER with the new master's address
            raise

    # --- after the put --------------------------------------------------------------------
    def observe(self, door: str, topic: str, count: int, body_bytes: int, t0: float,
                status: PutMessageStatus) -> None:
        """Count one put (module rules); ``door`` labels the latency ("single", "batch", "remoting")."""
        # PUT_OK by identity: an Enum's ``value`` is a property interpreted by enum.py
        name = "PUT_OK" if status is PutMessageStatus.PUT_OK else status.value
        self.host.metrics.observe_put(door, topic, count, body_bytes, time.perf_counter() - t0, name)

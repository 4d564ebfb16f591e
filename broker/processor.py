"""BrokerProcessor: what the HTTP API asks of a broker (RocketMQ's Send/Pull/Query/Admin processors).

Rules:
- Writes (produce, topic create, offset commit) first ask the controller
  ``check_writable()`` — the single "am I master?" gate, which raises ``NOT_MASTER`` with the
  master's API address on a slave (classic) or follower (DLedger). Reads work on every role.
- Produce: the topic must exist, or is auto-created when ``autoCreateTopicEnable`` (with
  ``defaultTopicQueueNums`` queues); an explicit ``queueId`` must be ``< writeQueueNums``;
  otherwise queues are chosen round-robin per topic. The broker sets ``UNIQ_KEY``/``TAGS``/
  ``KEYS`` as the Java producer would and ``CLUSTER`` as 4.9.8's broker does; ``WAIT`` is not
  stored (``views.to_message_ext``).
- On a SYNC_MASTER the put waits for a slave ack (GroupTransferService) inside the store put:
  HAService is the CommitLog's replica hook, and the put's future resolves with the replication
  status (the one SYNC_MASTER wait). ``FLUSH_SLAVE_TIMEOUT``/``SLAVE_NOT_AVAILABLE`` (and
  ``FLUSH_DISK_TIMEOUT``) are returned as errors *with* the msgId and offsets, because the
  message is stored on the master (RocketMQ does not roll back either).
- Pull never blocks (no long polling): ``FOUND``, ``NO_NEW_MSG``, ``NO_MATCHED_MSG``,
  ``OFFSET_TOO_SMALL``, ``OFFSET_OVERFLOW_ONE``, ``OFFSET_OVERFLOW_BADLY``, ``NO_MESSAGE_IN_QUEUE``
  with ``nextBeginOffset``, ``minOffset`` and ``maxOffset`` as RocketMQ's GetMessageResult.
- A refusal is a ``broker.refusals`` type (``TopicNotFound``, ``NotMaster``, ``NotDurable``, ...);
  the HTTP API's error middleware is its one translation (``broker.api.errors.http_error``).
- Every store call goes through :class:`broker.store_access.StoreAccess`, so this module does
  not depend on the store's internals.

Theory of operation: stateless apart from the round-robin counters; the controller owns the
store, metadata managers, HA and role, and hands itself in as a :class:`ProcessorHost` (the
members this module uses), so it does not import ``broker.controller`` (issue 26).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional, Protocol

from broker.api.validation import ProduceMessage
from broker.api.views import UniqKeyGenerator, message_to_json, to_message_ext
from broker.offset_commit import check_commit
from broker.refusals import (BadRequest, LeadershipTransferFailed, MessageNotFound, NoPermission, NotDurable, NotMaster,
                             StoreNotOpen, TopicNotFound)
from broker.send_service import SendMessageService
from broker.store.message import MessageFormatError
from broker.store.message_id import decode_message_id
from broker.store.put_result import PutMessageStatus
from broker.store_access import PutOutcome, StoreAccess

if TYPE_CHECKING:  # pragma: no cover
    from broker.api.metrics import BrokerMetrics
    from broker.config.broker_config import BrokerConfig
    from broker.metadata_access import MetadataAccessor
    from broker.role import DLedgerRoleChangeHandler

PERM_READ, PERM_WRITE = 4, 2


class ProcessorHost(Protocol):
    """What the processor asks of its broker (``BrokerController`` is one): the write gate, the
    store and metadata, identity and produce settings, status, and the DLedger role handler."""

    broker_ip: str
    cluster_name: str
    store_host: tuple[str, int]
    broker_config: BrokerConfig  # brokerPermission
    max_message_size: int
    default_topic_queue_nums: int
    auto_create_topic_enable: bool
    dledger_enabled: bool
    store_access: Optional[StoreAccess]
    metadata: "MetadataAccessor"
    metrics: "BrokerMetrics"
    role_handler: Optional["DLedgerRoleChangeHandler"]

    def check_writable(self) -> None: ...

    def health(self) -> dict[str, Any]: ...

    def status(self) -> dict[str, Any]: ...

    def config_file(self, name: str) -> dict[str, Any]: ...

    def dledger_handler(self) -> "DLedgerRoleChangeHandler": ...


class BrokerProcessor:
    def __init__(self, controller: ProcessorHost) -> None:
        self.c = controller
        self.send = SendMessageService(controller)  # the send path both doors share
        self._uniq = UniqKeyGenerator(controller.broker_ip)

    @property
    def _store(self) -> StoreAccess:
        sa = self.c.store_access
        if sa is None:  # the HTTP API starts after the store: only a request racing a stop gets here
            raise StoreNotOpen()
        return sa

    # ------------------------------------------------------------------ controller pass-through
    @property
    def metrics(self) -> BrokerMetrics:
        return self.c.metrics

    def health(self) -> dict[str, Any]:
        return self.c.health()

    async def status(self) -> dict[str, Any]:
        out = self.c.status()
        if self.c.role_handler is not None:
            out["dledger"] = await self.c.role_handler.status()
        return out

    def config_file(self, name: str) -> dict[str, Any]:
        return self.c.config_file(name)

    # ------------------------------------------------------------------ DLedger admin
    async def dledger_status(self) -> dict[str, Any]:
        return await self.c.dledger_handler().status()

    async def transfer_leadership(self, to: str) -> dict[str, Any]:
        """Only the leader can hand over: elsewhere NOT_MASTER names the leader's API address."""
        h = self.c.dledger_handler()
        if to not in h.http_peers:
            raise BadRequest(f"unknown peer id {to!r}; peers are {', '.join(sorted(h.http_peers))}")
        if not h.is_leader:
            raise NotMaster(f"{h.self_id} is not the DLedger leader; ask the leader ({h.leader_id})",
                            h.api_address_of(h.leader_id))
        result = await h.transfer_leadership(to)
        if not result["ok"]:
            raise LeadershipTransferFailed(f"transfer of leadership to {to} failed: {result['code']}", result)
        return result

    async def set_preferred_leaders(self, ids: list[str]) -> dict[str, Any]:
        h = self.c.dledger_handler()
        try:
            return {"selfId": h.self_id, "preferredLeaders": await h.set_preferred_leaders(ids)}
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    # ------------------------------------------------------------------ produce
    @property
    def max_message_size(self) -> int:
        return self.c.max_message_size

    @property
    def default_topic_queue_nums(self) -> int:
        return self.c.default_topic_queue_nums

    def _finish_put(self, kind: str, topic: str, count: int, body_bytes: int, t0: float,
                    result: dict[str, Any], outcome: PutOutcome) -> dict[str, Any]:
        self.send.observe(kind, topic, count, body_bytes, t0, outcome.status)
        if outcome.status is not PutMessageStatus.PUT_OK:  # stored, not durable as asked (SYNC_MASTER, SYNC_FLUSH)
            raise NotDurable(outcome.status, outcome.detail, **result)
        result["status"] = "SEND_OK"
        return result

    async def put_message(self, msg: ProduceMessage, born_host: tuple[str, int]) -> dict[str, Any]:
        t0 = time.perf_counter()
        _tc, queue_id = self.send.prepare(msg.topic, msg.queue_id)
        now = int(time.time() * 1000)
        inner = to_message_ext(msg, queue_id=queue_id, uniq_key=msg.uniq_key or self._uniq.next(now), born_host=born_host,
                               store_host=self.c.store_host, now_ms=now, cluster=self.c.cluster_name)
        r = await self.send.put([inner], producer_keys=bool(msg.uniq_key))
        result = {
            "msgId": r.msg_ids[0], "uniqKey": inner.properties["UNIQ_KEY"], "topic": msg.topic,
            "queueId": queue_id if r.queue_id is None else r.queue_id,
            "queueOffset": r.queue_offsets[0], "commitLogOffset": r.physical_offsets[0], "storeSize": r.wrote_bytes,
        }
        return self._finish_put("single", msg.topic, 1, len(msg.body), t0, result, r)

    async def put_messages(self, msgs: list[ProduceMessage], born_host: tuple[str, int]) -> dict[str, Any]:
        t0 = time.perf_counter()
        topic = msgs[0].topic
        _tc, queue_id = self.send.prepare(topic, msgs[0].queue_id)
        now = int(time.time() * 1000)
        inners = [to_message_ext(m, queue_id=queue_id, uniq_key=m.uniq_key or self._uniq.next(now), born_host=born_host,
                                 store_host=self.c.store_host, now_ms=now, cluster=self.c.cluster_name) for m in msgs]
        r = await self.send.put(inners, producer_keys=all(m.uniq_key for m in msgs))
        result = {
            "topic": topic, "queueId": queue_id if r.queue_id is None else r.queue_id, "count": len(msgs),
            "msgIds": r.msg_ids, "uniqKeys": [i.properties["UNIQ_KEY"] for i in inners],
            "queueOffsets": r.queue_offsets, "commitLogOffsets": r.physical_offsets,
        }
        return self._finish_put("batch", topic, len(msgs), sum(len(m.body) for m in msgs), t0, result, r)

    # ------------------------------------------------------------------ pull and lookups
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int) -> dict[str, Any]:
        tc = self.c.metadata.topic(topic)
        if tc is None and not self._store.has_queue(topic, queue_id):
            raise TopicNotFound(f"topic[{topic}] not exist, apply first please!")
        if tc is not None:
            if not tc.perm & PERM_READ:
                raise NoPermission(f"the topic[{topic}] pulling message is forbidden (perm {tc.perm})")
            if queue_id >= tc.read_queue_nums and not self._store.has_queue(topic, queue_id):
                raise BadRequest(f"queueId[{queue_id}] is illegal, topic[{topic}] readQueueNums {tc.read_queue_nums}")
        res = self._store.get_messages(topic, queue_id, offset, max_count)
        msgs = [message_to_json(m) for m in res["messages"]]
        self.c.metrics.get_messages.inc(topic, amount=len(msgs))
        res["messages"] = msgs
        return res

    def view_message_by_offset(self, offset: int) -> dict[str, Any]:
        m = self._store.message_at(offset)
        if m is None:
            raise MessageNotFound(f"no message at commitlog offset {offset}")
        return message_to_json(m)

    def view_message_by_id(self, msg_id: str, topic: str | None) -> dict[str, Any]:
        try:
            _host, offset = decode_message_id(msg_id)
        except MessageFormatError:
            if topic is None:
                raise BadRequest(f"{msg_id!r} is not an offset msgId (32 or 56 hex chars); pass ?topic= to look up a uniq key") from None
            offset = None
        if offset is not None:
            m = self._store.message_at(offset)
            if m is not None:
                return message_to_json(m)
        if topic is not None:  # a uniq key (client msgId) is indexed as topic#UNIQ_KEY
            for m in self._store.query_by_key(topic, msg_id, 1):
                return message_to_json(m)
        raise MessageNotFound(f"no message with id {msg_id}")

    def query_message_by_key(self, topic: str, key: str, max_num: int) -> dict[str, Any]:
        msgs = self._store.query_by_key(topic, key, max_num)
        return {"topic": topic, "key": key, "messages": [message_to_json(m) for m in msgs]}

    # ------------------------------------------------------------------ topics and offsets
    def list_topics(self) -> dict[str, Any]:
        return {"topics": [tc.to_json() for tc in self.c.metadata.topics()]}

    def create_topic(self, topic: str, read_q: int, write_q: int, perm: int, *, order: bool = False) -> dict[str, Any]:
        self.c.check_writable()
        tc = self.c.metadata.create_topic(topic, read_q, write_q, perm, order=order)
        return {"topicConfig": tc.to_json(), "dataVersion": self.c.metadata.data_version("topics")}

    def topic_status(self, topic: str) -> dict[str, Any]:
        tc = self.c.metadata.topic(topic)
        if tc is None and not self._store.has_queue(topic, 0):
            raise TopicNotFound(f"topic[{topic}] not exist")
        n = tc.read_queue_nums if tc is not None else self._store.queue_count(topic)
        queues = [{"queueId": q, "minOffset": self._store.min_offset_in_queue(topic, q),
                   "maxOffset": self._store.max_offset_in_queue(topic, q)} for q in range(n)]
        return {"topic": topic, "topicConfig": tc.to_json() if tc is not None else None, "queues": queues}

    def is_offset_reset(self, group: str, topic: str, queue_id: int, offset: int) -> bool:
        """``broker.offset_commit.check_commit``: refuse a commit outside the queue; True for a reset."""
        return check_commit(self.c.metadata, self._store, group, topic, queue_id, offset)

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
        self.c.check_writable()
        self.c.metadata.commit_offset(group, topic, queue_id, offset)
        return {"group": group, "topic": topic, "queueId": queue_id, "offset": offset}

    def query_consumer_offsets(self, group: str | None, topic: str | None) -> dict[str, Any]:
        return {"offsets": self.c.metadata.offsets(group, topic)}

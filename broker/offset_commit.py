"""A consumer offset commit, checked once for both doors (``UPDATE_CONSUMER_OFFSET``, ``POST /consumer-offsets``).

Rules:
- The queue must exist: ``0 <= queueId < max(readQueueNums, writeQueueNums)`` of the topic's
  config, or a ConsumeQueue the store holds (a topic known only from its files). Anything else
  is refused (``TOPIC_NOT_EXIST`` for a topic the broker does not know, ``BAD_REQUEST`` for a
  queue it does not have), so no offset table fills with names and numbers nobody uses.
- The offset must lie in ``0 .. maxOffset`` of the queue (the next offset a consumer can ask
  for); past the end is ``BAD_REQUEST`` naming the range. RocketMQ 4.9.8 checks neither.
- :func:`check_commit` says whether the commit is a *reset*: it moves a committed offset back
  while that offset is still inside the queue. A reset needs admin (the permission table,
  ``broker.remoting.permissions``). Moving back from past the queue's end is a correction (a
  Java consumer commits one after ``OFFSET_ILLEGAL``) and needs only the commit's own SUB.

Theory of operation: pure checks over two narrow views (the topic table and the queues'
offsets); the doors call :func:`check_commit` before committing and ask for admin when it
returns True.
"""
from __future__ import annotations

from typing import Optional, Protocol

from broker.refusals import BadRequest, TopicNotFound


class _Topics(Protocol):
    def topic(self, topic: str) -> Optional[object]: ...

    def offsets(self, group: Optional[str], topic: Optional[str]) -> dict[str, dict[str, int]]: ...


class _Queues(Protocol):
    def has_queue(self, topic: str, queue_id: int) -> bool: ...

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...


def committed_offset(topics: _Topics, group: str, topic: str, queue_id: int) -> int:
    table = topics.offsets(group, topic).get(f"{topic}@{group}", {})
    return int(table.get(str(queue_id), -1))


def check_commit(topics: _Topics, queues: _Queues, group: str, topic: str, queue_id: int, offset: int) -> bool:
    """Refuse a commit outside the queue (``TopicNotFound``, ``BadRequest``); True when it is a reset (needs admin)."""
    tc = topics.topic(topic)
    if tc is None and not queues.has_queue(topic, queue_id):
        raise TopicNotFound(f"topic[{topic}] not exist on this broker; no offset to commit")
    n = max(int(getattr(tc, "read_queue_nums", 0)), int(getattr(tc, "write_queue_nums", 0))) if tc is not None else 0
    if not (0 <= queue_id < n) and not queues.has_queue(topic, queue_id):
        raise BadRequest(f"queueId {queue_id} is not a queue of topic {topic} (0..{max(n - 1, 0)})")
    top = queues.max_offset_in_queue(topic, queue_id)
    if not 0 <= offset <= top:
        raise BadRequest(f"offset {offset} is outside queue {topic}:{queue_id} (0..{top})")
    current = committed_offset(topics, group, topic, queue_id)
    return offset < current <= top

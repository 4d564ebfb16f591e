"""Topic, group and queue-id validity: the one rule shared by sends, dispatch and path builders.

Rules:
- A topic or a consumer/producer group is 1+ characters of ``[%|a-zA-Z0-9_-]``, exactly
  RocketMQ's ``TopicValidator.VALID_CHAR_BIT_MAP`` (regex ``^[%|a-zA-Z0-9_-]+$``). That set
  holds every name RocketMQ itself makes: ``%RETRY%<group>``, ``%DLQ%<group>``,
  ``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, ``rmq_sys_*``, ``TBW102``, ``<cluster>_REPLY_TOPIC``
  and ``%LMQ%...``; ``|`` is legal (RocketMQ never puts one in a name it makes, users may).
  It has no ``/``, ``\\``, ``.``, NUL, whitespace or non-ASCII letter, so a valid name is
  always one plain path component: never ``..``, never absolute, never a second level.
- Length: a topic is at most :data:`TOPIC_MAX_LENGTH` (255) characters, in a send as in a
  record read back (issue 14.4). RocketMQ 4.9.8 stopped at 127 (the v1 record's one-byte
  length); RocketMQ 5 writes longer topics with v2 magic (two-byte length, up to 32767), but
  the topic is also the ConsumeQueue directory's name, and 255 bytes is what a directory name
  can hold (``NAME_MAX``), so 255 is the longest topic any broker can actually serve. Topics
  over 127 are written with v2 magic (``message`` module). Groups: at most 255 (``Validators.CHARACTER_MAX_LENGTH``).
- A queue id is an int with ``0 <= queue_id < QUEUE_ID_LIMIT`` (65535; RocketMQ has no hard
  limit, real topics have a few to a few hundred queues, and the id becomes a directory name).
- Python's ``re`` ``$`` also matches before a trailing newline: checks use ``fullmatch``.

Theory of operation: pure functions (:func:`record_problem` remembers, bounded, the topics it
found valid: the answer for a name never changes). ``*_problem`` return ``None`` for a valid value or one
line saying why not (for logs and MESSAGE_ILLEGAL answers); ``check_*`` raise
:class:`InvalidNameError` with that line (for path builders, which must never build a path
from a bad name); :func:`record_problem` is what every dispatch path asks of a parsed record
(the send's rule, plus a non-negative queue offset). Compiled with mypyc (``broker.native``):
the reput thread asks it of every record while holding the GIL the put path needs.
"""
from __future__ import annotations

import re
from typing import Final, Protocol

__all__ = [
    "GOOD_RECORD_TOPICS_MAX", "GROUP_MAX_LENGTH", "QUEUE_ID_LIMIT", "RECORD_TOPIC_MAX_LENGTH", "TOPIC_MAX_LENGTH", "VALID_NAME",
    "InvalidNameError", "check_queue_id", "check_topic", "group_problem", "queue_id_problem",
    "record_problem", "topic_problem",
]

VALID_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]+")  # TopicValidator: ^[%|a-zA-Z0-9_-]+$ (use fullmatch)
TOPIC_MAX_LENGTH: Final = 255  # NAME_MAX of the ConsumeQueue directory (module rules); v2 magic past 127
RECORD_TOPIC_MAX_LENGTH: Final = TOPIC_MAX_LENGTH
GROUP_MAX_LENGTH: Final = 255  # Validators.CHARACTER_MAX_LENGTH
QUEUE_ID_LIMIT: Final = 65535  # queue ids are 0 .. QUEUE_ID_LIMIT - 1


class ParsedRecord(Protocol):
    """What :func:`record_problem` reads of a parsed record (a ``DispatchRequest``)."""

    # (read as ``object``: they come from a parsed record, and compiled code would check an ``int``
    # on read, turning a bad value into a TypeError instead of the problem this module names)
    @property
    def topic(self) -> object: ...

    @property
    def queue_id(self) -> object: ...

    @property
    def consume_queue_offset(self) -> object: ...


class InvalidNameError(ValueError):
    """A topic, group or queue id that must never become part of a file path."""


def _name_problem(kind: str, name: object, max_length: int) -> str | None:
    if not isinstance(name, str):
        return f"{kind} must be a string, not {type(name).__name__}"
    if not name:
        return f"{kind} is empty"
    if len(name) > max_length:
        return f"{kind} of {len(name)} characters is longer than {max_length}"
    if VALID_NAME.fullmatch(name) is None:
        return f"{kind} {name[:80]!r} has characters outside ^[%|a-zA-Z0-9_-]+$"
    return None


def topic_problem(topic: object, max_length: int = TOPIC_MAX_LENGTH) -> str | None:
    """Why ``topic`` is not a valid topic (``None`` if it is). Sends use the default length."""
    return _name_problem("topic", topic, max_length)


def group_problem(group: object) -> str | None:
    """Why ``group`` is not a valid consumer/producer group name (``None`` if it is)."""
    return _name_problem("group", group, GROUP_MAX_LENGTH)


def queue_id_problem(queue_id: object, queue_count: int | None = None) -> str | None:
    """Why ``queue_id`` is not a valid queue id (``None`` if it is); ``queue_count``, when the
    caller knows the topic's queue count, narrows the range to ``[0, queue_count)``."""
    if isinstance(queue_id, bool) or not isinstance(queue_id, int):
        return f"queue id must be an integer, not {type(queue_id).__name__}"
    limit = QUEUE_ID_LIMIT if queue_count is None else min(queue_count, QUEUE_ID_LIMIT)
    if not 0 <= queue_id < limit:
        return f"queue id {queue_id} is outside [0, {limit})"
    return None


def check_topic(topic: object, max_length: int = RECORD_TOPIC_MAX_LENGTH) -> str:
    """``topic`` if valid, else :class:`InvalidNameError` (path builders: the record limit)."""
    problem = topic_problem(topic, max_length)
    if problem is not None or not isinstance(topic, str):
        raise InvalidNameError(problem or "topic must be a string")
    return topic


def check_queue_id(queue_id: object) -> int:
    """``queue_id`` if valid, else :class:`InvalidNameError`."""
    problem = queue_id_problem(queue_id)
    if problem is not None or not isinstance(queue_id, int):
        raise InvalidNameError(problem or "queue id must be an integer")
    return queue_id


#: topics :func:`record_problem` found valid: a store holds few, and each is checked once, not
#: once per record (the regex was 8% of a reput thread); emptied when it reaches the bound
_GOOD_RECORD_TOPICS: Final[set[str]] = set()
GOOD_RECORD_TOPICS_MAX: Final = 4096


def record_problem(request: ParsedRecord) -> str | None:
    """Why a parsed commitlog record (a DispatchRequest: ``topic``, ``queue_id``,
    ``consume_queue_offset``) must not be dispatched, or ``None``. Same characters and queue
    range as a send, topic length up to the record limit (module rules), and a queue offset
    >= 0 (the store assigns them from 0; a negative one would name a ``-000...`` CQ file)."""
    topic = request.topic
    problem: str | None = None
    if type(topic) is not str or topic not in _GOOD_RECORD_TOPICS:
        problem = topic_problem(topic, RECORD_TOPIC_MAX_LENGTH)
        if problem is None and type(topic) is str:
            if len(_GOOD_RECORD_TOPICS) >= GOOD_RECORD_TOPICS_MAX:
                _GOOD_RECORD_TOPICS.clear()
            _GOOD_RECORD_TOPICS.add(topic)
    problem = problem or queue_id_problem(request.queue_id)
    offset = request.consume_queue_offset
    if problem is None and (isinstance(offset, bool) or not isinstance(offset, int)):
        problem = f"queue offset must be an integer, not {type(offset).__name__}"
    elif problem is None and isinstance(offset, int) and offset < 0:
        problem = f"queue offset {offset} is negative"
    return problem

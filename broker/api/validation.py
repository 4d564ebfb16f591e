"""Validation of everything a client sends: names, message JSON, batches, query parameters.

Rules (RocketMQ ``Validators`` / ``AbstractSendMessageProcessor.msgCheck``, DESIGN §7):
- Topic and group names match ``^[%|a-zA-Z0-9_-]{1,255}$`` (they become directory names).
  ``TBW102`` (AUTO_CREATE_TOPIC_KEY_TOPIC) and the reserved ``RMQ_SYS_DLEDGER_BARRIER`` cannot
  be produced to.
- A body is given as ``"body"`` with ``"bodyEncoding"`` ``"text"`` (UTF-8, default) or
  ``"base64"``; its decoded size must be ``<= maxMessageSize`` (a batch: the sum). Empty bodies
  are accepted, as the broker (not the Java client) accepts them.
- ``keys`` is a list of strings or one space-separated string; ``properties`` a flat object of
  strings. Names and values must not contain the separators ``\\x01``/``\\x02``; the encoded
  properties must fit a signed short (``PROPERTIES_SIZE_EXCEEDED``).
- ``queueId`` is absent/null (auto-select) or an integer ``>= 0``; the range check against
  ``writeQueueNums`` happens in the controller, which knows the topic.
- A batch holds at most ``maxBatchMessageCount`` messages (413 ``REQUEST_TOO_LARGE``, checked
  before any message is parsed) and its encoded size (per message: 20 bytes of fixed fields,
  body, properties, as RocketMQ's ``MessageBatch`` encoding) must fit ``maxMessageSize``, the
  limit RocketMQ puts on one batch (``MESSAGE_ILLEGAL``).
- A JSON body nested deeper than the parser's recursion limit is ``BAD_REQUEST`` (never a
  ``RecursionError``).

Theory of operation: pure functions from parsed JSON to :class:`ProduceMessage`, raising
:class:`BrokerApiError` with a message that names the offending field. No I/O.
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from broker.api.errors import BAD_REQUEST, MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED, REQUEST_TOO_LARGE, BrokerApiError

NAME_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
BARRIER_TOPIC = "RMQ_SYS_DLEDGER_BARRIER"
RESERVED_PRODUCE_TOPICS = frozenset({AUTO_CREATE_TOPIC_KEY_TOPIC, BARRIER_TOPIC})
MAX_PROPERTIES_BYTES = 32767
DEFAULT_MAX_BATCH_MESSAGE_COUNT = 4096
BATCH_MESSAGE_OVERHEAD = 20  # MessageBatch encoding: totalSize, magic, bodyCRC, flag, bodyLength (+ 2 props length)
#: Property names the broker manages itself; a client may not set them.
# TRAN_MSG/PGROUP: transactions are a remoting feature (END_TRANSACTION, check-back): not claimable over HTTP
RESERVED_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "REAL_TOPIC", "REAL_QID", "MSG_REGION", "TRACE_ON",
                                 "TRAN_MSG", "PGROUP"})


@dataclass(slots=True)
class ProduceMessage:
    """One message as a client asked for it (before the controller turns it into a store put)."""

    topic: str
    body: bytes
    queue_id: int | None = None
    tags: str = ""
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    uniq_key: str = ""  # the producer's own id (kept across its retries: deduplicated, broker.put_dedup)


def parse_json(raw: bytes) -> Any:
    """A request body as JSON, or ``BAD_REQUEST`` naming why (malformed, not UTF-8, nested too deep)."""
    if not raw:
        raise BrokerApiError(BAD_REQUEST, "request body is empty; expected a JSON object")
    try:
        return orjson.loads(raw)  # UTF-8 only; depth is capped at 1024 (orjson's own limit)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion" in str(exc).lower():
            raise BrokerApiError(BAD_REQUEST, "JSON body is nested too deeply") from None
        raise BrokerApiError(BAD_REQUEST, f"malformed JSON body: {exc}") from None


def check_name(value: Any, what: str = "topic") -> str:
    """Return ``value`` if it is a valid topic/group name, else raise ``MESSAGE_ILLEGAL``/``BAD_REQUEST``."""
    if not isinstance(value, str) or not value:
        raise BrokerApiError(BAD_REQUEST, f"{what} is required and must be a non-empty string")
    if not NAME_PATTERN.fullmatch(value):
        code = MESSAGE_ILLEGAL if what == "topic" else BAD_REQUEST
        shown = value if len(value) <= 140 else value[:137] + "..."
        raise BrokerApiError(
            code,
            f"the specified {what} [{shown}] is invalid: it must match ^[%|a-zA-Z0-9_-]{{1,255}}$",
        )
    return value


def check_produce_topic(value: Any) -> str:
    topic = check_name(value, "topic")
    if topic in RESERVED_PRODUCE_TOPICS:
        raise BrokerApiError(MESSAGE_ILLEGAL, f"the topic [{topic}] is reserved by the system and cannot be produced to")
    return topic


def int_field(obj: Mapping[str, Any], name: str, *, minimum: int | None = 0, default: Any = None) -> Any:
    value = obj.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BrokerApiError(BAD_REQUEST, f"{name} must be an integer, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise BrokerApiError(BAD_REQUEST, f"{name} must be >= {minimum}, got {value}")
    return value


def decode_body(obj: Mapping[str, Any], where: str = "message") -> bytes:
    encoding = obj.get("bodyEncoding", "text")
    body = obj.get("body")
    if body is None:
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: body is required")
    if not isinstance(body, str):
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: body must be a string (text or base64)")
    if encoding == "text":
        return body.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: body is not valid base64 ({exc})") from None
    raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: bodyEncoding must be 'text' or 'base64', got {encoding!r}")


def _check_prop_text(value: str, what: str) -> None:
    if "\x01" in value or "\x02" in value:
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{what} must not contain the characters \\x01 or \\x02")


def _parse_keys(raw: Any, where: str) -> list[str]:
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        keys = raw.split()
    elif isinstance(raw, list) and all(isinstance(k, str) for k in raw):
        keys = [k for k in raw if k]
    else:
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: keys must be a string or a list of strings")
    for k in keys:
        if any(c.isspace() for c in k):
            raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: key {k!r} contains whitespace (keys are space-separated)")
        _check_prop_text(k, f"{where}: key")
    return keys


def _parse_properties(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: properties must be an object of strings")
    props: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(value, str) or not name:
            raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: property {name!r} must have a non-empty name and a string value")
        if name in RESERVED_PROPERTIES:
            raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: property {name} is set by the broker; use the tags/keys fields")
        _check_prop_text(name, f"{where}: property name")
        _check_prop_text(value, f"{where}: property {name}")
        props[name] = value
    return props


def properties_size(msg: ProduceMessage) -> int:
    """Bytes of the encoded properties string (``name\\x01value\\x02`` each), as RocketMQ counts them."""
    total = 0
    if msg.tags:
        total += len(b"TAGS") + 2 + len(msg.tags.encode())
    if msg.keys:
        total += len(b"KEYS") + 2 + len(" ".join(msg.keys).encode())
    for k, v in msg.properties.items():
        total += len(k.encode()) + len(v.encode()) + 2
    return total + 40  # room for UNIQ_KEY and WAIT added by the broker


_UNIQ_KEY_CHARS = frozenset("0123456789ABCDEFabcdef-")


def _parse_uniq_key(value: Any, where: str) -> str:
    """An optional producer-chosen UNIQ_KEY: 16-64 hex digits (dashes allowed), as clients make them."""
    if value is None:
        return ""
    if not isinstance(value, str) or not 16 <= len(value) <= 64 or not set(value) <= _UNIQ_KEY_CHARS:
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: uniqKey must be 16-64 hex digits (the producer's message id)")
    return value


def parse_message(obj: Any, *, topic: str, queue_id: int | None, where: str = "message") -> ProduceMessage:
    """One message object of a produce or batch request."""
    if not isinstance(obj, dict):
        raise BrokerApiError(BAD_REQUEST, f"{where} must be a JSON object")
    tags = obj.get("tags") or ""
    if not isinstance(tags, str):
        raise BrokerApiError(MESSAGE_ILLEGAL, f"{where}: tags must be a string")
    _check_prop_text(tags, f"{where}: tags")
    msg = ProduceMessage(
        topic=topic,
        body=decode_body(obj, where),
        queue_id=queue_id,
        tags=tags,
        keys=_parse_keys(obj.get("keys"), where),
        properties=_parse_properties(obj.get("properties"), where),
        flag=int_field(obj, "flag", minimum=None, default=0),
        uniq_key=_parse_uniq_key(obj.get("uniqKey"), where),
    )
    if properties_size(msg) > MAX_PROPERTIES_BYTES:
        raise BrokerApiError(PROPERTIES_SIZE_EXCEEDED, f"{where}: properties exceed {MAX_PROPERTIES_BYTES} bytes")
    return msg


def parse_produce(obj: Any, max_message_size: int) -> ProduceMessage:
    """``POST /messages`` body: ``{"topic", "queueId"?, "tags"?, "keys"?, "properties"?, "body", "bodyEncoding"?}``."""
    if not isinstance(obj, dict):
        raise BrokerApiError(BAD_REQUEST, "request body must be a JSON object")
    topic = check_produce_topic(obj.get("topic"))
    msg = parse_message(obj, topic=topic, queue_id=int_field(obj, "queueId"))
    if len(msg.body) > max_message_size:
        raise BrokerApiError(
            MESSAGE_ILLEGAL, f"the message body size {len(msg.body)} is over the max value {max_message_size} (maxMessageSize)"
        )
    return msg


def parse_batch(obj: Any, max_message_size: int,
                max_count: int = DEFAULT_MAX_BATCH_MESSAGE_COUNT) -> list[ProduceMessage]:
    """``POST /messages/batch`` body: ``{"topic", "queueId"?, "messages": [ {...}, ... ]}``.

    As with a RocketMQ ``MessageBatch``, all messages go to one topic and one queue, and the
    encoded batch must fit ``maxMessageSize``; at most ``max_count`` messages (module rules).
    """
    if not isinstance(obj, dict):
        raise BrokerApiError(BAD_REQUEST, "request body must be a JSON object")
    topic = check_produce_topic(obj.get("topic"))
    queue_id = int_field(obj, "queueId")
    raw = obj.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BrokerApiError(MESSAGE_ILLEGAL, "messages must be a non-empty list")
    if len(raw) > max_count:
        raise BrokerApiError(REQUEST_TOO_LARGE, f"the batch has {len(raw)} messages, over the max "
                             f"{max_count} (maxBatchMessageCount); split it")
    msgs = []
    total = 0
    for i, m in enumerate(raw):
        msg = parse_message(m, topic=topic, queue_id=queue_id, where=f"messages[{i}]")
        total += BATCH_MESSAGE_OVERHEAD + len(msg.body) + properties_size(msg)
        if total > max_message_size:
            raise BrokerApiError(MESSAGE_ILLEGAL, f"the batch size is over the max value {max_message_size} "
                                 f"(maxMessageSize) at messages[{i}]: split it")
        msgs.append(msg)
    return msgs


def query_int(query: Mapping[str, str], name: str, *, default: int | None = None, minimum: int = 0,
              maximum: int | None = None) -> int:
    """An integer query parameter, with a clear BAD_REQUEST when missing or malformed."""
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BrokerApiError(BAD_REQUEST, f"query parameter {name} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BrokerApiError(BAD_REQUEST, f"query parameter {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise BrokerApiError(BAD_REQUEST, f"query parameter {name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        value = maximum
    return value

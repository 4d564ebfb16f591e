"""Conversions between API JSON and store messages: ProduceMessage -> MessageExt -> JSON.

Rules:
- The HTTP API plays the part of RocketMQ's client library, so the broker sets what the Java
  producer would: ``UNIQ_KEY`` (a ``MessageClientIDSetter``-style 32-hex-char id), ``TAGS``,
  ``KEYS`` (space-joined), ``WAIT=true``, the born host/timestamp (the HTTP peer and now).
- A message returned to a client is ``{"topic", "queueId", "queueOffset", "commitLogOffset",
  "msgId", "uniqKey", "tags", "keys", "properties", "storeSize", "bornTimestamp",
  "storeTimestamp", "bornHost", "storeHost", "sysFlag", "flag", "reconsumeTimes", "bodyCRC",
  "body"}``; ``body`` is base64 (``bodyEncoding: "base64"``) so any bytes round-trip, and
  ``bodyText`` is added when the body is valid UTF-8, for humans.

Theory of operation: pure functions; :class:`UniqKeyGenerator` keeps the per-process prefix and
a 16-bit counter like ``MessageClientIDSetter``.
"""
from __future__ import annotations

import base64
import os
import socket
import struct
import time
from typing import Any

from broker.api.validation import ProduceMessage
from broker.store.message import MessageExt
from broker.store.message_id import create_message_id


class UniqKeyGenerator:
    """``MessageClientIDSetter``: ip(4) + pid(2) + loader hash(4) + ms since month start(4) + counter(2)."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        try:
            ip_bytes = socket.inet_aton(ip)
        except OSError:
            ip_bytes = b"\x7f\x00\x00\x01"
        self._prefix = (ip_bytes + struct.pack(">H", os.getpid() & 0xFFFF) + struct.pack(">I", id(self) & 0xFFFFFFFF)).hex().upper()
        self._counter = 0
        lt = time.localtime()
        self._month_start_ms = int(time.mktime((lt.tm_year, lt.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next(self, now_ms: int) -> str:
        self._counter = (self._counter + 1) & 0xFFFF
        diff = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        return self._prefix + struct.pack(">IH", diff, self._counter).hex().upper()


def to_message_ext(msg: ProduceMessage, *, queue_id: int, uniq_key: str, born_host: tuple[str, int],
                   store_host: tuple[str, int], now_ms: int, cluster: str) -> MessageExt:
    """The record a send stores, as 4.9.8's remoting door stores a Java producer's: ``CLUSTER``
    added, ``WAIT`` (``"false"``: no SYNC_FLUSH wait) kept beside the message, not stored."""
    props: dict[str, str] = {}
    if msg.tags:
        props["TAGS"] = msg.tags
    if msg.keys:
        props["KEYS"] = " ".join(msg.keys)
    props["UNIQ_KEY"] = uniq_key
    props.update(msg.properties)
    props["CLUSTER"] = cluster
    wait = props.pop("WAIT", None) != "false"
    return MessageExt(
        topic=msg.topic, body=msg.body, queue_id=queue_id, flag=msg.flag, properties=props,
        born_timestamp=now_ms, born_host=born_host, store_timestamp=now_ms, store_host=store_host,
        wait_store_msg_ok=wait,
    )


def _host(h: tuple[str, int]) -> str:
    return f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"


def message_to_json(m: MessageExt) -> dict[str, Any]:
    props = dict(m.properties)
    out: dict[str, Any] = {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commitlog_offset,
        "msgId": create_message_id(m.store_host, m.commitlog_offset),
        "uniqKey": props.get("UNIQ_KEY"),
        "tags": props.get("TAGS"),
        "keys": props.get("KEYS"),
        "properties": props,
        "storeSize": m.store_size,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "bornHost": _host(m.born_host),
        "storeHost": _host(m.store_host),
        "sysFlag": m.sys_flag,
        "flag": m.flag,
        "reconsumeTimes": m.reconsume_times,
        "bodyCRC": m.body_crc,
        "bodyEncoding": "base64",
        "body": base64.b64encode(m.body).decode("ascii"),
    }
    try:
        out["bodyText"] = m.body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return out

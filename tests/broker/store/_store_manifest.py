"""Helpers shared by the store tests: manifest rows -> MessageExt, record bytes of a fixture."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.store.message import MessageExt
from broker.store.message_properties import java_hashmap_order
from tests.support.rmqfixtures import plain_body

FILE_SIZE = 1 << 20
# Insertion order Apache's writer used (found by trying every order against variety-classic):
# user properties (sorted), then the system ones in this order. HashMap order follows from it.
SYSTEM_PROPS = ("TAGS", "KEYS", "DELAY", "UNIQ_KEY", "REAL_TOPIC", "REAL_QID")


def parse_host(text: str) -> tuple[str, int]:
    """Java's ``InetSocketAddress`` text (``127.0.0.1:1`` or ``[0:0:...:1]:1``) -> (ip, port)."""
    ip, port = text.rsplit(":", 1)
    return ip.strip("[]").lstrip("/"), int(port)


def manifest_properties(row: dict[str, Any]) -> dict[str, str]:
    """Properties of a manifest row, in the order Apache's HashMap wrote them."""
    if "properties" in row:
        props = dict(row["properties"])
    else:  # plain set: only TAGS and KEYS
        props = {"TAGS": row["tags"], "KEYS": row["keys"]}
    inserted = [k for k in sorted(props) if k not in SYSTEM_PROPS] + [k for k in SYSTEM_PROPS if k in props]
    return {k: props[k] for k in java_hashmap_order(inserted)}


def row_to_message(row: dict[str, Any], body: bytes | None = None) -> MessageExt:
    """A MessageExt with every field the manifest gives (plain bodies are rebuilt from the recipe)."""
    if body is None:
        body = plain_body(row["id"])
    return MessageExt(
        topic=row["topic"], body=body, queue_id=row["queueId"], flag=row.get("flag", 0),
        properties=manifest_properties(row), sys_flag=row.get("sysFlag", 0),
        born_timestamp=row["bornTimestamp"],
        born_host=parse_host(row.get("bornHost", "127.0.0.1:12345")),
        store_timestamp=row["storeTimestamp"],
        store_host=parse_host(row.get("storeHost", "127.0.0.1:10911")),
        reconsume_times=row.get("reconsumeTimes", 0),
        prepared_transaction_offset=row.get("preparedTransactionOffset", 0),
        queue_offset=row["queueOffset"], commitlog_offset=row["commitLogOffset"],
    )


def commitlog_bytes(store: Path) -> dict[int, bytes]:
    """{file start offset: file bytes} of a store's classic commitlog."""
    return {int(p.name): p.read_bytes() for p in sorted((store / "commitlog").iterdir())}


def record_at(files: dict[int, bytes], offset: int, file_size: int = FILE_SIZE) -> tuple[bytes, int]:
    base = offset - offset % file_size
    return files[base], offset - base

"""ConsumerOffsetManager: ``config/consumerOffset.json``, committed consume offsets.

Rules (``broker/offset/ConsumerOffsetManager.java``; reference §2.5):
- Table key is ``<topic>@<group>``; value maps queueId -> next offset to consume. fastjson
  writes the int keys unquoted (``{"offsetTable":{"T@G":{0:42}}}``); we read that and write
  strict JSON. 5.x adds ``dataVersion``; other derived getters fastjson may emit are kept
  verbatim but ignored.
- ``query_offset`` answers -1 when nothing was committed, as RocketMQ does.
- :meth:`ConsumerOffsetManager.remove_topic` drops a deleted topic's offsets (DELETE_TOPIC_IN_BROKER).
- Commits are frequent, so they only mark the manager dirty and bump the version; the broker
  persists on its ``flushConsumerOffsetInterval`` timer and at shutdown.
"""
from __future__ import annotations

from typing import Any

from broker.metadata.config_manager import ConfigManager, int_keyed
from broker.metadata.data_version import DataVersion

TOPIC_GROUP_SEPARATOR = "@"


class ConsumerOffsetManager(ConfigManager):
    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.offset_table: dict[str, dict[int, int]] = {}
        self.extra: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        out["dataVersion"] = self.data_version.to_json()
        out["offsetTable"] = {k: {str(q): o for q, o in sorted(v.items())} for k, v in self.offset_table.items()}
        return out

    def from_json(self, obj: dict[str, Any]) -> None:
        table_obj = obj.get("offsetTable", {})
        if not isinstance(table_obj, dict):
            raise ValueError("offsetTable must be an object")
        table = {}
        for key, queues in table_obj.items():
            if TOPIC_GROUP_SEPARATOR not in key:
                raise ValueError(f"offsetTable key {key!r} is not <topic>@<group>")
            table[key] = int_keyed(queues, f"offsetTable[{key!r}]")
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.offset_table = table
        self.extra = {k: v for k, v in obj.items() if k not in ("dataVersion", "offsetTable")}

    @staticmethod
    def key(topic: str, group: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self.offset_table.setdefault(self.key(topic, group), {})[queue_id] = offset
            self.data_version.next_version()

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on one topic (a deleted topic); returns how many groups had some."""
        with self._lock:
            keys = [k for k in self.offset_table if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] == topic]
            for k in keys:
                del self.offset_table[k]
            if keys:
                self.data_version.next_version()
            return len(keys)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        with self._lock:
            return self.offset_table.get(self.key(topic, group), {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self.offset_table.get(self.key(topic, group), {}))

    def which_topic_by_consumer(self, group: str) -> set[str]:
        with self._lock:
            return {k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] for k in self.offset_table
                    if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[1] == group}

    def which_group_by_topic(self, topic: str) -> set[str]:
        with self._lock:
            return {k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[1] for k in self.offset_table
                    if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[0] == topic}

    def remove_offset(self, group: str) -> None:
        """Forget every topic's offsets of one group."""
        with self._lock:
            for k in [k for k in self.offset_table if k.rsplit(TOPIC_GROUP_SEPARATOR, 1)[1] == group]:
                del self.offset_table[k]
            self.data_version.next_version()

"""TopicConfigManager: ``config/topics.json``, the broker's topic table.

Rules (``TopicConfig``, ``TopicConfigManager``, ``TopicValidator``; reference §2.5):
- File: ``{"dataVersion":{...},"topicConfigTable":{"<topic>":{"order":false,"perm":6,
  "readQueueNums":16,"topicFilterType":"SINGLE_TAG","topicName":"<topic>","topicSysFlag":0,
  "writeQueueNums":16}}}``; 5.x adds ``attributes`` and other fields, kept verbatim.
- perm bits: PRIORITY=8, READ=4, WRITE=2, INHERIT=1.
- Topic names match ``^[%|a-zA-Z0-9_-]{1,255}$`` (they become directory names; 255 = NAME_MAX,
  records of topics over 127 use v2 magic: ``broker.store.names``).
- Every create/update/delete bumps the DataVersion and persists, so a slave notices.
- :meth:`TopicConfigManager.ensure_system_topics` adds the topics a 4.9.8 broker creates at
  start-up (SELF_TEST_TOPIC, TBW102, BenchmarkTest, cluster and broker name topics,
  OFFSET_MOVED_EVENT, SCHEDULE_TOPIC_XXXX with 18 queues, <cluster>_REPLY_TOPIC).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from broker.metadata.config_manager import ConfigManager, bean_from_json, bean_to_json, json_field
from broker.metadata.data_version import DataVersion

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
TOPIC_MAX_LENGTH = 255  # broker.store.names.TOPIC_MAX_LENGTH
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SCHEDULE_TOPIC_QUEUE_NUM = 18


class TopicValidationError(ValueError):
    """A topic name that RocketMQ would reject."""


def validate_topic(topic: str) -> None:
    if not topic:
        raise TopicValidationError("topic name is empty")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise TopicValidationError(f"topic name {topic[:20]!r}... is {len(topic)} characters, max {TOPIC_MAX_LENGTH}")
    if not _TOPIC_RE.fullmatch(topic):
        raise TopicValidationError(f"topic name {topic!r} may only contain letters, digits, '%', '|', '_' and '-'")


@dataclass
class TopicConfig:
    topic_name: str = json_field("topicName", "", str)
    read_queue_nums: int = json_field("readQueueNums", 16, int)
    write_queue_nums: int = json_field("writeQueueNums", 16, int)
    perm: int = json_field("perm", PERM_READ | PERM_WRITE, int)
    topic_filter_type: str = json_field("topicFilterType", "SINGLE_TAG", str)
    topic_sys_flag: int = json_field("topicSysFlag", 0, int)
    order: bool = json_field("order", False, bool)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicConfigManager(ConfigManager):
    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.topic_config_table: dict[str, TopicConfig] = {}
        self.extra: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        out["dataVersion"] = self.data_version.to_json()
        out["topicConfigTable"] = {name: bean_to_json(tc) for name, tc in self.topic_config_table.items()}
        return out

    def from_json(self, obj: dict[str, Any]) -> None:
        table_obj = obj.get("topicConfigTable", {})
        if not isinstance(table_obj, dict):
            raise ValueError("topicConfigTable must be an object")
        table = {name: bean_from_json(TopicConfig, tc, f"topicConfigTable.{name}") for name, tc in table_obj.items()}
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.topic_config_table = table
        self.extra = {k: v for k, v in obj.items() if k not in ("dataVersion", "topicConfigTable")}

    def select_topic_config(self, topic: str) -> Optional[TopicConfig]:
        with self._lock:
            return self.topic_config_table.get(topic)

    def update_topic_config(self, config: TopicConfig, *, persist: bool = True) -> None:
        """Create or replace one topic (validated), bump the version, persist."""
        validate_topic(config.topic_name)
        if config.read_queue_nums < 0 or config.write_queue_nums < 0:
            raise TopicValidationError(f"topic {config.topic_name!r}: queue numbers must not be negative")
        with self._lock:
            self.topic_config_table[config.topic_name] = config
            self.changed(persist)

    def create_topic(self, topic: str, queue_nums: int = 8, perm: int = PERM_READ | PERM_WRITE,
                     *, persist: bool = True) -> TopicConfig:
        """The topic's config, creating it if absent (auto-create path)."""
        with self._lock:
            existing = self.topic_config_table.get(topic)
            if existing is not None:
                return existing
            tc = TopicConfig(topic_name=topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm)
            self.update_topic_config(tc, persist=persist)
            return tc

    def delete_topic_config(self, topic: str, *, persist: bool = True) -> bool:
        with self._lock:
            if self.topic_config_table.pop(topic, None) is None:
                return False
            self.changed(persist)
            return True

    def ensure_system_topics(self, cluster_name: str, broker_name: str, *, auto_create_topic_enable: bool = True,
                             default_topic_queue_nums: int = 8, cluster_topic_enable: bool = True,
                             broker_topic_enable: bool = True) -> None:
        """Add 4.9.8's start-up system topics that are missing (no version bump, as Java)."""
        rw = PERM_READ | PERM_WRITE
        wanted = [
            ("SELF_TEST_TOPIC", 1, rw),
            ("BenchmarkTest", 1024, rw),
            (cluster_name, 16, PERM_INHERIT | (rw if cluster_topic_enable else 0)),
            (broker_name, 1, PERM_INHERIT | (rw if broker_topic_enable else 0)),
            ("OFFSET_MOVED_EVENT", 1, rw),
            (SCHEDULE_TOPIC, SCHEDULE_TOPIC_QUEUE_NUM, rw),
            (f"{cluster_name}_REPLY_TOPIC", 1, rw),
        ]
        if auto_create_topic_enable:
            wanted.insert(1, ("TBW102", default_topic_queue_nums, rw | PERM_INHERIT))
        with self._lock:
            for name, nums, perm in wanted:
                if name not in self.topic_config_table:
                    self.topic_config_table[name] = TopicConfig(name, nums, nums, perm)

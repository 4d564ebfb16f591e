"""MetadataAccessor: the broker's view of its four config JSON files (topics, offsets, groups).

Rules:
- Files live in ``<storePathRootDir>/config/`` with RocketMQ's names (reference §2.5); the
  managers of ``broker.metadata`` own the formats, ``dataVersion`` and atomic persist. This
  module only adapts them to what the broker needs: topic lookup/creation, offset commit/query,
  and the "content + dataVersion" pair of each file that SlaveSynchronize moves.
- Every change made through the broker (topic create, offset commit) bumps the manager's
  ``dataVersion``; topics/groups are persisted at once (rare, must survive a crash), consumer
  offsets by the controller's ``flushConsumerOffsetInterval`` timer (frequent; 5 s as in
  RocketMQ) and at shutdown. The system topics of RocketMQ 4.9.8 are added at load
  (``ensure_system_topics``), as ``TopicConfigManager``'s constructor does in Java.
- On a slave, :meth:`sync_access` gives SlaveSynchronize a replace function per file that
  decodes the master's content, adopts the master's ``dataVersion`` and persists.

Theory of operation: a thin adapter, so the controller, the processor and SlaveSynchronize do
not depend on the managers' method names.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, NamedTuple, Optional

from broker.metadata.consumer_offset import ConsumerOffsetManager
from broker.metadata.data_version import DataVersion
from broker.metadata.delay_offset import DelayOffsetManager
from broker.metadata.subscription_group import SubscriptionGroupManager
from broker.metadata.topic_config import TopicConfig, TopicConfigManager
from broker.slave_sync import MetadataAccess

log = logging.getLogger("broker.metadata")

FILE_NAMES = {
    "topics": "topics.json",
    "consumerOffset": "consumerOffset.json",
    "delayOffset": "delayOffset.json",
    "subscriptionGroup": "subscriptionGroup.json",
}


class TopicView(NamedTuple):
    """What the processor needs of a TopicConfig (read-only; a tuple: made per topic lookup, two
    per send, and a tuple is built in a fifth of a frozen dataclass's time, issue 22)."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    raw: object = None  # the TopicConfig itself
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"topicName": self.topic_name, "readQueueNums": self.read_queue_nums,
                "writeQueueNums": self.write_queue_nums, "perm": self.perm}


class MetadataAccessor:
    def __init__(self, root_dir: Path, broker_config: Any, store_config: Any) -> None:
        self.config_dir = Path(root_dir) / "config"
        self.broker_config = broker_config
        self.store_config = store_config
        self.managers: dict[str, Any] = {}
        self._offsets_dirty = False

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.managers = {
            "topics": TopicConfigManager(self.config_dir / FILE_NAMES["topics"]),
            "consumerOffset": ConsumerOffsetManager(self.config_dir / FILE_NAMES["consumerOffset"]),
            "delayOffset": DelayOffsetManager(self.config_dir / FILE_NAMES["delayOffset"]),
            "subscriptionGroup": SubscriptionGroupManager(
                self.config_dir / FILE_NAMES["subscriptionGroup"],
                auto_create_subscription_group=bool(getattr(self.broker_config, "auto_create_subscription_group", True)),
            ),
        }
        for mgr in self.managers.values():
            mgr.load()
        b = self.broker_config
        self.managers["topics"].ensure_system_topics(
            getattr(b, "broker_cluster_name", "DefaultCluster"), getattr(b, "broker_name", "broker-a"),
            auto_create_topic_enable=bool(getattr(b, "auto_create_topic_enable", True)),
            default_topic_queue_nums=int(getattr(b, "default_topic_queue_nums", 8)),
        )

    def persist_all(self) -> None:
        for mgr in self.managers.values():
            mgr.persist()
        self._offsets_dirty = False

    def persist_offsets_if_dirty(self) -> None:
        """Called every ``flushConsumerOffsetInterval`` (5 s) by the controller, and at shutdown."""
        if self._offsets_dirty and "consumerOffset" in self.managers:
            self._offsets_dirty = False
            self.managers["consumerOffset"].persist()

    # ------------------------------------------------------------------ topics
    @staticmethod
    def _view(tc: Any) -> TopicView:
        return TopicView(tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc, bool(tc.order))

    def topic(self, topic: str) -> Optional[TopicView]:
        mgr = self.managers.get("topics")
        if mgr is None:
            return None
        tc = mgr.topic_config_table.get(topic)
        return None if tc is None else self._view(tc)

    def topics(self) -> list[TopicView]:
        mgr = self.managers.get("topics")
        return [] if mgr is None else [self._view(tc) for tc in mgr.topic_config_table.values()]

    def create_topic(self, topic: str, read_q: int, write_q: int, perm: int, *, order: bool = False) -> TopicView:
        mgr = self.managers["topics"]
        tc = TopicConfig(topic_name=topic, read_queue_nums=read_q, write_queue_nums=write_q, perm=perm, order=order)
        mgr.update_topic_config(tc)  # bumps dataVersion, persists
        log.info("topic %s created/updated: readQueueNums %d writeQueueNums %d perm %d", topic, read_q, write_q, perm)
        return self._view(tc)

    # ------------------------------------------------------------------ consumer offsets
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.managers["consumerOffset"].commit_offset(group, topic, queue_id, offset)
        self._offsets_dirty = True

    def offsets(self, group: Optional[str], topic: Optional[str]) -> dict[str, dict[str, int]]:
        table = self.managers["consumerOffset"].offset_table
        out: dict[str, dict[str, int]] = {}
        for key, per_queue in table.items():
            t, _, g = key.partition("@")
            if (group is None or g == group) and (topic is None or t == topic):
                out[key] = {str(q): int(o) for q, o in per_queue.items()}
        return out

    # ------------------------------------------------------------------ files for SlaveSynchronize
    def data_version(self, name: str) -> Optional[dict[str, Any]]:
        return self.managers[name].data_version.to_json()

    def file_content(self, name: str) -> tuple[str, Optional[dict[str, Any]]]:
        mgr = self.managers[name]
        return mgr.encode(), self.data_version(name)

    def _replace(self, name: str, content: str, version: Optional[dict[str, Any]]) -> None:
        """SlaveSynchronize: take the master's file (its content carries its dataVersion)."""
        mgr = self.managers[name]
        mgr.decode(content, f"master's {FILE_NAMES[name]}")
        if version is not None:
            mgr.data_version.assign_new_one(DataVersion.from_json(version))
        mgr.persist()
        if name == "consumerOffset":
            self._offsets_dirty = False

    def sync_access(self) -> dict[str, MetadataAccess]:
        def make(name: str) -> MetadataAccess:
            return MetadataAccess(
                local_version=lambda: self.data_version(name),
                local_content=lambda: self.managers[name].encode(),
                replace=lambda content, version: self._replace(name, content, version),
            )

        return {name: make(name) for name in FILE_NAMES}

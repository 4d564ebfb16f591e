"""MetadataAccessor: the broker's view of its four config JSON files (topics, offsets, groups).

Rules:
- Files live in ``<storePathRootDir>/config/`` with RocketMQ's names (reference §2.5); the
  managers of ``broker.metadata`` own the formats, ``dataVersion`` and atomic persist. This
  module only adapts them to what the broker needs: topic lookup/creation, offset commit/query,
  and the "content + dataVersion" pair of each file that SlaveSynchronize moves.
- Every change made through the broker (topic create, offset commit) bumps the manager's
  ``dataVersion`` and is persisted at once for topics/groups (rare, must survive a crash) and by
  the periodic flush for consumer offsets (frequent; RocketMQ flushes every 5 s), plus at
  shutdown.
- On a slave, :meth:`sync_access` gives SlaveSynchronize a replace function per file that
  decodes the master's content, adopts the master's ``dataVersion`` and persists.

Theory of operation: a thin adapter, so the controller, the processor and SlaveSynchronize do
not depend on the managers' method names.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from broker.slave_sync import MetadataAccess

log = logging.getLogger("broker.metadata")

FILE_NAMES = {
    "topics": "topics.json",
    "consumerOffset": "consumerOffset.json",
    "delayOffset": "delayOffset.json",
    "subscriptionGroup": "subscriptionGroup.json",
}


@dataclass(frozen=True)
class TopicView:
    """What the processor needs of a TopicConfig."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    raw: Any = None

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
        self._last_offsets_persist = 0.0

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        from broker import metadata as md  # noqa: WPS433

        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.managers = {
            "topics": md.TopicConfigManager(self.config_dir / FILE_NAMES["topics"]),
            "consumerOffset": md.ConsumerOffsetManager(self.config_dir / FILE_NAMES["consumerOffset"]),
            "delayOffset": md.DelayOffsetManager(self.config_dir / FILE_NAMES["delayOffset"]),
            "subscriptionGroup": md.SubscriptionGroupManager(self.config_dir / FILE_NAMES["subscriptionGroup"]),
        }
        for mgr in self.managers.values():
            mgr.load()

    def persist_all(self) -> None:
        for mgr in self.managers.values():
            mgr.persist()
        self._offsets_dirty = False

    def maybe_persist_offsets(self, interval_s: float = 5.0) -> None:
        """flushConsumerOffsetInterval: persist committed offsets at most every ``interval_s``."""
        now = time.monotonic()
        if self._offsets_dirty and now - self._last_offsets_persist >= interval_s:
            self.managers["consumerOffset"].persist()
            self._offsets_dirty = False
            self._last_offsets_persist = now

    # ------------------------------------------------------------------ topics
    @staticmethod
    def _view(tc: Any) -> TopicView:
        return TopicView(tc.topic_name, tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc)

    def topic(self, topic: str) -> Optional[TopicView]:
        mgr = self.managers.get("topics")
        if mgr is None:
            return None
        tc = mgr.topic_config_table.get(topic)
        return None if tc is None else self._view(tc)

    def topics(self) -> list[TopicView]:
        mgr = self.managers.get("topics")
        return [] if mgr is None else [self._view(tc) for tc in mgr.topic_config_table.values()]

    def create_topic(self, topic: str, read_q: int, write_q: int, perm: int) -> TopicView:
        mgr = self.managers["topics"]
        tc = mgr.update_topic_config(topic, read_queue_nums=read_q, write_queue_nums=write_q, perm=perm)
        mgr.persist()
        log.info("topic %s created/updated: readQueueNums %d writeQueueNums %d perm %d", topic, read_q, write_q, perm)
        return self._view(tc)

    # ------------------------------------------------------------------ consumer offsets
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.managers["consumerOffset"].commit_offset(group, topic, queue_id, offset)
        self._offsets_dirty = True
        self.maybe_persist_offsets()

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
        dv = getattr(self.managers[name], "data_version", None)
        if dv is None:
            return None
        return dv.to_json() if hasattr(dv, "to_json") else dict(dv)

    def file_content(self, name: str) -> tuple[str, Optional[dict[str, Any]]]:
        mgr = self.managers[name]
        return mgr.encode(), self.data_version(name)

    def _replace(self, name: str, content: str, version: Optional[dict[str, Any]]) -> None:
        mgr = self.managers[name]
        mgr.decode(content)
        if version is not None and getattr(mgr, "data_version", None) is not None:
            mgr.data_version.assign_new_one(version)
        mgr.persist()

    def sync_access(self) -> dict[str, MetadataAccess]:
        def make(name: str) -> MetadataAccess:
            return MetadataAccess(
                local_version=lambda: self.data_version(name),
                local_content=lambda: self.managers[name].encode(),
                replace=lambda content, version: self._replace(name, content, version),
            )

        return {name: make(name) for name in FILE_NAMES}

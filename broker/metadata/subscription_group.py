"""SubscriptionGroupManager: ``config/subscriptionGroup.json``, consumer group settings.

Rules (``SubscriptionGroupConfig``, ``SubscriptionGroupManager``; reference §2.5):
- ``{"dataVersion":{...},"subscriptionGroupTable":{"<group>":{"brokerId":0,
  "consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,
  "groupName":"<group>","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,
  "retryQueueNums":1,"whichBrokerWhenConsumeSlowly":1}}}`` (4.9.8 fields; 5.x fields such as
  ``consumeMessageOrderly``, ``groupRetryPolicy`` and the top-level ``forbiddenTable`` are kept
  verbatim).
- Group names follow the topic rule (they appear in retry topic names ``%RETRY%<group>``).
- Unknown groups are auto-created on first use when ``autoCreateSubscriptionGroup`` is on;
  4.9.8's built-in groups are added at start-up by :meth:`ensure_system_groups`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from broker.metadata.config_manager import ConfigManager, bean_from_json, bean_to_json, json_field
from broker.metadata.data_version import DataVersion
from broker.metadata.topic_config import validate_topic

SYSTEM_GROUPS = (
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_SYS_RMQ_TRANS",
)


@dataclass
class SubscriptionGroupConfig:
    group_name: str = json_field("groupName", "", str)
    consume_enable: bool = json_field("consumeEnable", True, bool)
    consume_from_min_enable: bool = json_field("consumeFromMinEnable", True, bool)
    consume_broadcast_enable: bool = json_field("consumeBroadcastEnable", True, bool)
    retry_queue_nums: int = json_field("retryQueueNums", 1, int)
    retry_max_times: int = json_field("retryMaxTimes", 16, int)
    broker_id: int = json_field("brokerId", 0, int)
    which_broker_when_consume_slowly: int = json_field("whichBrokerWhenConsumeSlowly", 1, int)
    notify_consumer_ids_changed_enable: bool = json_field("notifyConsumerIdsChangedEnable", True, bool)
    extra: dict[str, Any] = field(default_factory=dict)


class SubscriptionGroupManager(ConfigManager):
    def __init__(self, path: Any, *, auto_create_subscription_group: bool = True) -> None:
        super().__init__(path)
        self.auto_create = auto_create_subscription_group
        self.subscription_group_table: dict[str, SubscriptionGroupConfig] = {}
        self.extra: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        out["dataVersion"] = self.data_version.to_json()
        out["subscriptionGroupTable"] = {g: bean_to_json(c) for g, c in self.subscription_group_table.items()}
        return out

    def from_json(self, obj: dict[str, Any]) -> None:
        table_obj = obj.get("subscriptionGroupTable", {})
        if not isinstance(table_obj, dict):
            raise ValueError("subscriptionGroupTable must be an object")
        table = {
            g: bean_from_json(SubscriptionGroupConfig, c, f"subscriptionGroupTable.{g}") for g, c in table_obj.items()
        }
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.subscription_group_table = table
        self.extra = {k: v for k, v in obj.items() if k not in ("dataVersion", "subscriptionGroupTable")}

    def update_subscription_group_config(self, config: SubscriptionGroupConfig, *, persist: bool = True) -> None:
        validate_topic(config.group_name)
        with self._lock:
            self.subscription_group_table[config.group_name] = config
            self.changed(persist)

    def find_subscription_group_config(self, group: str, *, persist: bool = True) -> Optional[SubscriptionGroupConfig]:
        """The group's config; auto-created (and persisted) if allowed."""
        with self._lock:
            config = self.subscription_group_table.get(group)
            if config is None and self.auto_create:
                config = SubscriptionGroupConfig(group_name=group)
                self.update_subscription_group_config(config, persist=persist)
            return config

    def delete_subscription_group_config(self, group: str, *, persist: bool = True) -> bool:
        with self._lock:
            if self.subscription_group_table.pop(group, None) is None:
                return False
            self.changed(persist)
            return True

    def ensure_system_groups(self) -> None:
        with self._lock:
            for g in SYSTEM_GROUPS:
                self.subscription_group_table.setdefault(g, SubscriptionGroupConfig(group_name=g))

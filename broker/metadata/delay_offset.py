"""DelayOffsetManager: ``config/delayOffset.json``, ScheduleMessageService's progress.

Rules (``DelayOffsetSerializeWrapper``; reference §2.5): ``{"offsetTable":{<delayLevel>:<offset>}}``
with unquoted int keys from fastjson (e.g. ``{2:3}``: level 2 has delivered the queue's first 3
messages); 5.x adds ``dataVersion``. The level-*n* queue is SCHEDULE_TOPIC_XXXX queue *n-1*.
"""
from __future__ import annotations

from typing import Any

from broker.metadata.config_manager import ConfigManager, int_keyed
from broker.metadata.data_version import DataVersion


class DelayOffsetManager(ConfigManager):
    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.offset_table: dict[int, int] = {}
        self.extra: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        out["dataVersion"] = self.data_version.to_json()
        out["offsetTable"] = {str(level): o for level, o in sorted(self.offset_table.items())}
        return out

    def from_json(self, obj: dict[str, Any]) -> None:
        table = int_keyed(obj.get("offsetTable", {}), "offsetTable")
        self.data_version = DataVersion.from_json(obj.get("dataVersion"))
        self.offset_table = table
        self.extra = {k: v for k, v in obj.items() if k not in ("dataVersion", "offsetTable")}

    def update_offset(self, delay_level: int, offset: int) -> None:
        with self._lock:
            self.offset_table[delay_level] = offset
            self.data_version.next_version()

    def get_offset(self, delay_level: int) -> int:
        """Queue offset to deliver next for one level (0 if none yet)."""
        with self._lock:
            return self.offset_table.get(delay_level, 0)

"""DataVersion: the version stamp of a metadata file (topics, subscription groups, offsets).

Rules (RocketMQ ``DataVersion``; reference §2.5):
- ``counter`` increases by one on every change, ``timestamp`` is the wall-clock ms of the last
  change; 5.x adds ``stateVersion`` (bumped by the controller; 0 otherwise).
- Two versions are equal iff all three fields are equal. A slave re-reads a file from its master
  exactly when the master's DataVersion differs from its own (not "is greater": a master that
  was rebuilt restarts its counter), so equality is the only comparison that matters.
- JSON shape is fastjson's: ``{"counter":N,"stateVersion":S,"timestamp":ms}``; 4.9.x files lack
  ``stateVersion`` and read as 0.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class DataVersion:
    timestamp: int = field(default_factory=_now_ms)
    counter: int = 0
    state_version: int = 0

    def next_version(self, clock: Callable[[], int] = _now_ms) -> None:
        """Record one change."""
        self.timestamp = clock()
        self.counter += 1

    def assign_new_one(self, other: "DataVersion") -> None:
        """Adopt another node's version (after copying its file)."""
        self.timestamp, self.counter, self.state_version = other.timestamp, other.counter, other.state_version

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "stateVersion": self.state_version, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: Any) -> "DataVersion":
        if obj is None:  # a 4.9.x file without a version: the same on every node that reads it
            return cls(timestamp=0)
        if not isinstance(obj, dict):
            raise ValueError(f"dataVersion must be an object, got {obj!r}")
        try:
            return cls(
                timestamp=int(obj.get("timestamp", 0)),
                counter=int(obj.get("counter", 0)),
                state_version=int(obj.get("stateVersion", 0)),
            )
        except (TypeError, ValueError):
            raise ValueError(f"dataVersion has a non-integer field: {obj!r}") from None

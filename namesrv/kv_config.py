"""KvConfigStore: the name server's in-memory KV config (``KVConfigManager``), bounded.

Rules (issue 23: 1,500 values of 60 KB took an unbounded store from 23 to 109 MB):
- ``namespace -> key -> value``, strings. A put is refused, and nothing changes, when the
  namespace or the key is over ``kvConfigMaxKeyBytes`` (UTF-8 bytes, default 255: Apache's topic
  names are at most 127 characters), the value over ``kvConfigMaxValueBytes`` (16 KiB), a new
  entry would exceed ``kvConfigMaxEntries`` (10,000, all namespaces together) or the total of
  namespace + key + value bytes of all entries would exceed ``kvConfigMaxTotalBytes`` (4 MiB).
  Replacing a value counts the difference.
- A refusal is :class:`KvLimitError`, whose message names the limit's key and its value; the
  name server answers it ``SYSTEM_ERROR`` with that remark (Apache's code for a failed put).
- Deleting frees its bytes and its entry; an emptied namespace is removed.

Theory of operation: plain dicts plus two counters (entries, bytes) kept in step by put/delete.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

#: the properties keys of the limits, in :class:`KvLimits` field order
LIMIT_KEYS = {"max_entries": "kvConfigMaxEntries", "max_key_bytes": "kvConfigMaxKeyBytes",
              "max_value_bytes": "kvConfigMaxValueBytes", "max_total_bytes": "kvConfigMaxTotalBytes"}


@dataclass(frozen=True)
class KvLimits:
    max_entries: int = 10_000
    max_key_bytes: int = 255
    max_value_bytes: int = 16 * 1024
    max_total_bytes: int = 4 * 1024 * 1024

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "KvLimits":
        """Limits of a ``-c`` file; ValueError names the key of a value that is not a positive integer."""
        values: dict[str, int] = {}
        for name, key in LIMIT_KEYS.items():
            if key in props:
                try:
                    values[name] = int(props[key])
                except ValueError:
                    raise ValueError(f"{key}={props[key]!r} is not an integer") from None
                if values[name] <= 0:
                    raise ValueError(f"{key}={values[name]} must be positive")
        return cls(**values)


class KvLimitError(Exception):
    """A put over one of the limits; the message names it."""


class KvConfigStore:
    def __init__(self, limits: Optional[KvLimits] = None) -> None:
        self.limits = limits or KvLimits()
        self.tables: dict[str, dict[str, str]] = {}
        self.entries = 0
        self.bytes = 0

    @staticmethod
    def _size(namespace: str, key: str, value: str) -> int:
        return len(namespace.encode("utf-8")) + len(key.encode("utf-8")) + len(value.encode("utf-8"))

    def put(self, namespace: str, key: str, value: str) -> None:
        lim = self.limits
        for what, text in (("namespace", namespace), ("key", key)):
            n = len(text.encode("utf-8"))
            if n > lim.max_key_bytes:
                raise KvLimitError(f"KV config {what} is {n} bytes, over kvConfigMaxKeyBytes={lim.max_key_bytes}")
        n = len(value.encode("utf-8"))
        if n > lim.max_value_bytes:
            raise KvLimitError(f"KV config value is {n} bytes, over kvConfigMaxValueBytes={lim.max_value_bytes}")
        table = self.tables.get(namespace, {})
        old = table.get(key)
        if old is None and self.entries + 1 > lim.max_entries:
            raise KvLimitError(f"KV config is full: {self.entries} entries, kvConfigMaxEntries={lim.max_entries}")
        delta = self._size(namespace, key, value) - (self._size(namespace, key, old) if old is not None else 0)
        if self.bytes + delta > lim.max_total_bytes:
            raise KvLimitError(f"KV config is full: {self.bytes} bytes held, this put needs {delta} more, "
                               f"kvConfigMaxTotalBytes={lim.max_total_bytes}")
        self.tables.setdefault(namespace, table)[key] = value
        self.entries += old is None
        self.bytes += delta

    def get(self, namespace: str, key: str) -> Optional[str]:
        return self.tables.get(namespace, {}).get(key)

    def table(self, namespace: str) -> dict[str, str]:
        return self.tables.get(namespace, {})

    def delete(self, namespace: str, key: str) -> None:
        table = self.tables.get(namespace)
        if table is None or key not in table:
            return
        value = table.pop(key)
        self.entries -= 1
        self.bytes -= self._size(namespace, key, value)
        if not table:
            del self.tables[namespace]

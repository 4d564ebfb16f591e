"""Java ``String.hashCode`` in Python, as RocketMQ uses it for ConsumeQueue tags codes and
IndexFile key slots.

Java hashes UTF-16 code units with ``h = 31*h + c`` in 32-bit two's complement. Characters
outside the BMP (emoji) are two code units (a surrogate pair), so we hash the UTF-16-BE
encoding, not Python code points.
"""
from __future__ import annotations

from functools import lru_cache

_M32 = 0xFFFFFFFF


@lru_cache(maxsize=65536)
def java_string_hash(s: str) -> int:
    """Signed 32-bit ``s.hashCode()``; cached because tags repeat across millions of messages."""
    h = 0
    if s.isascii():
        for ch in s.encode("ascii"):
            h = (31 * h + ch) & _M32
    else:
        data = s.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & _M32
    return h - (1 << 32) if h & 0x80000000 else h


def tags_string_to_tags_code(tags: str | None) -> int:
    """``MessageExtBrokerInner.tagsString2tagsCode``: 0 for no tags, else the Java hash (as a long)."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """``IndexFile.indexKeyHashMethod``: abs(hashCode), with Integer.MIN_VALUE mapped to 0."""
    h = java_string_hash(key)
    if h == -(1 << 31):
        return 0
    return abs(h)

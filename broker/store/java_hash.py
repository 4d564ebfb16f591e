"""Java ``String.hashCode`` in Python, as RocketMQ uses it for ConsumeQueue tags codes and
IndexFile key slots.

Java hashes UTF-16 code units with ``h = 31*h + c`` in 32-bit two's complement. Characters
outside the BMP (emoji) are two code units (a surrogate pair), so we hash the UTF-16-BE
encoding, not Python code points.

Speed (issue 22): compiled by mypyc (``broker/native.py``) with ``i64`` loop variables, a key
hashes in ~0.1 us instead of 5-10 us; every indexed key (UNIQ_KEY, KEYS) of every message is
hashed once on each replica's dispatch, and unique keys never hit a cache. Tags repeat, so
:func:`tags_string_to_tags_code` keeps an ``lru_cache``. ``31*h + c`` stays below 2**37 for
``h < 2**32``, so ``i64`` never overflows.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Final

from mypy_extensions import i64

_M32: Final = 0xFFFFFFFF  # Final: a compiled constant (a plain module global is a dict lookup per step, 15x slower)


def _hash_ascii(data: bytes) -> i64:
    h: i64 = 0
    n: i64 = len(data)
    i: i64 = 0
    while i < n:  # an index loop: mypyc's `for ch in bytes` boxes each byte (5x slower)
        h = (31 * h + data[i]) & _M32
        i += 1
    return h


def _hash_utf16be(data: bytes) -> i64:
    h: i64 = 0
    n: i64 = len(data)
    i: i64 = 0
    while i < n:
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _M32
        i += 2
    return h


def java_string_hash(s: str) -> int:
    """Signed 32-bit ``s.hashCode()``."""
    h = _hash_ascii(s.encode("ascii")) if s.isascii() else _hash_utf16be(s.encode("utf-16-be"))
    return int(h - (1 << 32)) if h & 0x80000000 else int(h)


@lru_cache(maxsize=65536)
def _tags_code(tags: str) -> int:
    return java_string_hash(tags)


def tags_string_to_tags_code(tags: str | None) -> int:
    """``MessageExtBrokerInner.tagsString2tagsCode``: 0 for no tags, else the Java hash (as a long)."""
    if not tags:
        return 0
    return _tags_code(tags)


def index_key_hash(key: str) -> int:
    """``IndexFile.indexKeyHashMethod``: abs(hashCode), with Integer.MIN_VALUE mapped to 0."""
    h = java_string_hash(key)
    if h == -(1 << 31):
        return 0
    return abs(h)

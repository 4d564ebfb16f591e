"""The JSON that Apache RocketMQ 5.3.3's controller writes (fastjson 1.2.83), byte for byte, for
the few shapes the controller uses, and a bounded reader for it.

What fastjson 1.2.83 does (checked against the jar Apache ships):
- A bean is written from its getters with ``SortField`` (a default feature): keys in
  alphabetical order, ``null`` values left out, no spaces. An enum is written by its name.
- Numbers are plain decimals; ``true``/``false``.
- A ``Map<Long, String>`` is written with unquoted numeric keys (``{1:"a",2:"b"}``) and a
  ``Map<String, ?>`` with quoted ones; map entries and ``Set`` elements come in the iteration
  order of Java's ``HashMap``/``HashSet`` (not sorted): see :func:`java_hash_order`.
- Strings escape ``"``, ``\\``, the C0 controls (``\\b \\t \\n \\f \\r``, the rest ``\\u00XX``),
  U+007F..U+009F, U+2028 and U+2029 (upper-case hex); everything else is raw UTF-8 (a lone
  surrogate becomes ``?``, Java's encoder). With ``BrowserSecure`` (the controller's
  ``FastJsonSerializer`` for events; not for remoting bodies) ``< > ( )`` become
  ``\\u003C \\u003E \\u0028 \\u0029`` as well.

Java's hash order: a ``HashSet``/``HashMap`` iterates bucket by bucket (bucket =
``(h ^ (h >>> 16)) & (capacity - 1)``, ``h`` the key's ``hashCode``), and within a bucket in
insertion order. The capacity is 16, doubled whenever the size passes 3/4 of it; the copy
constructor (``new HashSet<>(c)``) sizes it for ``c.size()/0.75 + 1``. Apache copies the sync
state set twice more before writing it, so the caller says how many copies (``copies``).

Reading (:func:`loads_object`): ``json.loads`` on at most :data:`MAX_JSON_BYTES`, which must give
an object; fastjson's unquoted numeric keys are accepted (rewritten to strings first, only
outside strings).

Theory of operation: :class:`Raw` marks a value the writer emits as-is; :func:`dumps` walks
``dict`` (already in the order to write; ``None`` values dropped), ``list``/``tuple``, ``str``,
``bool`` and ``int``. Callers build the dicts in fastjson's order with :func:`bean` (sorted keys)
and :func:`java_hash_order`.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Mapping, TypeVar

MAX_JSON_BYTES = 4 * 1024 * 1024

K = TypeVar("K")

_BROWSER_SECURE = {"<": "\\u003C", ">": "\\u003E", "(": "\\u0028", ")": "\\u0029"}
_SHORT = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\\x7f-\x9f\u2028\u2029]')
_NEEDS_ESCAPE_SECURE = re.compile(r'[\x00-\x1f"\\\x7f-\x9f\u2028\u2029<>()]')


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    short = _SHORT.get(c) or _BROWSER_SECURE.get(c)
    return short if short is not None else "\\u%04X" % ord(c)


def quote(s: str, browser_secure: bool = False) -> str:
    pattern = _NEEDS_ESCAPE_SECURE if browser_secure else _NEEDS_ESCAPE
    return '"' + pattern.sub(_escape_char, s) + '"'


class Raw(str):
    """A map key written without quotes (fastjson's numeric keys)."""


def bean(**fields: Any) -> dict[str, Any]:
    """A Java bean as fastjson writes it: keys sorted, ``None`` dropped."""
    return {k: fields[k] for k in sorted(fields) if fields[k] is not None}


def _emit(value: Any, out: list[str], secure: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(quote(value, secure))
    elif isinstance(value, dict):
        out.append("{")
        first = True
        for k, v in value.items():
            if v is None:
                continue
            if not first:
                out.append(",")
            first = False
            out.append(k if isinstance(k, Raw) else quote(k, secure))
            out.append(":")
            _emit(v, out, secure)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",")
            _emit(v, out, secure)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson")


def dumps(value: Any, browser_secure: bool = False) -> bytes:
    out: list[str] = []
    _emit(value, out, browser_secure)
    return "".join(out).encode("utf-8", errors="replace")


# ---------------------------------------------------------------------------------- Java hash order
def java_long_hash(v: int) -> int:
    """``Long.hashCode``."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return _to_int32((u ^ (u >> 32)) & 0xFFFFFFFF)


def java_string_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 code units)."""
    h = 0
    data = s.encode("utf-16-be", errors="surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _to_int32(h)


def _to_int32(u: int) -> int:
    return u - (1 << 32) if u & 0x80000000 else u


def _bucket(h: int, capacity: int) -> int:
    u = h & 0xFFFFFFFF
    return (u ^ (u >> 16)) & (capacity - 1)


def _table_size_for(n: int) -> int:
    cap = 1
    while cap < n:
        cap <<= 1
    return cap


def java_hash_order(keys: Iterable[K], hash_of: Callable[[K], int], copies: int = 0) -> list[K]:
    """The iteration order of a Java ``HashSet`` built by adding ``keys`` in this order (duplicates
    ignored), then copied ``copies`` times with ``new HashSet<>(set)``."""
    order: list[K] = []
    seen: set[K] = set()
    capacity = 16
    for k in keys:
        if k in seen:
            continue
        seen.add(k)
        order.append(k)
        if len(order) > capacity * 3 // 4:
            capacity <<= 1
    order.sort(key=lambda k: _bucket(hash_of(k), capacity))
    for _ in range(copies):
        capacity = _table_size_for(max(int(len(order) / 0.75) + 1, 16))
        order.sort(key=lambda k: _bucket(hash_of(k), capacity))
    return order


def long_set(ids: Iterable[int], copies: int = 0) -> list[int]:
    """A ``Set<Long>`` in Java's iteration order."""
    return java_hash_order(ids, java_long_hash, copies)


def long_key_map(m: Mapping[int, Any]) -> dict[str, Any]:
    """A ``HashMap<Long, ?>`` as fastjson writes it (unquoted keys, Java's order)."""
    return {Raw(str(k)): m[k] for k in long_set(m)}


def string_key_map(m: Mapping[str, Any]) -> dict[str, Any]:
    """A ``HashMap<String, ?>`` in Java's order."""
    return {k: m[k] for k in java_hash_order(m, java_string_hash)}


# ---------------------------------------------------------------------------------- reading
_UNQUOTED_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)')


class JsonBodyError(ValueError):
    """A JSON body or event that is not what the controller writes."""


def loads_object(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_JSON_BYTES:
        raise JsonBodyError(f"JSON of {len(data)} bytes (at most {MAX_JSON_BYTES})")
    try:
        text = data.decode("utf-8")
        text = _UNQUOTED_KEY.sub(lambda m: m.group(0) if m.group(1) is None
                                 else f'{m.group(1)}"{m.group(2)}"{m.group(3)}', text)
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise JsonBodyError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise JsonBodyError("JSON is not an object")
    return value


def get_str(obj: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise JsonBodyError(f"{key} missing")
        return None
    if not isinstance(v, str):
        raise JsonBodyError(f"{key} is not a string")
    return v


def get_int(obj: Mapping[str, Any], key: str, required: bool = False) -> int | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise JsonBodyError(f"{key} missing")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not -(2 ** 63) <= v < 2 ** 63:
        raise JsonBodyError(f"{key} is not a Java long")
    return v


def get_bool(obj: Mapping[str, Any], key: str, default: bool = False) -> bool:
    v = obj.get(key, default)
    if not isinstance(v, bool):
        raise JsonBodyError(f"{key} is not a boolean")
    return v


def get_long_list(obj: Mapping[str, Any], key: str) -> list[int] | None:
    v = obj.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise JsonBodyError(f"{key} is not a list of longs")
    return list(v)

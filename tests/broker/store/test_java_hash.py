"""Java ``String.hashCode`` as RocketMQ uses it (tags codes, index key slots): known Java values,
UTF-16 surrogate pairs, Integer.MIN_VALUE, and agreement with a plain reference on many strings.
Runs compiled (mypyc, ``i64`` loops) and from source (``RMQPY_PURE_PYTHON=1``, scripts/test.sh)."""
from __future__ import annotations

import random

from broker.store.java_hash import index_key_hash, java_string_hash, tags_string_to_tags_code


def reference(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_values_java_prints() -> None:
    # java: "hello".hashCode(), "".hashCode(), "Aa"/"BB" (a known collision), "中文", "😀" (one surrogate pair)
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("中文") == 20013 * 31 + 25991
    assert java_string_hash("😀") == 0xD83D * 31 + 0xDE00
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert java_string_hash("x" * 6) == -744952576  # negative: the 32-bit sign as Java


def test_index_and_tags_rules() -> None:
    assert index_key_hash("polygenelubricants") == 0  # abs(MIN_VALUE) would overflow: RocketMQ maps it to 0
    assert index_key_hash("x" * 40) == abs(reference("x" * 40))
    assert tags_string_to_tags_code(None) == 0 and tags_string_to_tags_code("") == 0
    assert tags_string_to_tags_code("TagA") == java_string_hash("TagA") == reference("TagA")


def test_agrees_with_the_reference_on_many_strings() -> None:
    rng = random.Random(7)
    alphabet = "abcXYZ019-_#中文é" + "\U0001F600\U0001F680"
    for n in list(range(0, 64)) + [200, 1000]:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        assert java_string_hash(s) == reference(s), s
        a = "".join(chr(rng.randrange(32, 127)) for _ in range(n))
        assert java_string_hash(a) == reference(a), a

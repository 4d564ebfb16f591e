"""broker.store.message_properties: the properties text and Java's HashMap order."""
from __future__ import annotations

from broker.store import message_properties as mp


def test_java_hashmap_order() -> None:
    # Bucket 12 of 16 holds both; insertion order decides (verified against Apache's bytes).
    assert mp.java_hashmap_order(["x-json", "UNIQ_KEY"]) == ["x-json", "UNIQ_KEY"]
    assert mp.java_hashmap_order(["UNIQ_KEY", "x-json"]) == ["UNIQ_KEY", "x-json"]
    assert mp.java_hashmap_order(["TAGS", "KEYS"]) == ["KEYS", "TAGS"]


def test_hashmap_ordered_keeps_values_and_grows_the_table() -> None:
    keys = [f"k{i}" for i in range(13)]  # 13 > 16 * 0.75: Java resizes to 32 buckets
    props = {k: k.upper() for k in keys}
    ordered = mp.java_hashmap_ordered(props)
    assert ordered == props and list(ordered) == mp.java_hashmap_order(keys)
    assert mp.java_hashmap_order(["a", "a", "b"]) == mp.java_hashmap_order(["a", "b"])


def test_non_str_values_are_formatted_and_none_dropped() -> None:
    odd: dict = {"a": 1, "b": None, "c": "x"}
    assert mp.properties_to_string(odd) == "a\x011\x02c\x01x"
    assert mp.properties_to_string({}, trailing_separator=True) == ""
    assert mp.string_to_properties("") == {}
    assert mp.string_to_properties("a\x011\x02a\x012") == {"a": "2"}  # last wins

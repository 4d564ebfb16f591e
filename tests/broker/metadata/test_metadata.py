"""Metadata JSON managers: fastjson input, strict output, safe persist, .bak fallback."""
from __future__ import annotations

import json

import pytest

from broker.metadata import fastjson
from broker.metadata.config_manager import MetadataError, string_to_file
from broker.metadata.consumer_offset import ConsumerOffsetManager
from broker.metadata.data_version import DataVersion
from broker.metadata.delay_offset import DelayOffsetManager
from broker.metadata.subscription_group import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.metadata.topic_config import (
    PERM_INHERIT,
    TopicConfig,
    TopicConfigManager,
    TopicValidationError,
    validate_topic,
)


def test_fastjson_unquoted_int_keys_and_strings_untouched():
    text = '{"offsetTable":{"T@G":{0:42,\n\t1 : 7, -1:3}},"s":"{1:2} \\" {3:4}","a":[1,{5:6}],"b":true}'
    assert fastjson.loads(text) == {
        "offsetTable": {"T@G": {"0": 42, "1": 7, "-1": 3}}, "s": '{1:2} " {3:4}', "a": [1, {"5": 6}], "b": True,
    }
    assert fastjson.loads('{\n\t"offsetTable":{2:3\n\t}\n}') == {"offsetTable": {"2": 3}}
    with pytest.raises(ValueError, match="line 1 column"):
        fastjson.loads('{"a":}')
    out = fastjson.dumps({"b": 1, "a": {"x": [1, 2]}})
    assert json.loads(out) == {"b": 1, "a": {"x": [1, 2]}}
    assert out.startswith('{\n\t"a":{') and '"b":1' in out


def test_data_version():
    dv = DataVersion(timestamp=5, counter=1)
    dv.next_version(clock=lambda: 9)
    assert (dv.counter, dv.timestamp) == (2, 9)
    assert DataVersion.from_json(dv.to_json()) == dv
    assert DataVersion.from_json({"counter": 3, "timestamp": 4}) == DataVersion(4, 3, 0)  # 4.9.8 shape
    assert DataVersion.from_json(None) == DataVersion.from_json(None)  # deterministic for old files
    other = DataVersion()
    other.assign_new_one(dv)
    assert other == dv
    with pytest.raises(ValueError, match="non-integer"):
        DataVersion.from_json({"counter": "x"})


@pytest.mark.parametrize("which", ["classic", "mixed"])
def test_fixture_delay_offset(fixture_set, store_copy, which):
    root = store_copy(getattr(fixture_set, which))
    path = root / "config" / "delayOffset.json"
    raw = path.read_text()
    m = DelayOffsetManager(path)
    assert m.load()
    expected = {2: 3} if fixture_set.name == "variety" else {}
    assert m.offset_table == expected
    if fixture_set.name == "variety":
        assert "{2:3" in raw  # the file really is fastjson's non-strict JSON
    m.update_offset(1, 10)
    m.persist()
    assert json.loads(path.read_text())["offsetTable"] == {**{str(k): v for k, v in expected.items()}, "1": 10}
    assert (root / "config" / "delayOffset.json.bak").read_text() == raw  # previous content kept
    again = DelayOffsetManager(path)
    again.load()
    assert again.offset_table == {**expected, 1: 10} and again.get_offset(1) == 10 and again.get_offset(9) == 0


def test_consumer_offsets_round_trip_and_fastjson_input(tmp_path):
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text('{\n\t"offsetTable":{\n\t\t"T@G":{0:42,1:7\n\t\t},"%RETRY%G@G":{0:1}\n\t}\n}')
    m = ConsumerOffsetManager(path)
    assert m.load()
    assert m.query_offset("G", "T", 0) == 42 and m.query_offset("G", "T", 3) == -1
    assert m.which_topic_by_consumer("G") == {"T", "%RETRY%G"}
    before = m.data_version.counter
    m.commit_offset("G", "T", 3, 99)
    assert m.data_version.counter == before + 1
    m.persist()
    strict = json.loads(path.read_text())
    assert strict["offsetTable"]["T@G"] == {"0": 42, "1": 7, "3": 99}
    other = ConsumerOffsetManager(tmp_path / "other.json")
    other.decode(m.encode())  # what the slave sync does with the master's file
    assert other.offset_table == m.offset_table and other.data_version == m.data_version
    m.remove_offset("G")
    assert m.query_offsets("G", "T") == {}


def test_bak_fallback_on_corrupt_main_file(tmp_path):
    path = tmp_path / "consumerOffset.json"
    m = ConsumerOffsetManager(path)
    m.commit_offset("G", "T", 0, 1)
    m.persist()
    m.commit_offset("G", "T", 0, 2)
    m.persist()  # .bak now holds offset 1
    path.write_text('{"offsetTable":{"T@G":{0:')  # torn write
    loaded = ConsumerOffsetManager(path)
    assert loaded.load()
    assert loaded.query_offset("G", "T", 0) == 1
    path.write_text("")  # empty main file: also the backup (RocketMQ's rule)
    assert ConsumerOffsetManager(path).load()


def test_both_files_bad_is_an_error_naming_them(tmp_path):
    path = tmp_path / "topics.json"
    path.write_text("{nope")
    (tmp_path / "topics.json.bak").write_text('{"topicConfigTable":{"T":{"perm":"rw"}}}')
    with pytest.raises(MetadataError) as err:
        TopicConfigManager(path).load()
    assert "topics.json" in str(err.value) and "topics.json.bak" in str(err.value) and "perm" in str(err.value)
    (tmp_path / "topics.json.bak").unlink()
    with pytest.raises(MetadataError, match="no usable backup"):
        TopicConfigManager(path).load()


def test_fresh_store_has_no_files(tmp_path):
    m = TopicConfigManager(tmp_path / "topics.json")
    assert m.load() is False and m.topic_config_table == {}


def test_safe_write_leaves_no_tmp(tmp_path):
    path = tmp_path / "x.json"
    string_to_file("one", path)
    string_to_file("two", path)
    assert path.read_text() == "two" and (tmp_path / "x.json.bak").read_text() == "one"
    assert not (tmp_path / "x.json.tmp").exists()


def test_topic_config_manager(tmp_path):
    path = tmp_path / "topics.json"
    m = TopicConfigManager(path)
    m.update_topic_config(TopicConfig("TopicA", 4, 4))
    assert m.data_version.counter == 1
    tc = m.create_topic("TopicB", 2)
    assert m.create_topic("TopicB", 9) is tc and m.data_version.counter == 2
    assert m.delete_topic_config("TopicB") and not m.delete_topic_config("TopicB")
    assert m.data_version.counter == 3
    m.ensure_system_topics("DefaultCluster", "broker-a")
    assert m.select_topic_config("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18
    assert m.select_topic_config("TBW102").perm & PERM_INHERIT
    assert m.data_version.counter == 3  # start-up topics do not bump the version
    m.persist()
    data = json.loads(path.read_text())
    assert data["topicConfigTable"]["TopicA"] == {
        "order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG", "topicName": "TopicA",
        "topicSysFlag": 0, "writeQueueNums": 4,
    }
    assert data["dataVersion"]["counter"] == 3
    for bad in ("", "a b", "x" * 256, "topic/evil", "中文"):
        with pytest.raises(TopicValidationError):
            validate_topic(bad)
    validate_topic("%RETRY%Var-Group_1|x")
    with pytest.raises(TopicValidationError):
        m.update_topic_config(TopicConfig("../etc"))


def test_topics_json_5x_shape_round_trips(tmp_path):
    text = (
        '{"dataVersion":{"counter":7,"stateVersion":2,"timestamp":1700000000000},'
        '"topicConfigTable":{"T":{"attributes":{"message.type":"NORMAL"},"order":false,"perm":6,'
        '"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":8}}}'
    )
    m = TopicConfigManager(tmp_path / "topics.json")
    m.decode(text)
    assert m.data_version == DataVersion(1700000000000, 7, 2)
    assert m.select_topic_config("T").extra == {"attributes": {"message.type": "NORMAL"}}
    assert json.loads(m.encode()) == json.loads(text)


def test_subscription_groups(tmp_path):
    path = tmp_path / "subscriptionGroup.json"
    m = SubscriptionGroupManager(path)
    c = m.find_subscription_group_config("GroupA")
    assert c is not None and c.retry_max_times == 16 and m.data_version.counter == 1
    m.update_subscription_group_config(SubscriptionGroupConfig(group_name="GroupB", consume_enable=False))
    m.ensure_system_groups()
    again = SubscriptionGroupManager(path, auto_create_subscription_group=False)
    again.load()
    assert again.subscription_group_table["GroupB"].consume_enable is False
    assert again.find_subscription_group_config("Nope") is None
    assert again.data_version == m.data_version
    assert again.delete_subscription_group_config("GroupA")
    out = json.loads(again.encode())["subscriptionGroupTable"]["GroupB"]
    assert out["groupName"] == "GroupB" and out["whichBrokerWhenConsumeSlowly"] == 1 and out["brokerId"] == 0

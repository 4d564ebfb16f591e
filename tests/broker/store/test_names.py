"""names.py: RocketMQ's topic/group/queue-id rule, and the ConsumeQueue path builder refusing bad names.

The Apache fixtures prove every name RocketMQ itself wrote (retry, schedule, system topics) is
valid, so dispatch never skips a legitimate record.
"""
from __future__ import annotations

from pathlib import Path

from types import SimpleNamespace

import pytest

from broker.store import names
from broker.store.consume_queue import ConsumeQueue, ConsumeQueueStore
from broker.store.dispatch import DispatchRequest
from broker.store.message import MessageExt
from broker.store.message_store import open_store
from broker.store.put_result import PutMessageStatus

ROCKETMQ_NAMES = [
    "TopicTest", "%RETRY%please_rename_unique_group_name_4", "%DLQ%group-1", "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "RMQ_SYS_TRACE_TOPIC", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "TBW102", "BenchmarkTest",
    "rmq_sys_SYNC_BROKER_MEMBER_x", "DefaultCluster_REPLY_TOPIC", "%LMQ%lmq-1", "a|b", "RMQ_SYS_DLEDGER_BARRIER",
    "x" * names.TOPIC_MAX_LENGTH,
]
HOSTILE_NAMES = [
    "", "../../../../tmp/X", "..", ".", "a/b", "/abs", "a\\b", "a\x00b", "T\n", "\nT", "a b", "é", "T\u2028",
    "%RETRY%g/../../x", "x" * (names.RECORD_TOPIC_MAX_LENGTH + 1),
]


@pytest.mark.parametrize("name", ROCKETMQ_NAMES)
def test_rocketmq_names_are_valid(name: str) -> None:
    assert names.topic_problem(name) is None
    assert names.group_problem(name) is None
    assert names.record_problem(DispatchRequest(name, 0, 0, 100, 0, 0, 0)) is None
    assert names.check_topic(name) == name


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_are_refused(name: str) -> None:
    assert names.topic_problem(name) is not None
    assert names.topic_problem(name, names.RECORD_TOPIC_MAX_LENGTH) is not None
    assert names.record_problem(DispatchRequest(name, 0, 0, 100, 0, 0, 0)) is not None
    with pytest.raises(names.InvalidNameError):
        names.check_topic(name)


def test_lengths_topics_255_groups_255() -> None:
    assert names.topic_problem("x" * 256) is not None  # NAME_MAX: the topic is the ConsumeQueue dir
    assert names.topic_problem("x" * 200) is None  # longer than 4.9.8 allowed: v2 magic (issue 14.4)
    assert names.topic_problem("x" * 255, names.RECORD_TOPIC_MAX_LENGTH) is None  # a v2-magic record
    assert names.group_problem("g" * 255) is None and names.group_problem("g" * 256) is not None
    assert names.topic_problem(None) is not None and names.topic_problem(b"T") is not None


@pytest.mark.parametrize("qid,ok", [(0, True), (names.QUEUE_ID_LIMIT - 1, True), (-1, False),
                                    (names.QUEUE_ID_LIMIT, False), (2**31 - 1, False), (True, False), ("1", False)])
def test_queue_id_range(qid: object, ok: bool) -> None:
    assert (names.queue_id_problem(qid) is None) is ok
    # a parsed record as record_problem reads it (names.ParsedRecord); a DispatchRequest holds
    # an int queue id only (compiled, it checks), so the ill-typed ids come in a stand-in
    record = SimpleNamespace(topic="T", queue_id=qid, consume_queue_offset=0)
    assert (names.record_problem(record) is None) is ok
    if isinstance(qid, int) and not isinstance(qid, bool):
        assert (names.record_problem(DispatchRequest("T", qid, 0, 100, 0, 0, 0)) is None) is ok


def test_record_with_a_negative_queue_offset_is_refused() -> None:
    assert "queue offset -5" in names.record_problem(DispatchRequest("T", 0, 0, 100, 0, 0, -5))
    assert names.record_problem(DispatchRequest("T", 0, 0, 100, 0, 0, 0)) is None


def test_queue_id_within_the_topic_queue_count() -> None:
    assert names.queue_id_problem(3, queue_count=4) is None
    assert "outside [0, 4)" in names.queue_id_problem(4, queue_count=4)
    with pytest.raises(names.InvalidNameError):
        names.check_queue_id(-5)


def test_consume_queue_path_builder_refuses_invalid_names(tmp_path: Path) -> None:
    store_path = tmp_path / "store" / "consumequeue"
    for topic, qid in [("../../escape", 0), ("a/b", 0), ("T\n", 0), ("T", -1), ("T", 1 << 20)]:
        with pytest.raises(names.InvalidNameError):
            ConsumeQueue(topic, qid, store_path, 200)
    cqs = ConsumeQueueStore(tmp_path / "store", 200)
    with pytest.raises(names.InvalidNameError):
        cqs.dispatch(DispatchRequest("../../escape", 0, 0, 100, 0, 0, 0))
    assert cqs.find_consume_queue("../../escape", 0, create=False) is None
    assert not (tmp_path / "escape").exists() and not store_path.exists()


def test_load_skips_directories_with_invalid_names(tmp_path: Path) -> None:
    root = tmp_path / "store"
    cqs = ConsumeQueueStore(root, 200)
    cqs.dispatch(DispatchRequest("Good", 1, 0, 100, 0, 0, 0))
    cqs.flush()
    cqs.shutdown()
    for bad in ("bad topic/0", "Good/-1", "Good/007", "Good/+2"):
        (root / "consumequeue" / bad).mkdir(parents=True)
    again = ConsumeQueueStore(root, 200)
    again.load()
    assert [(cq.topic, cq.queue_id) for cq in again.consume_queues()] == [("Good", 1)]
    again.shutdown()


def test_send_path_uses_the_same_rule(tmp_path: Path) -> None:
    """``$`` matched before a trailing newline: ``"T\\n"`` was accepted as a topic before."""
    store = open_store(tmp_path / "s", mapped_file_size_commit_log=1 << 16, warm_mapped_file_enable=False)
    try:
        for msg in (MessageExt("T\n", b"x"), MessageExt("T", b"x", queue_id=names.QUEUE_ID_LIMIT),
                    MessageExt("../T", b"x"), MessageExt("x" * 256, b"x")):
            res = store.put_message(msg)
            assert res.status is PutMessageStatus.MESSAGE_ILLEGAL, msg.topic
        assert store.put_message(MessageExt("%RETRY%g|1", b"x", queue_id=7)).status is PutMessageStatus.PUT_OK
        assert store.commitlog.max_offset > 0
    finally:
        store.shutdown()
    assert sorted(p.name for p in (tmp_path / "s" / "consumequeue").iterdir()) == ["%RETRY%g|1"]


# --- the Apache fixtures: nothing RocketMQ wrote is refused ------------------------------------------
def test_every_apache_record_and_queue_dir_is_valid(fixture_root, fixture_set, manifests) -> None:
    for store in (fixture_set.classic, fixture_set.mixed):
        rows = manifests(store) if store == fixture_set.classic else []
        for row in rows:
            req = DispatchRequest(row["topic"], row["queueId"], row["commitLogOffset"], row["storeSize"], 0, 0, 0)
            assert names.record_problem(req) is None, row
        cq_root = fixture_root / store / "consumequeue"
        dirs = sorted((t.name, q.name) for t in cq_root.iterdir() for q in t.iterdir())
        assert dirs
        cqs = ConsumeQueueStore(fixture_root / store, read_only=True)
        cqs.load()
        assert sorted((cq.topic, str(cq.queue_id)) for cq in cqs.consume_queues()) == dirs
        cqs.shutdown()
    topics = {row["topic"] for row in manifests(fixture_set.classic)}
    if fixture_set.name == "variety":  # the fixture holds RocketMQ's own retry and schedule topics
        assert "SCHEDULE_TOPIC_XXXX" in topics and any(t.startswith("%RETRY%") for t in topics)


def test_record_problem_remembers_valid_topics_only_and_within_its_bound() -> None:
    """A valid topic is checked once and remembered (bounded); an invalid one is refused every
    time; a remembered topic still gets its queue id and queue offset checked."""
    good = DispatchRequest("RememberMe", 0, 0, 100, 0, 0, 0)
    assert names.record_problem(good) is None and "RememberMe" in names._GOOD_RECORD_TOPICS
    assert names.record_problem(DispatchRequest("RememberMe", names.QUEUE_ID_LIMIT, 0, 100, 0, 0, 0)) is not None
    assert "negative" in names.record_problem(DispatchRequest("RememberMe", 0, 0, 100, 0, 0, -1))
    for _ in range(2):
        assert "characters outside" in names.record_problem(DispatchRequest("bad/topic", 0, 0, 100, 0, 0, 0))
    assert "bad/topic" not in names._GOOD_RECORD_TOPICS
    for i in range(names.GOOD_RECORD_TOPICS_MAX + 10):
        assert names.record_problem(DispatchRequest(f"T{i}", 0, 0, 100, 0, 0, 0)) is None
    assert 0 < len(names._GOOD_RECORD_TOPICS) <= names.GOOD_RECORD_TOPICS_MAX

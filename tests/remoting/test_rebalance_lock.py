"""Queue locks of orderly consumers (issue 25): RebalanceLockManager, LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42).

The table's rules with an injected clock (no sleeps), the body's errors, and the two requests
on a real broker over a real socket. The Java client's orderly consumer, which cannot consume
at all without these locks, runs in ``tests/java``.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.rebalance_lock import (MAX_QUEUES_PER_REQUEST, LockBodyError, RebalanceLockManager,
                                                       parse_lock_body)
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all

Q0, Q1, Q2 = ("T", "b", 0), ("T", "b", 1), ("T", "b", 2)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_a_free_queue_is_granted_and_a_held_one_refused_to_another_client() -> None:
    m = RebalanceLockManager(clock_ms=Clock())
    assert m.try_lock_batch("G", [Q0, Q1], "c1") == [Q0, Q1]
    assert m.try_lock_batch("G", [Q0, Q1, Q2], "c2") == [Q2]
    assert m.try_lock_batch("G", [Q0, Q1], "c1") == [Q0, Q1]  # a holder re-locks
    assert m.try_lock_batch("OtherGroup", [Q0], "c2") == [Q0]  # locks are per group
    assert (m.holder("G", Q0), m.holder("G", Q2)) == ("c1", "c2")


def test_a_lock_expires_after_its_live_time_and_changes_hands() -> None:
    clock = Clock()
    m = RebalanceLockManager(lock_max_live_ms=60_000, clock_ms=clock)
    m.try_lock_batch("G", [Q0], "c1")
    clock.now += 60_000
    assert m.try_lock_batch("G", [Q0], "c2") == []  # exactly the live time: still held
    clock.now += 1
    assert m.try_lock_batch("G", [Q0], "c2") == [Q0]
    assert m.holder("G", Q0) == "c2"
    assert m.try_lock_batch("G", [Q0], "c1") == []


def test_relocking_keeps_a_lock_alive() -> None:
    clock = Clock()
    m = RebalanceLockManager(lock_max_live_ms=60_000, clock_ms=clock)
    for _ in range(5):  # the Java consumer re-locks every 20 s
        m.try_lock_batch("G", [Q0], "c1")
        clock.now += 20_000
    assert m.try_lock_batch("G", [Q0], "c2") == []


def test_unlock_releases_only_what_the_client_holds() -> None:
    m = RebalanceLockManager(clock_ms=Clock())
    m.try_lock_batch("G", [Q0, Q1], "c1")
    assert m.unlock_batch("G", [Q0, Q1], "c2") == 0  # another client's unlock changes nothing
    assert m.try_lock_batch("G", [Q0], "c2") == []
    assert m.unlock_batch("G", [Q0], "c1") == 1
    assert m.try_lock_batch("G", [Q0], "c2") == [Q0]
    assert m.unlock_batch("NoSuchGroup", [Q0], "c1") == 0


def test_the_table_is_bounded_and_purges_expired_locks_when_full() -> None:
    clock = Clock()
    m = RebalanceLockManager(lock_max_live_ms=1000, max_entries=2, clock_ms=clock)
    assert m.try_lock_batch("G", [Q0, Q1, Q2], "c1") == [Q0, Q1]  # the third does not fit
    assert m.entries == 2
    clock.now += 1001
    assert m.try_lock_batch("H", [Q2], "c2") == [Q2]  # room made by purging G's expired locks
    assert m.entries == 1 and "G" not in m.table
    m.unlock_batch("H", [Q2], "c2")
    assert m.entries == 0 and m.table == {}


def body(**kw: object) -> bytes:
    doc = {"consumerGroup": "G", "clientId": "c1", "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 0}]}
    doc.update(kw)
    return json.dumps(doc).encode()


def test_lock_bodies_are_parsed_or_refused_with_the_field_named() -> None:
    assert parse_lock_body(body()) == ("G", "c1", [Q0])
    bad = [(b"not json", "not JSON"), (b"[1]", "not a JSON object"), (body(consumerGroup=""), "consumerGroup"),
           (body(clientId=7), "clientId"), (body(mqSet={"a": 1}), "not a list"),
           (body(mqSet=[{"topic": "T"}]), "{topic, brokerName, queueId}"),
           (body(mqSet=[{"topic": "T", "brokerName": "b", "queueId": "x"}]), "{topic, brokerName, queueId}"),
           (body(mqSet=[{"topic": "T", "brokerName": "b", "queueId": 0}] * (MAX_QUEUES_PER_REQUEST + 1)),
            f"more than {MAX_QUEUES_PER_REQUEST}")]
    for raw, words in bad:
        with pytest.raises(LockBodyError, match=words.replace("{", r"\{").replace("}", r"\}")):
            parse_lock_body(raw)


@pytest.mark.multiprocess
def test_lock_and_unlock_batch_on_a_real_broker(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)

    async def talk() -> dict[str, tuple[int, object]]:
        c1 = await RemotingClient.connect("127.0.0.1", port)
        c2 = await RemotingClient.connect("127.0.0.1", port)
        mqs = [{"topic": "OrderTopic", "brokerName": "b", "queueId": q} for q in range(3)]

        async def ask(cl: RemotingClient, code: int, raw: bytes) -> tuple[int, object]:
            r = await cl.request(code, {}, raw)
            return r.code, json.loads(r.body) if r.body else r.remark

        try:
            return {
                "c1 locks 0,1": await ask(c1, RC.LOCK_BATCH_MQ, body(clientId="c1", mqSet=mqs[:2])),
                "c2 locks 0-2": await ask(c2, RC.LOCK_BATCH_MQ, body(clientId="c2", mqSet=mqs)),
                "c2 unlocks 0": await ask(c2, RC.UNLOCK_BATCH_MQ, body(clientId="c2", mqSet=mqs[:1])),
                "c1 unlocks 0": await ask(c1, RC.UNLOCK_BATCH_MQ, body(clientId="c1", mqSet=mqs[:1])),
                "c2 locks 0": await ask(c2, RC.LOCK_BATCH_MQ, body(clientId="c2", mqSet=mqs[:1])),
                "bad body": await ask(c1, RC.LOCK_BATCH_MQ, b"{\"consumerGroup\": 5}"),
            }
        finally:
            await c1.close()
            await c2.close()

    try:
        b.start()
        r = asyncio.run(talk())
    finally:
        kill_all([b])

    def queues(answer: tuple[int, object]) -> list[int]:
        code, doc = answer
        assert code == R.SUCCESS and isinstance(doc, dict), answer
        return sorted(mq["queueId"] for mq in doc["lockOKMQSet"])

    assert queues(r["c1 locks 0,1"]) == [0, 1]
    assert queues(r["c2 locks 0-2"]) == [2]
    assert r["c2 unlocks 0"][0] == R.SUCCESS and r["c1 unlocks 0"][0] == R.SUCCESS
    assert queues(r["c2 locks 0"]) == [0]
    assert r["bad body"] == (R.SYSTEM_ERROR, "the lock request body has no consumerGroup")

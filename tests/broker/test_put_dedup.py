"""The send dedup window (broker/put_dedup.py) and its wiring into a real classic broker.

- Window rules with a fake clock: a key is found only within ``window`` seconds of its dispatch,
  per topic; a batch is found only if all its keys are; MAX_KEYS bounds memory.
- A real ``mqbroker`` (classic master): the same ``uniqKey`` sent twice is stored once and both
  answers carry the same offsets; a batch likewise; another topic with the same key is stored;
  ``sendDedupWindowSeconds=0`` stores every send; a bad ``uniqKey`` is MESSAGE_ILLEGAL.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.api.client import BrokerClientError, message_json
from broker.put_dedup import RecentSends, dedup_key
from broker.store.dispatch import DispatchRequest
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until


def req(topic: str, uniq: str, qoff: int, phy: int) -> DispatchRequest:
    return DispatchRequest(topic, 1, phy, 100, 0, 0, qoff, uniq_key=uniq)


def test_window_expiry_topic_scope_batches_and_bound() -> None:
    now = [1000.0]
    w = RecentSends(60, ("10.0.0.1", 10911), clock=lambda: now[0])
    w.on_arrival([req("T", "A" * 32, 5, 1000), req("T", "B" * 32, 6, 1100), req("T", "", 7, 1200)])
    hit = w.lookup([dedup_key("T", "A" * 32), dedup_key("T", "B" * 32)])
    assert hit is not None
    out = w.outcome_of(hit)
    assert out["queue_offsets"] == [5, 6] and out["physical_offsets"] == [1000, 1100] and out["queue_id"] == 1
    assert out["next_offset"] == 1200 and out["wrote_bytes"] == 200 and len(out["msg_ids"][0]) == 32
    assert w.lookup([dedup_key("U", "A" * 32)]) is None  # keys are per topic
    assert w.lookup([dedup_key("T", "A" * 32), dedup_key("T", "C" * 32)]) is None  # a batch only when all are there
    now[0] += 61
    assert w.lookup([dedup_key("T", "A" * 32)]) is None  # out of the window
    w.on_arrival([req("T", "D" * 32, 8, 1300)])
    assert w.status()["keys"] == 1  # expired keys are trimmed on insert
    w.max_keys = 3
    w.on_arrival([req("T", f"{i:032X}", i, i) for i in range(10)])
    assert w.status()["keys"] == 3 and w.lookup([dedup_key("T", f"{9:032X}")]) is not None
    assert w.lookup([dedup_key("T", f"{0:032X}")]) is None
    assert RecentSends.keys_of([]) == [] and RecentSends(0, ("h", 1)).enabled is False


@pytest.mark.multiprocess
def test_broker_answers_a_retried_send_once(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        with b.client() as c:
            key = "0A0B0C0D" * 4
            first = c.send("Dedup", b"one", uniq_key=key)
            again = c.send("Dedup", b"one", uniq_key=key)
            assert (again["commitLogOffset"], again["queueOffset"], again["msgId"], again["queueId"]) == \
                (first["commitLogOffset"], first["queueOffset"], first["msgId"], first["queueId"])
            assert again["uniqKey"] == key
            other = c.send("Dedup2", b"one", uniq_key=key)  # same key, other topic: a new message
            assert other["commitLogOffset"] != first["commitLogOffset"]
            batch = [message_json(b"x", uniq_key="1" * 32), message_json(b"y", uniq_key="2" * 32)]
            r1 = c.send_batch("Dedup", batch, queue_id=first["queueId"])
            r2 = c.send_batch("Dedup", batch, queue_id=first["queueId"])
            assert r1["commitLogOffsets"] == r2["commitLogOffsets"] and r1["queueOffsets"] == r2["queueOffsets"]
            fresh = c.send("Dedup", b"two")  # no uniqKey from the client: the broker's own, never equal
            assert fresh["commitLogOffset"] > r1["commitLogOffsets"][-1]
            def total() -> int:  # autoCreate makes 4 queues; dispatch runs behind the answers
                return sum(c.pull("Dedup", q, 0, 32).get("maxOffset", 0) for q in range(4))

            wait_until(lambda: total() >= 4, 10.0, "the four stored messages dispatched")
            time.sleep(0.3)
            assert total() == 4  # one + the batch of two + two: nothing stored twice
            pulled = c.pull("Dedup", first["queueId"], 0, 32)
            assert len(pulled["messages"]) == len({m["commitLogOffset"] for m in pulled["messages"]})
            with pytest.raises(BrokerClientError) as ei:
                c.send("Dedup", b"bad", uniq_key="not-hex!")
            assert ei.value.code == "MESSAGE_ILLEGAL" and "uniqKey" in ei.value.message
    finally:
        kill_all([b])


def test_a_retry_waits_on_a_future_of_its_own_running_loop() -> None:
    """A put in flight makes no future; a retry of it gets one on the loop it runs on (a new
    loop of either kind each time), the put's outcome resolves it, and the put's end forgets
    the keys. Outside a loop, asking for one raises RuntimeError, as asyncio.get_running_loop()."""
    import asyncio
    w = RecentSends(60, ("10.0.0.1", 10911))

    async def two() -> tuple[bool, bool, object, bool]:
        f1, f2 = w.begin([dedup_key("T", "A")]), w.begin([dedup_key("T", "B")])
        assert f1.waiter is None and f2.waiter is None  # nothing made until a retry asks
        loop = asyncio.get_running_loop()
        r1, r2 = w.inflight([dedup_key("T", "A")]), w.inflight([dedup_key("T", "B")])
        assert r1 is not None and r2 is not None and w.inflight([dedup_key("T", "A")]) is r1
        w.end(f1, "stored-1")
        w.end(f2, None)
        return r1.get_loop() is loop, r2.get_loop() is loop, await r1, w.inflight([dedup_key("T", "A")]) is None

    import uvloop
    for run in (asyncio.run, asyncio.run, uvloop.run, asyncio.run):  # a new loop each time, of either kind
        assert run(two()) == (True, True, "stored-1", True)
    w.begin([dedup_key("T", "C")])
    with pytest.raises(RuntimeError):
        w.inflight([dedup_key("T", "C")])  # no running loop, as asyncio.get_running_loop() says


def test_a_remembered_put_is_one_entry_when_it_is_dispatched() -> None:
    """remember() puts each message's place in the window at once; its dispatch (the arrival
    listener, same place) leaves it as it is, and the other way round, so a key is one entry,
    not two (the window's bound counts entries). A dispatch of the key at another place
    replaces it."""
    w = RecentSends(60, ("10.0.0.1", 10911), clock=lambda: 50.0)
    w.remember([dedup_key("T", "A" * 32), dedup_key("T", "B" * 32)], 2, [7, 8], [1000, 1200], [200, 210])
    assert w.status()["keys"] == 2
    hit = w.lookup([dedup_key("T", "A" * 32), dedup_key("T", "B" * 32)])
    assert hit is not None and [(s.queue_id, s.queue_offset, s.physical_offset, s.size) for s in hit] == [
        (2, 7, 1000, 200), (2, 8, 1200, 210)]
    w.on_arrival([DispatchRequest("T", 2, 1000, 200, 0, 0, 7, uniq_key="A" * 32),
                  DispatchRequest("T", 2, 1200, 210, 0, 0, 8, uniq_key="B" * 32)])
    assert w.status()["keys"] == 2
    w.on_arrival([DispatchRequest("T", 3, 5000, 200, 0, 0, 1, uniq_key="A" * 32)])
    assert w.status()["keys"] == 3
    # the other order (a SYNC_MASTER's answer comes after its slave's ack, often after dispatch)
    w.on_arrival([DispatchRequest("T", 2, 1400, 220, 0, 0, 9, uniq_key="C" * 32)])
    w.remember([dedup_key("T", "C" * 32)], 2, [9], [1400], [220])
    assert w.status()["keys"] == 4
    moved = w.lookup([dedup_key("T", "A" * 32)])
    assert moved is not None and (moved[0].queue_id, moved[0].physical_offset) == (3, 5000)


def test_keys_of_names_the_topic_a_message_is_stored_under() -> None:
    """One key string per message: (stored topic, UNIQ_KEY); a delayed send's is the schedule
    topic's; a batch with one message lacking a UNIQ_KEY, or a consumer retry, has none."""
    from broker.store.message import MessageExt
    from broker.store.message_const import RMQ_SYS_SCHEDULE_TOPIC

    def msg(topic: str, **props: str) -> MessageExt:
        m = MessageExt(topic=topic, body=b"x")
        m.properties = dict(props)
        return m

    keys = RecentSends.keys_of([msg("T", UNIQ_KEY="A1"), msg("T", UNIQ_KEY="A2", DELAY="3")])
    assert keys == [dedup_key("T", "A1"), dedup_key(RMQ_SYS_SCHEDULE_TOPIC, "A2")]
    assert keys[0] != dedup_key("T", "A2") and keys[0] != dedup_key("TA", "1")  # the separator keeps them apart
    assert RecentSends.keys_of([msg("T", UNIQ_KEY="A1"), msg("T")]) is None
    assert RecentSends.keys_of([msg("%RETRY%g", UNIQ_KEY="A1")]) is None
    assert RecentSends.keys_of([msg("T", UNIQ_KEY="A1", DELAY="0")]) == [dedup_key("T", "A1")]

"""Delayed delivery (issue 14.1): broker/store/schedule.py on Apache's bytes and in real brokers.

- ``message_timeup`` turns each SCHEDULE_TOPIC_XXXX record of the variety store into the record
  Apache 4.9.8 itself redelivered: same properties string (DELAY and REAL_* kept), body, flags,
  hosts, sysFlag, reconsume times.
- A classic broker delivers a level-1 message 1 s after it was stored (within 100 ms), to its
  real topic and queue, not earlier; ``delayOffset.json`` records the progress; a level-2
  message pending across a kill -9 is delivered after the restart; CONSUMER_SEND_MSG_BACK delays
  the retry (level 1 asked: ~1 s; level 0: ``3 + reconsumeTimes`` in SCHEDULE_TOPIC_XXXX).
- The upgraded variety store (pending level 14 and 18 messages, due long ago) opened by a
  single-node DLedger broker: every pending message is delivered to its real topic exactly once
  and the offsets reach the queue ends (before: they sat there forever).
"""
from __future__ import annotations

import asyncio
import json
import struct
import time
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from broker.store.schedule import message_timeup
from broker.store.message import decode_message, encode_message
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

PREFIX = struct.Struct(">iiiiiqq")


def _wait(pred, timeout: float, what: str):
    return wait_until(pred, timeout, what, interval=0.02)


def test_message_timeup_reproduces_apaches_redelivered_records(fixture_root: Path, manifests) -> None:
    rows = manifests("variety-classic")
    data = {}

    def record(offset: int, size: int) -> bytes:
        base = offset - offset % (1 << 20)
        if base not in data:
            data[base] = (fixture_root / "variety-classic" / "commitlog" / f"{base:020d}").read_bytes()
        return data[base][offset - base:offset - base + size]

    by_uniq = {}
    for r in rows:
        by_uniq.setdefault(r.get("uniqKey") or r["properties"].get("UNIQ_KEY"), []).append(r)
    pairs = 0
    for group in by_uniq.values():
        sched = [r for r in group if r["topic"] == "SCHEDULE_TOPIC_XXXX"]
        real = [r for r in group if r["topic"] != "SCHEDULE_TOPIC_XXXX"]
        if not sched or not real:
            continue
        original = decode_message(record(sched[0]["commitLogOffset"], sched[0]["storeSize"]))
        apache = record(real[0]["commitLogOffset"], real[0]["storeSize"])
        inner = message_timeup(original)
        assert inner is not None and inner.topic == real[0]["topic"] and inner.queue_id == real[0]["queueId"]
        assert "DELAY" not in inner.properties  # the store must not delay it again
        got = decode_message(apache)
        inner.store_timestamp = got.store_timestamp
        ours = bytes(encode_message(inner, got.queue_offset, got.commitlog_offset))
        assert ours == apache, (real[0]["topic"], real[0]["commitLogOffset"])
        pairs += 1
    assert pairs == 3  # the three level-2 messages Apache delivered while the fixture was written


def _broker(tmp_path: Path, **extra) -> BrokerProc:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", **extra)
    return BrokerProc(conf, port, "m", tmp_path)


def _real(c, topic: str, queue: int) -> list[dict]:
    try:
        return c.pull(topic, queue, 0, 32).get("messages", [])
    except Exception:  # noqa: BLE001 - the topic may not exist yet
        return []


@pytest.mark.multiprocess
def test_classic_delay_precision_progress_kill9_and_consumer_retry(tmp_path: Path) -> None:
    b = _broker(tmp_path)
    try:
        b.start()
        with b.client() as c:
            r = c.send("Later", b"one second", queue_id=2, properties={"DELAY": "1"})
            stored = c.by_offset(r["commitLogOffset"])
            assert stored["topic"] == "SCHEDULE_TOPIC_XXXX" and stored["queueId"] == 0
            time.sleep(0.5)
            assert _real(c, "Later", 2) == []  # not before it is due
            got = _wait(lambda: _real(c, "Later", 2), 5.0, "the level-1 message delivered")
            m = got[0]
            late = m["storeTimestamp"] - stored["storeTimestamp"] - 1000
            assert 0 <= late < 100, late  # timer precision
            assert m["bodyText"] == "one second" and m["uniqKey"] == stored["uniqKey"]
            assert m["properties"]["REAL_TOPIC"] == "Later" and m["properties"]["DELAY"] == "1"  # as 4.9.8
            st = c.status()["schedule"]
            assert st["running"] and st["levels"]["1"]["offset"] == 1 and st["levels"]["1"]["pending"] == 0
            _wait(lambda: json.loads(c.config_file("delayOffset")["content"]).get("offsetTable", {}).get("1") == 1,
                  15.0, "delayOffset.json persisted")

            # pending across a kill -9: level 2 (5 s)
            r2 = c.send("Later", b"five seconds", queue_id=1, properties={"DELAY": "2"})
            sent_ts = c.by_offset(r2["commitLogOffset"])["storeTimestamp"]
        b.kill9()
        b.start()
        with b.client() as c:
            got = _wait(lambda: _real(c, "Later", 1), 15.0, "the level-2 message delivered after the restart")
            assert len(got) == 1 and got[0]["bodyText"] == "five seconds"
            assert got[0]["storeTimestamp"] >= sent_ts + 5000

            # consumer retry (CONSUMER_SEND_MSG_BACK = 36) is delayed too
            orig = c.send("Work", b"job", queue_id=0)

            async def send_back(level: int) -> int:
                cl = await RemotingClient.connect("127.0.0.1", b.api_port)
                try:
                    resp = await cl.request(36, {"offset": orig["commitLogOffset"], "group": "G1", "delayLevel": level,
                                                 "originMsgId": orig["msgId"], "originTopic": "Work"})
                    return resp.code
                finally:
                    await cl.close()

            t0 = int(time.time() * 1000)
            assert asyncio.run(send_back(1)) == 0
            assert [m for q in range(4) for m in _real(c, "%RETRY%G1", q)] == []  # not at once
            retried = _wait(lambda: [m for q in range(4) for m in _real(c, "%RETRY%G1", q)], 5.0, "the retry")
            assert retried[0]["storeTimestamp"] >= t0 + 900 and retried[0]["reconsumeTimes"] == 1
            assert asyncio.run(send_back(0)) == 0  # level 3 + reconsumeTimes(0) = 3 (10 s): waits in queue 2
            sched = _wait(lambda: _real(c, "SCHEDULE_TOPIC_XXXX", 2), 5.0, "the level-3 retry scheduled")
            assert sched[0]["properties"]["REAL_TOPIC"] == "%RETRY%G1" and sched[0]["properties"]["DELAY"] == "3"
    finally:
        kill_all([b])


@pytest.mark.multiprocess
def test_upgraded_store_pending_delayed_messages_are_delivered(tmp_path: Path, store_copy, manifests) -> None:
    """variety-mixed (upgraded in place by Apache, single-node group g0/n0): five delayed messages
    pending (levels 2, 14, 18; due long ago) are delivered once each, to their real queues."""
    from tools.broker_confs import dledger_single_conf

    root = store_copy("variety-mixed")
    conf, http = dledger_single_conf(tmp_path, root)
    pending = [r for r in manifests("variety-mixed") if r["topic"] == "SCHEDULE_TOPIC_XXXX"
               and not (r["queueId"] == 1 and r["queueOffset"] < 3)]  # delayOffset.json {2:3}
    assert len(pending) == 5
    b = BrokerProc(conf, http, "n0", tmp_path)
    try:
        b.start()
        with b.client() as c:
            _wait(lambda: c.status()["isMaster"], 30.0, "the single member leads")
            _wait(lambda: not c.status()["schedule"]["levels"] or all(
                lv["pending"] == 0 for lv in c.status()["schedule"]["levels"].values()), 20.0, "nothing pending")
            for r in pending:
                props = r["properties"]
                topic, qid = props["REAL_TOPIC"], int(props["REAL_QID"])
                got = _wait(lambda: [m for m in c.pull(topic, qid, 0, 1024)["messages"]
                                     if m["uniqKey"] == props["UNIQ_KEY"]], 10.0, f"delivery to {topic} dispatched")
                time.sleep(0.2)
                got = [m for m in c.pull(topic, qid, 0, 1024)["messages"] if m["uniqKey"] == props["UNIQ_KEY"]]
                assert len(got) == 1, (topic, got)
                assert got[0]["commitLogOffset"] > 10_957_773 and got[0]["properties"]["DELAY"] == props["DELAY"]
        b.stop()
        table = json.loads((root / "config" / "delayOffset.json").read_text())["offsetTable"]
        assert {int(k): v for k, v in table.items()} == {2: 4, 14: 2, 18: 2}
    finally:
        kill_all([b])


@pytest.mark.multiprocess
def test_delayed_message_survives_leader_kill(tmp_path: Path) -> None:
    """Three real brokers: a level-2 (5 s) message acknowledged by the leader, which is then
    killed; the new leader delivers it when due, once."""
    from tests.broker.test_dledger_group import IDS, DLedgerGroup

    g = DLedgerGroup(tmp_path)
    try:
        g.start()
        old = g.wait_master()
        with g.procs[old].client() as c:
            r = c.send("Delayed", b"after failover", queue_id=1, properties={"DELAY": "2"})
            sent = c.by_offset(r["commitLogOffset"])
        g.wait_in_sync()
        g.procs[old].kill9()
        new = g.wait_master(30, skip=(old,))
        with g.procs[new].client() as c:
            got = _wait(lambda: _real(c, "Delayed", 1), 20.0, "the delayed message delivered by the new leader")
            assert len(got) == 1 and got[0]["uniqKey"] == sent["uniqKey"]
            assert got[0]["storeTimestamp"] >= sent["storeTimestamp"] + 5000
            time.sleep(1.0)
            assert len(_real(c, "Delayed", 1)) == 1
            assert c.status()["schedule"]["running"]
        followers = [n for n in IDS if n not in (old, new)]
        with g.procs[followers[0]].client() as c:
            assert not c.status()["schedule"]["running"]  # only the master delivers
    finally:
        g.kill_all()

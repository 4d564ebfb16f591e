"""Lookups by msgId (VIEW_MESSAGE_BY_ID = 33) and by key (QUERY_MESSAGE = 12) in DLedger mode
(issue 14.4), on both Apache fixture sets upgraded in place, through the remoting protocol.

Before: both came back empty for any message, old region or new, because the broker read a
record's 4-byte size header first and DLedgerCommitLog serves whole records only. Now each
answer is the record exactly as Apache stored it, in both regions.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from tools.broker_confs import dledger_single_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess


def test_view_by_id_and_query_by_key_across_the_divide(tmp_path: Path, store_copy, fixture_set, manifests) -> None:
    root = store_copy(fixture_set.mixed)
    rows = manifests(fixture_set.mixed)
    old = next(r for r in rows if r["commitLogOffset"] < fixture_set.divided_offset and r.get("keys"))
    new = next(r for r in rows if r["commitLogOffset"] > fixture_set.divided_offset and r.get("keys")
               and r.get("sysFlag", 0) & 0xC != 0xC)  # ROLLBACK keys are not indexed
    data = {}

    def raw(row: dict) -> bytes:
        off, base = row["commitLogOffset"], row["commitLogOffset"] - row["commitLogOffset"] % (1 << 20)
        if off < fixture_set.divided_offset:
            path = root / "commitlog" / f"{base:020d}"
        else:
            path = root / "dledger-n0" / "data" / f"{base:020d}"
        if path not in data:
            data[path] = path.read_bytes()
        return data[path][off - base:off - base + row["storeSize"]]

    want = {id(old): raw(old), id(new): raw(new)}  # before the broker touches the files
    conf, port = dledger_single_conf(tmp_path, root)
    b = BrokerProc(conf, port, "n0", tmp_path)
    try:
        b.start()
        with b.client() as c:
            wait_until(lambda: c.status()["isMaster"], 30.0, "the member leads")

        async def lookups() -> list:
            cl = await RemotingClient.connect("127.0.0.1", port)
            try:
                out = []
                for row in (old, new):
                    by_id = await cl.request(33, {"offset": row["commitLogOffset"]})
                    key = row["keys"].split()[0]
                    by_key = await cl.request(12, {"topic": row["topic"], "key": key, "maxNum": 32,
                                                   "beginTimestamp": 0, "endTimestamp": 2 ** 62})
                    out.append((row, by_id, by_key))
                missing = await cl.request(33, {"offset": fixture_set.divided_offset + 7})  # not a record start
                out.append((None, missing, None))
                return out
            finally:
                await cl.close()

        results = asyncio.run(lookups())
        for row, by_id, by_key in results[:2]:
            assert by_id.code == 0 and by_id.body == want[id(row)], (row["commitLogOffset"], by_id.remark)
            assert by_key.code == 0 and want[id(row)] in by_key.body, (row["keys"], by_key.remark)
        assert results[2][1].code != 0 and "can not find message" in results[2][1].remark
    finally:
        kill_all([b])


def test_topics_longer_than_127_are_sent_pulled_and_written_with_v2_magic(tmp_path: Path) -> None:
    """A 200-character topic (RocketMQ 5 writes such records with v2 magic): send, pull by queue,
    lookup by offset, on a real classic broker; the record on disk has magic 0xDAA320AB and a
    2-byte topic length. 256 characters is refused (NAME_MAX: the topic is a directory)."""
    import struct

    from broker.api.client import BrokerClientError
    from tools.broker_confs import master_conf

    topic = "L" * 100 + "-" + "x" * 99
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        with b.client() as c:
            r = c.send(topic, b"long topic", queue_id=0)
            got = wait_until(lambda: c.pull(topic, 0, 0, 8)["messages"], 10.0, "the message dispatched")
            assert [m["bodyText"] for m in got] == ["long topic"] and got[0]["topic"] == topic
            assert c.by_offset(r["commitLogOffset"])["topic"] == topic
            with pytest.raises(BrokerClientError) as ei:
                c.send("y" * 256, b"too long")
            assert ei.value.code == "MESSAGE_ILLEGAL"
        raw = (tmp_path / "broker-a" / "commitlog" / f"{0:020d}").read_bytes()
        at = r["commitLogOffset"]
        assert struct.unpack_from(">I", raw, at + 4)[0] == 0xDAA320AB
        assert (tmp_path / "broker-a" / "consumequeue" / topic / "0").is_dir()
    finally:
        kill_all([b])

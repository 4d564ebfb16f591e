"""Transactional messages (issue 14.2) on real brokers, driven by a hand-written transactional
producer speaking the remoting protocol (no client here can: ali-ons 3.12 and the C++ wrapper have
no transactional producer, the Java client needs Maven Central).

- A half message (TRAN_MSG=true) is stored in RMQ_SYS_TRANS_HALF_TOPIC, invisible in its topic;
  COMMIT makes it visible (sysFlag COMMIT, preparedTransactionOffset = the half's offset),
  ROLLBACK never; a mismatching END_TRANSACTION is refused naming why.
- A half left open is checked back: CHECK_TRANSACTION_STATE reaches the producer of its group on
  its connection after transactionTimeOut, with the message; the producer's answer commits it.
- A half whose group has no producer online is discarded after transactionCheckMax checks.
- DLedger: a half acknowledged by a leader that is then killed is checked back by the new leader
  (check offsets and the half queue are replicated state), and commits there.
Before: END_TRANSACTION was REQUEST_CODE_NOT_SUPPORTED and half messages landed as PREPARED
records in the user's topic, never delivered.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.store.message import decode_message
from broker.store.message_id import decode_message_id
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess
TX = dict(transactionTimeOut=1000, transactionCheckInterval=300, transactionCheckMax=2)


class TxProducer:
    """Just enough of a transactional producer: heartbeat, half send, END_TRANSACTION, checks."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.checks: list[RemotingCommand] = []
        self.client: RemotingClient | None = None

    async def connect(self, port: int) -> None:
        self.client = await RemotingClient.connect("127.0.0.1", port, on_request=self.checks.append)
        hb = '{"clientID":"tx-%s","producerDataSet":[{"groupName":"%s"}],"consumerDataSet":[]}' % (self.group, self.group)
        r = await self.client.request(34, {}, hb.encode())
        assert r.code == 0, r.remark

    async def half(self, topic: str, body: bytes, group: str | None = None) -> tuple[int, int]:
        assert self.client is not None
        props = f"TRAN_MSG\x01true\x02PGROUP\x01{group or self.group}\x02UNIQ_KEY\x01{uuid.uuid4().hex.upper()}\x02KEYS\x01tx"
        r = await self.client.request(10, {
            "producerGroup": group or self.group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": 1, "sysFlag": 4, "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": props,
            "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}, body)
        assert r.code == 0, r.remark
        return decode_message_id(r.ext_fields["msgId"])[1], int(r.ext_fields["queueOffset"])

    async def end(self, phy: int, queue_offset: int, what: int, from_check: bool = False,
                  group: str | None = None) -> RemotingCommand:
        assert self.client is not None
        return await self.client.request(37, {"producerGroup": group or self.group, "tranStateTableOffset": queue_offset,
                                              "commitLogOffset": phy, "commitOrRollback": what,
                                              "fromTransactionCheck": str(from_check).lower()})

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


def visible(c: Any, topic: str) -> list[dict]:
    try:
        return c.pull(topic, 1, 0, 32).get("messages", [])
    except Exception:  # noqa: BLE001 - topic not there yet
        return []


def test_commit_rollback_checkback_and_discard(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", **TX)
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        with b.client() as c:
            async def run() -> None:
                p = TxProducer("PG")
                await p.connect(port)
                try:
                    phy1, q1 = await p.half("TxTopic", b"commit me")
                    await asyncio.sleep(0.3)
                    assert visible(c, "TxTopic") == []  # a half message is not delivered
                    half = c.by_offset(phy1)
                    assert half["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC" and half["properties"]["REAL_TOPIC"] == "TxTopic"
                    bad = await p.end(phy1, q1, 8, group="OtherGroup")
                    assert bad.code == 1 and "producer group wrong" in bad.remark
                    assert (await p.end(phy1, q1, 8)).code == 0
                    got = wait_until(lambda: visible(c, "TxTopic"), 5, "the committed message")
                    assert [m["bodyText"] for m in got] == ["commit me"]
                    assert got[0]["sysFlag"] & 0xC == 0x8

                    phy2, q2 = await p.half("TxTopic", b"roll me back")
                    assert (await p.end(phy2, q2, 12)).code == 0

                    await p.half("TxTopic", b"check me")
                    await p.half("TxTopic", b"nobody to ask", group="PG-offline")
                    check = await asyncio.wait_for(_first_check(p), 10)
                    assert check.code == 39
                    msg = decode_message(check.body)
                    assert msg.topic == "TxTopic" and msg.body == b"check me"
                    f = check.ext_fields
                    assert (await p.end(int(f["commitLogOffset"]), int(f["tranStateTableOffset"]), 8, True)).code == 0
                    got = wait_until(lambda: len(visible(c, "TxTopic")) == 2 and visible(c, "TxTopic"), 5, "checked")
                    assert [m["bodyText"] for m in got] == ["commit me", "check me"]
                    wait_until(lambda: c.status()["transactions"]["discarded"] >= 1, 15, "the offline group's half discarded")
                    await asyncio.sleep(1.5)
                    assert [m["bodyText"] for m in visible(c, "TxTopic")] == ["commit me", "check me"]
                    st = c.status()["transactions"]
                    assert st["committed"] == 2 and st["rolledBack"] == 1 and st["checks"] >= 1 and st["noProducer"] >= 1
                finally:
                    await p.close()

            asyncio.run(run())
    finally:
        kill_all([b])


async def _first_check(p: TxProducer) -> RemotingCommand:
    while not p.checks:
        await asyncio.sleep(0.05)
    return p.checks[0]


def test_half_message_survives_leader_kill_and_is_checked_back_by_the_new_leader(tmp_path: Path) -> None:
    from tests.broker.test_dledger_group import IDS, DLedgerGroup

    g = DLedgerGroup(tmp_path, **TX)
    try:
        g.start()
        old = g.wait_master()

        async def prepare() -> tuple[int, int]:
            p = TxProducer("PGR")
            await p.connect(g.http[old])
            try:
                return await p.half("TxRaft", b"across failover")
            finally:
                await p.close()

        asyncio.run(prepare())
        g.wait_in_sync()
        g.procs[old].kill9()
        new = g.wait_master(30, skip=(old,))

        async def answer() -> RemotingCommand:
            p = TxProducer("PGR")
            await p.connect(g.http[new])
            try:
                check = await asyncio.wait_for(_first_check(p), 15)
                f = check.ext_fields
                r = await p.end(int(f["commitLogOffset"]), int(f["tranStateTableOffset"]), 8, True)
                assert r.code == 0, r.remark
                return check
            finally:
                await p.close()

        check = asyncio.run(answer())
        assert decode_message(check.body).body == b"across failover"
        with g.procs[new].client() as c:
            got = wait_until(lambda: visible(c, "TxRaft"), 10, "the message committed on the new leader")
            assert [m["bodyText"] for m in got] == ["across failover"]
        survivors = [n for n in IDS if n != old]
        assert new in survivors
    finally:
        g.kill_all()

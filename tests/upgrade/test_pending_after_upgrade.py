"""A classic store holding a pending delayed message and an open half message, upgraded in place
(mqupgrade plan + apply) and started in DLedger mode: the delayed message is delivered when due
and the half message is checked back with its producer and committed (issues 14.1, 14.2).

Pending work lives in the store itself (SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_HALF_TOPIC queues,
delayOffset.json and the CID_RMQ_SYS_TRANS offsets in consumerOffset.json), all carried by the
upgrade, so the new leader continues it.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tools.procs import free_port
from tools.broker_confs import dledger_single_conf, master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.broker.test_transaction import TX, TxProducer, _first_check, visible
from upgrade.apply import apply_plan
from upgrade.plan import make_plan, parse_self_ids

pytestmark = pytest.mark.multiprocess
LEVELS = "1s 4s " + " ".join(["1s"] * 16)  # level 2 = 4 s: still pending when the classic broker stops


def test_pending_delayed_and_half_messages_continue_after_upgrade(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", messageDelayLevel=LEVELS,
                             **TX)
    root = tmp_path / "broker-a"
    classic = BrokerProc(conf, port, "classic", tmp_path)
    procs = [classic]
    try:
        classic.start()
        with classic.client() as c:
            sent = c.send("Later", b"delayed across the upgrade", queue_id=1, properties={"DELAY": "2"})

        async def prepare() -> None:
            p = TxProducer("PGU")
            await p.connect(port)
            try:
                await p.half("TxTopic", b"half across the upgrade")
            finally:
                await p.close()

        asyncio.run(prepare())
        assert classic.stop() == 0  # before either is due (delay 4 s; no producer to check back)

        plan = make_plan("g0", f"n0-127.0.0.1:{free_port()}", parse_self_ids(f"n0={root}"), conf_dir=tmp_path / "plan")
        assert plan.ok, plan.refusals
        plan.save(tmp_path / "plan.json")
        apply_plan(tmp_path / "plan.json", echo=lambda _line: None)

        # each check without a producer online counts (as Apache): room for the ones before it connects
        tx = {**TX, "transactionCheckMax": 100}
        dconf, dport = dledger_single_conf(tmp_path, root, mappedFileSizeCommitLog=1 << 20, maxHashSlotNum=5_000_000,
                                           maxIndexNum=20_000_000, messageDelayLevel=LEVELS, **tx)
        raft = BrokerProc(dconf, dport, "raft", tmp_path)
        procs.append(raft)
        raft.start()
        with raft.client() as c:
            wait_until(lambda: c.status()["isMaster"], 30, "the upgraded member leads")
            got = wait_until(lambda: visible(c, "Later"), 15, "the delayed message delivered after the upgrade")
            assert [m["bodyText"] for m in got] == ["delayed across the upgrade"]
            assert got[0]["commitLogOffset"] > c.status()["dledger"]["dividedCommitlogOffset"]
            assert got[0]["uniqKey"] == c.by_offset(sent["commitLogOffset"])["uniqKey"]

            async def answer() -> None:
                p = TxProducer("PGU")
                await p.connect(dport)
                try:
                    check = await asyncio.wait_for(_first_check(p), 15)
                    f = check.ext_fields
                    assert (await p.end(int(f["commitLogOffset"]), int(f["tranStateTableOffset"]), 8, True)).code == 0
                finally:
                    await p.close()

            asyncio.run(answer())
            got = wait_until(lambda: c.pull("TxTopic", 1, 0, 8).get("messages"), 10, "the half committed")
            assert [m["bodyText"] for m in got] == ["half across the upgrade"]
            time.sleep(0.5)
            assert len(visible(c, "Later")) == 1
    finally:
        kill_all(procs)

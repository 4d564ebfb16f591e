"""A retried send after a DLedger failover is answered, not stored twice (issue 13.6).

Three real brokers. A send with ``uniqKey`` K is acknowledged by the leader and replicated; the
leader is killed with SIGKILL before its producer heard back (simulated: the producer "retries"
K to the group). The new leader, whose window was fed by its own dispatch while it followed,
answers with the original offsets and msgId; K is in the queue once. A batch behaves the same,
and a send with a fresh key after the failover is stored normally.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.api.client import MasterFollowingProducer, message_json
from tools.procs import wait_until
from tests.broker.test_dledger_group import IDS, TOPIC, DLedgerGroup

pytestmark = pytest.mark.multiprocess


def test_retry_after_failover_is_answered_from_the_new_leaders_window(tmp_path: Path) -> None:
    g = DLedgerGroup(tmp_path)
    try:
        g.start()
        old = g.wait_master()
        key = "ABCDEF01" * 4
        batch = [message_json(b"b1", uniq_key="B1" * 16), message_json(b"b2", uniq_key="B2" * 16)]
        with g.procs[old].client() as c:
            first = c.send(TOPIC, b"payload", uniq_key=key, queue_id=1)
            first_batch = c.send_batch(TOPIC, batch, queue_id=2)
        g.wait_in_sync()
        g.procs[old].kill9()
        new = g.wait_master(30, skip=(old,))
        assert new != old
        live = [g.address(n) for n in IDS if n != old]

        async def retry() -> tuple[dict, dict, dict]:
            async with MasterFollowingProducer(live, timeout=5.0, retry_for=30.0) as p:
                again = await p.send(TOPIC, b"payload", uniq_key=key, queue_id=3)  # another queue chosen this time
                again_batch = await p.send_batch(TOPIC, batch, queue_id=0)
                fresh = await p.send(TOPIC, b"fresh", queue_id=1)
                return again, again_batch, fresh

        again, again_batch, fresh = asyncio.run(retry())
        assert (again["commitLogOffset"], again["queueId"], again["queueOffset"], again["msgId"]) == \
            (first["commitLogOffset"], first["queueId"], first["queueOffset"], first["msgId"])
        assert again_batch["commitLogOffsets"] == first_batch["commitLogOffsets"]
        assert again_batch["queueId"] == first_batch["queueId"] == 2
        assert fresh["uniqKey"] and fresh["uniqKey"] != key and fresh["commitLogOffset"] > first_batch["commitLogOffsets"][-1]
        with g.procs[new].client() as c:
            wait_until(lambda: len(c.pull(TOPIC, 1, 0, 32)["messages"]) >= 2, 10, "fresh dispatched on the leader")
            q1 = c.pull(TOPIC, 1, 0, 32)
            q2 = c.pull(TOPIC, 2, 0, 32)
            q3 = c.pull(TOPIC, 3, 0, 32)
            st = c.status()
        assert [m["uniqKey"] for m in q1["messages"]] == [key, fresh["uniqKey"]]
        assert [m["uniqKey"] for m in q2["messages"]] == ["B1" * 16, "B2" * 16]
        assert q3.get("messages", []) == []
        assert st["sendDedup"]["hits"] >= 3, st["sendDedup"]
    finally:
        g.kill_all()

"""A put that was proposed is never answered "not stored" (issue 13.6).

Two members in one process; the follower stops, so the leader's appended entry cannot reach a
quorum. With a long ack timeout the leader loses leadership first (check-quorum): before the
fix the put answered SERVICE_NOT_AVAILABLE (the broker turned it into NOT_MASTER, and a producer
retried into a duplicate once the entry committed). Now it answers FLUSH_SLAVE_TIMEOUT, "outcome
unknown", with the offsets it would have; and when the follower comes back the entry commits
exactly there, which is why the answer could not be "failed".
"""
from __future__ import annotations

import time
from pathlib import Path

from tools.procs import free_port
from broker.store.message_store import DefaultMessageStore
from broker.store.put_result import PutMessageStatus
from dledger.core.codes import Code
from tests.broker.store.test_dledger_commitlog import dledger_store, msg
from tests.broker.store.test_dledger_commitlog_ported import SMALL, TOPIC


def _wait(cond, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def test_put_that_lost_its_leader_after_the_append_is_outcome_unknown(tmp_path: Path) -> None:
    ports = free_port(), free_port()
    peers = f"n0-127.0.0.1:{ports[0]};n1-127.0.0.1:{ports[1]}"
    dl = {"max_wait_ack_ms": 60_000, "preferred_leader_ids": "n0"}

    def node(i: int) -> DefaultMessageStore:
        s = dledger_store(tmp_path / f"n{i}", peers, self_id=f"n{i}", dledger=dl, **SMALL)
        s.load()
        s.start()
        return s

    s0, s1 = node(0), node(1)
    try:
        assert s0.commitlog.wait_leader_ready(15), s0.commitlog.status()
        assert s0.put_message(msg(TOPIC, 0, 0)).ok
        s1.shutdown()
        res = s0.commitlog.put_messages([msg(TOPIC, 0, 1)], timeout=30)
        assert res.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT, res
        assert res.extra["outcome_unknown"] is True and "outcome unknown" in res.error
        assert res.extra["dledger_code"] != int(Code.WAIT_QUORUM_ACK_TIMEOUT), res  # lost leadership, not a timeout
        wrote = res.append_result.wrote_offset
        assert s0.commitlog.counters["outcome_unknown"] == 1

        # never proposed (not a ready leader now): SERVICE_NOT_AVAILABLE, which may be retried
        refused = s0.put_message(msg(TOPIC, 0, 2))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and refused.append_result is None

        s1 = node(1)  # the follower is back: n0's longer log wins and the "failed" entry commits
        assert _wait(lambda: s0.look_message_by_offset(wrote) is not None)
        assert s0.look_message_by_offset(wrote).body == msg(TOPIC, 0, 1).body
    finally:
        s0.shutdown()
        s1.shutdown()

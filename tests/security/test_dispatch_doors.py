"""Issue 12, item 1: hostile DLedger entries never stop dispatch nor become a path (real mqbroker).

A single-member DLedger broker (``conf/dledger/broker-n0.conf``, one peer, its sample
``dLegerAuthToken``) takes a send, is stopped, and two entries are appended to its DLedger log
through the DLedger library, exactly what a client ``append`` used to do: a message record whose
topic walks out of the store to ``/tmp/dispatch-door-<uuid>`` and 200 zero bytes. The broker is
restarted: it must become master (its leader waits for dispatch to catch up, which a stopped
ReputMessageService never does), create nothing outside its store, report both entries with file
and offset in its log, ``/status`` and ``/metrics``, dispatch and serve later sends, and stay up.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from broker.config.conf_file import load_conf
from tools.procs import free_ports, write_conf
from broker.store.message import MessageExt, encode_message
from broker.store.message_store import DefaultMessageStore
from tools.nodes import BrokerProc
from tools.procs import REPO, wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "DoorTopic"


def traversal_topic(consumequeue: Path, target: str) -> str:
    """``../../..`` from ``consumequeue`` up to ``/``, then ``tmp/<target>`` (``../../../../tmp/X``)."""
    depth = len(consumequeue.resolve().parts) - 1
    return "../" * depth + "tmp/" + target


def append_raw_entries(conf: Path, bodies: list[bytes]) -> list[int]:
    """Open the stopped broker's store with the store code and append ``bodies`` as DLedger
    entries through its DLedger server; returns their positions (committed, flushed)."""
    store = DefaultMessageStore(load_conf(conf).store)
    store.load()
    store.start()
    try:
        cl = store.commitlog
        assert cl.wait_leader_ready(15), cl.status()

        async def append(body: bytes) -> int:
            fut = cl.server.append(body)
            await fut
            return fut.pos

        return [cl._await_on_loop(lambda b=body: append(b)) for body in bodies]
    finally:
        store.shutdown()


def test_hostile_dledger_entries_are_skipped_reported_and_never_a_path(tmp_path: Path) -> None:
    http, raft = free_ports(2)
    root = tmp_path / "n0"
    conf = write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp_path / "broker-n0.conf", {
        "listenPort": http, "dLegerPeers": f"n0-127.0.0.1:{raft}", "dLegerPeersHttp": f"n0-127.0.0.1:{http}",
        "storePathRootDir": root, "storePathCommitLog": root / "commitlog", "mappedFileSizeCommitLog": 1 << 20,
    })
    outside = Path("/tmp") / f"dispatch-door-{uuid.uuid4().hex[:12]}"
    evil_topic = traversal_topic(root / "consumequeue", outside.name)
    assert (root / "consumequeue" / evil_topic).resolve() == outside.resolve()
    broker = BrokerProc(conf, http, "n0", tmp_path)
    try:
        broker.start(timeout=60)
        with broker.client() as c:
            wait_until(lambda: c.status().get("isMaster"), 30, "the single member becomes master")
            first = c.send(TOPIC, "before", queue_id=0)
        assert broker.stop() == 0, broker.log()

        evil = bytes(encode_message(MessageExt(evil_topic, b"evil", queue_id=0, properties={"KEYS": "evil"}), 0, 0))
        positions = append_raw_entries(conf, [evil, bytes(200)])

        broker.start(timeout=60)
        with broker.client() as c:
            # the leader is ready only once dispatch has caught up: stuck dispatch never gets here
            wait_until(lambda: c.status().get("isMaster") and c.status().get("writable"), 30,
                       "master again, dispatch caught up past the hostile entries")
            after = [c.send(TOPIC, f"after-{i}", queue_id=0) for i in range(3)]
            got = wait_until(lambda: len(m := c.pull(TOPIC, 0, 0, 16)["messages"]) == 4 and m, 15,
                             "later sends dispatched and pullable")
            assert [m["commitLogOffset"] for m in got] == [first["commitLogOffset"]] + [
                a["commitLogOffset"] for a in after]
            status = c.status()
            metrics = c.metrics()
        dispatch = status["dispatch"]
        assert dispatch["skippedRecords"] == 2 and dispatch["error"] is None, dispatch
        assert [s["offset"] for s in dispatch["lastSkipped"]] == positions
        assert all(Path(s["file"]).is_relative_to(root) and s["filePos"] >= 0 for s in dispatch["lastSkipped"])
        assert status["dispatchBehindBytes"] == 0
        assert "rocketmq_broker_dispatch_skipped_records_total 2" in metrics
        log = broker.log()
        for pos in positions:
            assert f"dispatch skipped the record at commitlog offset {pos}" in log
        assert "Traceback" not in log
        assert broker.alive()
    finally:
        broker.stop()
        leaked = outside.exists()
        if leaked:  # never leave the attack's directory behind
            import shutil

            shutil.rmtree(outside, ignore_errors=True)
    assert not leaked, f"the broker created {outside} outside its store"
    assert sorted(os.listdir(root / "consumequeue")) == [TOPIC]

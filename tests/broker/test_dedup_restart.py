"""Issue 24.2: the send dedup window survives a restart (kill -9 and SIGTERM), in both modes.

Before: the window was memory only, so a producer retrying (same UNIQ_KEY) a send whose answer
it never saw stored it again after the broker restarted: 141 duplicates in 100 kill -9 of a
classic master. Now the window is rebuilt from the commitlog's tail at start, each key with its
age (``broker.put_dedup_rebuild``).
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.put_dedup import RecentSends, dedup_key
from broker.put_dedup_rebuild import rebuild_window
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore
from tools.broker_confs import dledger_single_conf, master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

TOPIC = "TopicDedupRestart"


def _restart_and_retry(b: BrokerProc, how: str, sent: list[dict], keys: list[str]) -> None:
    if how == "kill9":
        b.kill9()
    else:
        assert b.stop() == 0
    b.start()
    with b.client() as c:
        wait_until(lambda: c.status()["isMaster"], 30.0, "master again")
        before = c.topic_status(TOPIC)["queues"][0]["maxOffset"]
        again = [c.send(TOPIC, f"m{i}", uniq_key=k, queue_id=0) for i, k in enumerate(keys)]
        assert [(a["commitLogOffset"], a["queueOffset"], a["msgId"]) for a in again] == \
            [(s["commitLogOffset"], s["queueOffset"], s["msgId"]) for s in sent]
        assert c.topic_status(TOPIC)["queues"][0]["maxOffset"] == before == len(keys)  # nothing stored twice
        assert c.status()["sendDedup"]["hits"] >= len(keys)
    assert "send dedup window rebuilt from the commitlog tail" in b.log()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["classic", "dledger"])
def test_a_retry_after_a_restart_is_answered_not_stored_again(tmp_path: Path, mode: str) -> None:
    if mode == "classic":
        conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    else:
        conf, port = dledger_single_conf(tmp_path, tmp_path / "n0-store", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, f"dedup-{mode}", tmp_path)
    try:
        b.start()
        keys = [f"{0xC1A5 if mode == 'classic' else 0xD1ED:04X}{i:04d}".ljust(32, "0") for i in range(20)]
        with b.client() as c:
            wait_until(lambda: c.status()["isMaster"], 30.0, "master")
            sent = [c.send(TOPIC, f"m{i}", uniq_key=k, queue_id=0) for i, k in enumerate(keys)]
            wait_until(lambda: c.topic_status(TOPIC)["queues"][0]["maxOffset"] == len(keys), 10, "dispatched")
        _restart_and_retry(b, "kill9", sent, keys)
        _restart_and_retry(b, "sigterm", sent, keys)
    finally:
        kill_all([b])


def test_keys_keep_their_age_and_old_ones_stay_out(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=256 * 1024) as store:
        for i in range(600):  # several files, so the boundary search has somewhere to look
            store.put_message(MessageExt(topic=TOPIC, body=b"y" * 900, queue_id=i % 3,
                                         properties={"UNIQ_KEY": f"K{i:05d}"}))
        assert store.wait_dispatched()
    with DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=256 * 1024) as store:
        now_ms = int(time.time() * 1000)
        window = RecentSends(60, ("127.0.0.1", 10911))
        assert rebuild_window(store, 60, window.on_arrival_at, now_ms=now_ms) == 600
        hit = window.lookup([dedup_key(TOPIC, "K00000"), dedup_key(TOPIC, "K00599")])
        assert hit is not None and hit[0].physical_offset == 0 and hit[1].queue_id == 599 % 3
        # seen 50 s later: the same records are 50 s old and leave the window 10 s from now
        clock = [time.monotonic()]
        aged = RecentSends(60, ("127.0.0.1", 10911), clock=lambda: clock[0])
        rebuild_window(store, 60, aged.on_arrival_at, now_ms=now_ms + 50_000)
        assert aged.lookup([dedup_key(TOPIC, "K00001")]) is not None
        clock[0] += 11
        assert aged.lookup([dedup_key(TOPIC, "K00001")]) is None
        # seen 61 s later: every record is older than the window, none is fed
        late = RecentSends(60, ("127.0.0.1", 10911))
        assert rebuild_window(store, 60, late.on_arrival_at, now_ms=now_ms + 61_000) == 0

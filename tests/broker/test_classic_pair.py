"""Classic master/slave pair as real processes on 127.0.0.1 (issue 4, "Must show").

Each test starts a master and a slave from conf files generated from conf/classic with free
ports, and kills both in ``finally``.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Iterator

import pytest

from broker.api.client import BrokerClientError, body_bytes
from tests.support.store_reads import commitlog_bytes
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess


def _pair(tmp_path: Path, role: str = "SYNC_MASTER", master_extra: dict | None = None,
          slave_extra: dict | None = None) -> tuple[BrokerProc, BrokerProc]:
    mconf, mport = master_conf(tmp_path, role, **(master_extra or {}))
    sconf, sport = slave_conf(tmp_path, mport, **(slave_extra or {}))
    return BrokerProc(mconf, mport, "master", tmp_path), BrokerProc(sconf, sport, "slave", tmp_path)


@contextlib.contextmanager
def _started_pair(tmp_path: Path, role: str, *, master_extra: dict | None = None,
                  connected: bool = True) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    """Master and slave started (with ``connected``, until the slave's HA link is up); SIGKILLed after."""
    master, slave = _pair(tmp_path, role, master_extra)
    try:
        master.start()
        slave.start()
        if connected:
            _wait_connected(master)
        yield master, slave
    finally:
        kill_all([master, slave])


def _max_offset(p: BrokerProc) -> int:
    with p.client() as c:
        return c.status()["commitLog"]["maxOffset"]


def _wait_slave_caught_up(master: BrokerProc, slave: BrokerProc, timeout: float = 20.0) -> int:
    target = _max_offset(master)
    wait_until(lambda: _max_offset(slave) >= target, timeout, f"slave max offset >= {target}")
    return target


def _wait_connected(master: BrokerProc, timeout: float = 20.0) -> None:
    def connected() -> bool:
        with master.client() as c:
            return bool(c.status()["ha"].get("connections"))
    wait_until(connected, timeout, "slave connected to master")


@pytest.mark.timeout(120)
def test_replicated_bytes_identical_and_pullable_from_slave(tmp_path: Path) -> None:
    with _started_pair(tmp_path, "ASYNC_MASTER", connected=False) as (master, slave):
        sent = []
        with master.client() as c:
            c.create_topic("TopicPair", read_queue_nums=2, write_queue_nums=2)
            for i in range(40):
                body = os.urandom(16) + b"msg-%d" % i + b"x" * (i * 37 % 900)
                r = c.send("TopicPair", body, tags="TagA", keys=[f"k{i}"], queue_id=i % 2)
                sent.append((r, body))
            batch = c.send_batch("TopicPair", [b"batch-%d" % i for i in range(10)], queue_id=0)
        top = _wait_slave_caught_up(master, slave)
        # byte-identical commitlogs up to the master's max offset
        assert commitlog_bytes(tmp_path / "broker-a", top) == commitlog_bytes(tmp_path / "broker-a-s", top)
        with slave.client() as s:
            # pull every message from the slave (its own ConsumeQueues, built by dispatch)
            def pulled(qid: int) -> list:
                res = s.pull("TopicPair", qid, 0, 100)
                return res["messages"] if len(res["messages"]) >= (30 if qid == 0 else 20) else []
            q0 = wait_until(lambda: pulled(0), 20, "slave dispatched queue 0")
            q1 = wait_until(lambda: pulled(1), 20, "slave dispatched queue 1")
            by_offset = {m["commitLogOffset"]: m for m in q0 + q1}
            for r, body in sent:
                m = by_offset[r["commitLogOffset"]]
                assert body_bytes(m) == body
                assert m["msgId"] == r["msgId"] and m["queueOffset"] == r["queueOffset"]
            assert [body_bytes(by_offset[o]) for o in batch["commitLogOffsets"]] == [b"batch-%d" % i for i in range(10)]
            # lookups served by the slave
            r0, body0 = sent[5]
            assert body_bytes(s.by_id(r0["msgId"])) == body0
            assert body_bytes(s.by_offset(r0["commitLogOffset"])) == body0
            keyed = wait_until(lambda: s.by_key("TopicPair", "k7")["messages"], 10, "key index on slave")
            assert body_bytes(keyed[0]) == sent[7][1]
            # a slave refuses writes and names the master
            with pytest.raises(BrokerClientError) as exc:
                s.send("TopicPair", "nope")
            assert exc.value.code == "NOT_MASTER" and exc.value.body["masterAddress"] == master.address


@pytest.mark.timeout(120)
def test_sync_master_acks_only_after_slave_has_bytes(tmp_path: Path) -> None:
    with _started_pair(tmp_path, "SYNC_MASTER") as (master, slave):
        with master.client() as c, slave.client() as s:
            for i in range(20):
                r = c.send("TopicSync", b"sync-%d" % i * 20)
                assert r["status"] == "SEND_OK"
                # acknowledged => already in the slave's commitlog
                assert s.status()["commitLog"]["maxOffset"] >= r["commitLogOffset"] + r["storeSize"]
            b = c.send_batch("TopicSync", [b"b1", b"b2", b"b3"])
            assert s.status()["commitLog"]["maxOffset"] >= b["commitLogOffsets"][-1]


@pytest.mark.timeout(180)
def test_slave_down_then_catches_up(tmp_path: Path) -> None:
    with _started_pair(tmp_path, "SYNC_MASTER", master_extra={"syncFlushTimeout": 1000}) as (master, slave):
        with master.client() as c:
            c.send("TopicDown", "before")
            # paused slave: connection stays up, no ack => FLUSH_SLAVE_TIMEOUT after syncFlushTimeout
            slave.pause()
            t0 = time.monotonic()
            with pytest.raises(BrokerClientError) as exc:
                c.send("TopicDown", "while-paused")
            assert exc.value.code == "FLUSH_SLAVE_TIMEOUT"
            assert 0.9 <= time.monotonic() - t0 < 5
            assert exc.value.body["msgId"]  # stored on the master, not rolled back
            slave.resume()
            # stopped slave: no connection => SLAVE_NOT_AVAILABLE at once
            assert slave.stop() == 0
            wait_until(lambda: c.status()["ha"]["connections"] == 0, 30, "master sees the slave gone")
            stored_while_down = []
            for i in range(5):
                with pytest.raises(BrokerClientError) as exc:
                    c.send("TopicDown", b"down-%d" % i)
                assert exc.value.code == "SLAVE_NOT_AVAILABLE"
                stored_while_down.append(exc.value.body["commitLogOffset"])
            # the master kept them
            assert body_bytes(c.by_offset(stored_while_down[-1])) == b"down-4"
        # restart: resumes from its own max offset and catches up
        slave.start()
        top = _wait_slave_caught_up(master, slave)
        assert commitlog_bytes(tmp_path / "broker-a", top) == commitlog_bytes(tmp_path / "broker-a-s", top)
        assert "normal recovery" in slave.log()  # the SIGTERM shutdown was clean
        with master.client() as c:
            _wait_connected(master)
            assert c.send("TopicDown", "after")["status"] == "SEND_OK"


@pytest.mark.timeout(120)
def test_kill9_master_slave_keeps_serving_reads(tmp_path: Path) -> None:
    with _started_pair(tmp_path, "SYNC_MASTER") as (master, slave):
        with master.client() as c:
            acked = [c.send("TopicKill", b"k-%d" % i, queue_id=0) for i in range(30)]
        master.kill9()
        with slave.client() as s:
            res = wait_until(lambda: (r := s.pull("TopicKill", 0, 0, 100)) and len(r["messages"]) == 30 and r,
                             20, "slave serves all acknowledged messages")
            assert [body_bytes(m) for m in res["messages"]] == [b"k-%d" % i for i in range(30)]
            assert [m["commitLogOffset"] for m in res["messages"]] == [a["commitLogOffset"] for a in acked]
            assert s.status()["brokerRole"] == "SLAVE"
            wait_until(lambda: s.status()["ha"]["connected"] is False, 30, "slave notices the master is gone")
            with pytest.raises(BrokerClientError) as exc:
                s.send("TopicKill", "x")
            assert exc.value.code == "NOT_MASTER"


@pytest.mark.timeout(120)
def test_metadata_changes_reach_slave(tmp_path: Path) -> None:
    with _started_pair(tmp_path, "ASYNC_MASTER", connected=False) as (master, slave):
        with master.client() as c:
            c.create_topic("TopicMeta", read_queue_nums=3, write_queue_nums=3)
            for q in (1, 2):  # an offset is committed inside its queue (broker.offset_commit)
                for i in range(8):
                    c.send("TopicMeta", f"m{i}", queue_id=q)
            wait_until(lambda: c.topic_status("TopicMeta")["queues"][2]["maxOffset"] == 8, 10, "8 dispatched")
            c.commit_offset("GroupMeta", "TopicMeta", 1, 6)
            topics_version = c.config_file("topics")["dataVersion"]
        with slave.client() as s:
            # SlaveSynchronize: first pull 3 s after start, then every 10 s
            wait_until(lambda: any(t["topicName"] == "TopicMeta" for t in s.topics()["topics"]), 20, "topic on slave")
            wait_until(lambda: s.query_offsets("GroupMeta")["offsets"].get("TopicMeta@GroupMeta", {}).get("1") == 6,
                       20, "consumer offset on slave")
            assert s.config_file("topics")["dataVersion"] == topics_version
            # later changes arrive with the next periodic sync
            with master.client() as c:
                c.commit_offset("GroupMeta", "TopicMeta", 2, 7)
            wait_until(lambda: s.query_offsets("GroupMeta")["offsets"].get("TopicMeta@GroupMeta", {}).get("2") == 7,
                       25, "second offset commit on slave")
        cfg = tmp_path / "broker-a-s" / "config"
        assert "TopicMeta" in (cfg / "topics.json").read_text()
        # the master's listenPort speaks remoting: the sync used GET_ALL_* there, not HTTP
        slave_log = slave.log_path.read_text(errors="replace")
        assert f"SlaveSynchronize from master 127.0.0.1:{master.api_port} over remoting" in slave_log
        assert "syncing over HTTP" not in slave_log

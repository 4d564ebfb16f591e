"""BrokerController lifecycle and role seam: abort/lock handling, clean vs crash restarts, and the
single "am I master?" gate that DLedger's role-change handler will drive."""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.api.client import BrokerClient, BrokerClientError, body_bytes
from broker.config.conf_file import load_conf
from broker.controller import BrokerController
from broker.store.lockfile import StoreLock
from tools.broker_confs import classic_conf, master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import port_pair, wait_until


@pytest.mark.timeout(60)
async def test_role_seam_in_process(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, "ASYNC_MASTER")
    parsed = load_conf(conf)
    controller = BrokerController(parsed.broker, parsed.store, conf_path=str(conf))
    root = tmp_path / "broker-a"
    await controller.start()
    try:
        assert (root / "abort").exists()
        async with BrokerClient(controller.api_address) as c:
            r = await c.send("TopicRole", "as-master", queue_id=0)
            # what DLedgerRoleChangeHandler does on FOLLOWER: brokerId = selfId + 1, SLAVE
            controller.change_to_slave(2, "127.0.0.1:40999")
            assert not controller.is_master()
            with pytest.raises(BrokerClientError) as exc:
                await c.send("TopicRole", "refused")
            assert exc.value.code == "NOT_MASTER" and exc.value.body["masterAddress"] == "127.0.0.1:40999"
            with pytest.raises(BrokerClientError):
                await c.create_topic("TopicRole2")
            st = await c.status()
            assert (st["brokerRole"], st["brokerId"], st["masterAddress"]) == ("SLAVE", 2, "127.0.0.1:40999")
            # reads keep working on a slave
            assert body_bytes(await c.by_offset(r["commitLogOffset"])) == b"as-master"
            # LEADER: brokerId 0, SYNC_MASTER (no HA slave in this test: the classic wait applies
            # only when an HAService runs, so the put is acknowledged)
            controller.change_to_master("ASYNC_MASTER")
            r2 = await c.send("TopicRole", "master-again", queue_id=0)
            assert r2["queueOffset"] == 1
    finally:
        await controller.shutdown()
    assert not (root / "abort").exists()  # clean shutdown
    with StoreLock(root):  # released
        pass


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_sigterm_is_clean_kill9_is_recovered(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, "ASYNC_MASTER")
    root = tmp_path / "broker-a"
    broker = BrokerProc(conf, port, "ctl", tmp_path)
    try:
        broker.start()
        with broker.client() as c:
            sent = [c.send("TopicCtl", b"m%d" % i, queue_id=0) for i in range(20)]
            # an offset is committed inside the queue as dispatched (broker.offset_commit)
            wait_until(lambda: c.topic_status("TopicCtl")["queues"][0]["maxOffset"] == 20, 10, "dispatched")
            c.commit_offset("GroupCtl", "TopicCtl", 0, 5)
        assert broker.stop() == 0
        assert not (root / "abort").exists()
        assert "stopped cleanly" in broker.log()
        assert '"TopicCtl@GroupCtl"' in (root / "config" / "consumerOffset.json").read_text()

        broker.start()
        assert broker.log().count("(normal recovery") == 2
        with broker.client() as c:
            more = [c.send("TopicCtl", b"n%d" % i, queue_id=0) for i in range(5)]
        assert (root / "abort").exists()
        broker.kill9()
        assert (root / "abort").exists()  # crash leaves abort: next start recovers abnormally

        broker.start()
        assert "abnormal recovery" in broker.log()
        with broker.client() as c:
            res = wait_until(lambda: (p := c.pull("TopicCtl", 0, 0, 100)) and len(p["messages"]) == 25 and p, 20,
                             "all messages after crash recovery")
            assert [m["commitLogOffset"] for m in res["messages"]] == [r["commitLogOffset"] for r in sent + more]
            assert c.query_offsets("GroupCtl")["offsets"]["TopicCtl@GroupCtl"] == {"0": 5}
            assert c.send("TopicCtl", "after", queue_id=0)["queueOffset"] == 25
    finally:
        kill_all([broker])


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_port_in_use_is_a_clear_start_error(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    port = port_pair()
    conf = classic_conf("broker-a.conf", tmp_path / "busy.conf", listenPort=port, haListenPort=port + 1,
                      storePathRootDir=tmp_path / "s", storePathCommitLog=tmp_path / "s" / "commitlog",
                      mappedFileSizeCommitLog=1 << 20)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port + 1))
        blocker.listen()
        r = subprocess.run([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)], capture_output=True,
                           text=True, timeout=60)
    assert r.returncode == 3 and "haListenPort" in r.stderr and "Traceback" not in r.stderr, r.stderr
    with StoreLock(tmp_path / "s"):  # the failed start released the store
        pass
    assert not (tmp_path / "s" / "abort").exists()  # the store was shut down cleanly


@pytest.mark.timeout(60)
async def test_split_http_port_binds_bind_address_with_the_limits(tmp_path: Path) -> None:
    """httpListenPort apart from listenPort: same bindAddress, its own connection cap, slow heads cut,
    both ports' counters in /status."""
    import asyncio

    from tools.procs import free_port
    from tests.security._listen_support import listening_hosts

    http_port = free_port()
    conf, port = master_conf(tmp_path, "ASYNC_MASTER", httpListenPort=http_port, serverReadTimeoutMillis=300,
                             serverMaxConnections=3)
    parsed = load_conf(conf)
    controller = BrokerController(parsed.broker, parsed.store, conf_path=str(conf))
    await controller.start()
    try:
        assert listening_hosts(http_port) == ["127.0.0.1"] and listening_hosts(port) == ["127.0.0.1"]

        async def closed_within(reader: asyncio.StreamReader, timeout: float) -> bool:
            try:
                while await asyncio.wait_for(reader.read(65536), timeout):
                    pass
                return True
            except ConnectionError:
                return True
            except asyncio.TimeoutError:
                return False

        # a head that never ends is cut after serverReadTimeoutMillis
        r, w = await asyncio.open_connection("127.0.0.1", http_port)
        w.write(b"GET /status HTTP/1.1\r\nHost: x\r\n")
        assert await closed_within(r, 3.0)
        w.close()
        # three open connections fill the cap; a fourth is closed at once; they still work
        held = [await asyncio.open_connection("127.0.0.1", http_port) for _ in range(3)]
        await asyncio.sleep(0.05)
        r4, w4 = await asyncio.open_connection("127.0.0.1", http_port)
        assert await closed_within(r4, 1.0)
        w4.close()
        hr, hw = held[0]
        hw.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(hr.readline(), 5)).startswith(b"HTTP/1.1 200")
        for _, hw in held:
            hw.close()
        st = controller.status()["listen"]
        assert st["bindAddress"] == "127.0.0.1"
        assert st["ports"][str(http_port)]["refusedByCap"] == 1
        assert st["ports"][str(http_port)]["closedReadTimeout"] == 1
        assert str(port) in st["ports"]
    finally:
        await controller.shutdown()

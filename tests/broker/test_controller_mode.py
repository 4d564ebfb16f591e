"""Controller mode with real processes: three ``mqcontroller`` processes and two ``mqbroker``
processes of one broker set (confs from conf/controller/broker/, free ports, temp dirs; the
harness is tools/controller_cluster.py).

One module-scoped world, four tests in order: a master is elected and the other broker follows
it; acknowledged sends (HTTP API, ``allAckInSyncStateSet=true``) reach the slave once it is in the
SyncStateSet; kill -9 of the master -> the slave is elected and serves every acknowledged message
(0 lost; the failover time is printed, not asserted); the old master restarted comes back as a
slave of the new epoch and catches up; a master killed with a tail no slave acknowledged comes
back as a slave and truncates that tail (handshake), its queues equal to the new master's.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from broker.api.client import BrokerClientError
from tools.controller_cluster import ControllerCluster
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "TopicCtl"


#: three controllers, a name server and brokers n0, n1 of broker-a (tools/controller_cluster.py)
World = ControllerCluster


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(tmp_path_factory.mktemp("ctlmode"), 3, 2)
    try:
        w.start(60)
        yield w
    finally:
        w.close()


ACKED: list[tuple[str, dict[str, Any]]] = []  # (body, send answer) of every acknowledged send


def test_a_master_is_elected_and_the_other_broker_follows_it(world: World) -> None:
    master = world.master()
    slave = next(n for n in world.brokers if n != master)
    wait_until(lambda: world.ha(slave).get("role") == "SLAVE" or None, 20, "the other broker is a slave")
    ha_m, ha_s = world.ha(master), world.ha(slave)
    assert ha_m["mode"] == "controller" and ha_m["role"] == "MASTER" and ha_m["masterEpoch"] >= 1
    assert ha_m["epochs"][-1][0] == ha_m["masterEpoch"]
    assert ha_s["masterAddress"] == world.brokers[master].address
    assert ha_m["controllerLeader"] in {f"127.0.0.1:{world.group.door[p]}" for p in world.group.ids}
    st_s = world.status(slave)
    assert st_s is not None and st_s["brokerId"] == ha_s["brokerControllerId"] >= 1 and not st_s["writable"]
    with world.brokers[master].client() as c:
        health = c.request("GET", "/health")
        assert health[0] == 200, health
        metrics = c.metrics()
    assert 'rocketmq_broker_controller_mode_role{role="MASTER"} 1' in metrics


def test_acknowledged_sends_reach_the_slave_in_the_sync_state_set(world: World) -> None:
    master = world.master()
    slave = next(n for n in world.brokers if n != master)
    sid = world.ha(slave)["brokerControllerId"]
    wait_until(lambda: sid in world.ha(master).get("syncStateSet", []) or None, 30,
               "the slave joined the SyncStateSet")
    with world.brokers[master].client() as c:
        for i in range(40):
            body = f"m-{i}"
            ans = c.send(TOPIC, body)
            assert ans["status"] == "SEND_OK", ans
            ACKED.append((body, ans))
    wait_until(lambda: world.route_master(TOPIC) == world.brokers[master].address or None, 15,
               "the name server routes the topic to the master as brokerId 0")
    end = world.max_offset(master)
    assert end is not None
    wait_until(lambda: (world.max_offset(slave) or 0) >= end or None, 20,
               "the slave holds every acknowledged byte")
    ha_m = world.ha(master)
    assert ha_m["slaveAcks"][str(sid)] >= end and ha_m["confirmOffset"] >= end, ha_m
    # the slave's consumers see what the master confirmed (its dispatch stops at the confirm offset)
    acked = sorted(b for b, _ in ACKED)
    wait_until(lambda: sorted(read_all(world, slave)) == acked or None, 10, "the slave serves every acknowledged message")


def read_all(world: World, name: str) -> list[str]:
    return world.read_all(name, TOPIC)


def test_kill9_of_the_master_elects_the_slave_with_nothing_lost_and_the_old_master_rejoins(world: World) -> None:
    assert ACKED, "the send test ran first"
    old = world.master()
    new = next(n for n in world.brokers if n != old)
    t0 = time.monotonic()
    world.brokers[old].kill9()
    assert world.master(30, skip=(old,)) == new
    print(f"\nController-mode failover (kill -9 of the master to a writable new master): {time.monotonic() - t0:.2f}s")
    wait_until(lambda: world.route_master(TOPIC) == world.brokers[new].address or None, 15,
               "the name server routes broker-a's brokerId 0 to the new master")
    print(f"... and to the name server's route naming it brokerId 0: {time.monotonic() - t0:.2f}s")
    assert world.ha(new)["masterEpoch"] >= 2
    bodies = read_all(world, new)
    assert sorted(bodies) == sorted(b for b, _ in ACKED), "an acknowledged message is missing on the new master"
    with world.brokers[new].client() as c:
        ans = c.send(TOPIC, "after-failover")
        assert ans["status"] == "SEND_OK", ans
    # the old master comes back as a slave of the new epoch and catches up
    world.brokers[old].start(wait=True, timeout=60)
    wait_until(lambda: world.ha(old).get("role") == "SLAVE" or None, 30, "the old master is a slave")
    end = world.max_offset(new)
    assert end is not None
    wait_until(lambda: (world.max_offset(old) or 0) >= end or None, 30,
               "the old master caught up")
    assert world.ha(old)["epochs"] == world.ha(new)["epochs"]


def test_a_master_killed_with_an_unacknowledged_tail_truncates_it_when_it_comes_back(world: World) -> None:
    """The slave is paused (SIGSTOP) while the master stores a message no slave acknowledges; both
    are killed (the slave's socket buffer with that frame dies with it); the slave restarts and is
    elected from the SyncStateSet without it; the old master restarts as a slave, and the AutoSwitch
    handshake truncates its tail to the common epoch boundary."""
    master = world.master()
    slave = next(n for n in world.brokers if n != master)
    sid = world.ha(slave)["brokerControllerId"]
    wait_until(lambda: sid in world.ha(master).get("syncStateSet", []) or None, 30, "both in the SyncStateSet")
    acked_end = world.max_offset(master) or 0
    wait_until(lambda: (world.max_offset(slave) or 0) >= acked_end or None, 20, "the slave caught up")
    world.brokers[slave].pause()  # SIGSTOP: the slave acks nothing
    with world.brokers[master].client() as c:
        try:
            status = c.send(TOPIC, "never-acknowledged")["status"]
        except BrokerClientError as exc:
            status = exc.code
    assert status == "FLUSH_SLAVE_TIMEOUT", status  # stored on the master only
    diverged_end = world.max_offset(master) or 0
    assert diverged_end > acked_end
    world.brokers[master].kill9()
    world.brokers[slave].kill9()
    world.brokers[slave].start(wait=True, timeout=60)
    assert world.master(40, skip=(master,)) == slave
    world.brokers[master].start(wait=True, timeout=60)
    wait_until(lambda: world.ha(master).get("role") == "SLAVE" or None, 30, "the killed master is a slave")
    with world.brokers[slave].client() as c:
        assert c.send(TOPIC, "after-truncation")["status"] == "SEND_OK"
    end = world.max_offset(slave)
    assert end is not None
    wait_until(lambda: world.max_offset(master) == end or None, 30, "the killed master truncated and caught up")
    assert world.ha(master)["epochs"] == world.ha(slave)["epochs"]
    on_new = read_all(world, slave)
    wait_until(lambda: sorted(read_all(world, master)) == sorted(on_new) or None, 10,
               "the old master serves what the new one does (up to the confirm offset)")
    assert "never-acknowledged" not in on_new
    assert {b for b, _ in ACKED} <= set(on_new) and "after-truncation" in on_new
    log = world.brokers[master].log(200_000)
    assert f"truncating the commitlog to {acked_end} (was {diverged_end})" in log, log[-3000:]

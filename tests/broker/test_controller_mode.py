"""Controller mode with real processes: three ``mqcontroller`` processes and two ``mqbroker``
processes of one broker set (confs from conf/controller/broker/, free ports, temp dirs; the
harness is tools/controller_cluster.py).

One module-scoped world, six tests in order: a master is elected and the other broker follows
it; acknowledged sends (HTTP API, ``allAckInSyncStateSet=true``) reach the slave once it is in the
SyncStateSet; forged ``NOTIFY_BROKER_ROLE_CHANGED`` pushes over a raw remoting connection change
no role (issue 27: a push is a wake-up, the controller's answer decides); byte-by-byte, torn and
garbage frames on the master's AutoSwitch HA door (a live socket) are dropped while the real
slave stays in the SyncStateSet; kill -9 of the master -> the slave is elected and serves every acknowledged message
(0 lost; the failover time is printed, not asserted); the old master restarted comes back as a
slave of the new epoch and catches up; a master killed with a tail no slave acknowledged comes
back as a slave and truncates that tail (handshake), its queues equal to the new master's.
"""
from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable, Iterator

import pytest

from broker.api.client import BrokerClientError, BrokerUnavailable
from broker.ha.autoswitch.frames import MasterFrameDecoder, MasterHandshake
from broker.ha.autoswitch.frames import SlaveHandshake as SlaveHandshakeFrame
from broker.ha.autoswitch.frames import encode_slave_handshake
from broker.ha.handshake import SlaveHandshake
from broker.remoting.client import RemotingClient
from broker.remoting.processors.controller_notify import NOTIFY_BROKER_ROLE_CHANGED
from controller.bodies import SyncStateSet
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


def push_1008(address: str, fields: dict[str, str], body: bytes) -> int:
    """One NOTIFY_BROKER_ROLE_CHANGED over a raw remoting connection, unsigned; its answer code."""
    host, _, port = address.rpartition(":")

    async def run() -> int:
        c = await RemotingClient.connect(host, int(port))
        try:
            return (await c.request(NOTIFY_BROKER_ROLE_CHANGED, fields, body, timeout=3.0)).code
        finally:
            await c.close()
    return asyncio.run(run())


def test_forged_role_change_pushes_change_no_role(world: World) -> None:
    """Issue 27: the slave is told it is master at epoch 99, the master that another id is; both
    ask the controller instead (the push is counted) and keep their roles and epoch."""
    master = world.master()
    slave = next(n for n in world.brokers if n != master)
    ha_m, ha_s = world.ha(master), world.ha(slave)
    epoch, sid = ha_m["masterEpoch"], ha_s["brokerControllerId"]
    seen = {n: world.ha(n)["replicasManager"]["roleChangeHints"] for n in (master, slave)}
    forged = {"masterAddress": world.brokers[slave].address, "masterEpoch": "99", "syncStateSetEpoch": "99",
              "masterBrokerId": str(sid)}
    body = SyncStateSet((sid,), 99).encode()
    assert push_1008(world.brokers[slave].address, forged, body) == 0  # SUCCESS, as Apache answers
    assert push_1008(world.brokers[master].address, forged, body) == 0
    # the push and the role decision would be one event of the ReplicasManager: once the push is
    # counted, an obeyed push would already show epoch 99
    wait_until(lambda: all(world.ha(n)["replicasManager"]["roleChangeHints"] > seen[n] for n in seen) or None, 3,
               "both brokers took the push as a wake-up")
    for n, role in ((master, "MASTER"), (slave, "SLAVE")):
        ha = world.ha(n)
        assert ha["role"] == role and ha["masterEpoch"] == epoch, ha
    assert world.master(3) == master
    assert not world.status(slave)["writable"]
    with world.brokers[slave].client() as c, pytest.raises(BrokerClientError) as refused:
        c.send(TOPIC, "to-the-slave")
    assert not isinstance(refused.value, BrokerUnavailable), refused.value
    with world.brokers[master].client() as c:
        ans = c.send(TOPIC, "after-forged-push")
        assert ans["status"] == "SEND_OK", ans
        ACKED.append(("after-forged-push", ans))


def ha_token(world: World, name: str) -> str:
    for line in world.brokers[name].conf.read_text().splitlines():
        if line.startswith("haAuthToken="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("the cluster's brokers run with an haAuthToken")


def dribble(sock: socket.socket, data: bytes) -> None:
    """``data`` one byte per send, 2 ms apart (each byte its own TCP segment)."""
    for i in range(len(data)):
        sock.sendall(data[i:i + 1])
        time.sleep(0.002)


def recv_until(sock: socket.socket, done: Callable[[bytes], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(4096)
        assert data, "the master closed the connection"
        if done(data):
            return


def closed_by_peer(sock: socket.socket, timeout: float = 3.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return True


def test_the_ha_door_drops_byte_split_torn_and_garbage_frames_and_keeps_its_slave(world: World) -> None:
    """The master's AutoSwitch HA door over live sockets: (a) the haAuthToken handshake and the
    AutoSwitch handshake frame, each sent one byte at a time, are answered (then a frame with a bad
    tag closes the session); (b) half a HELLO then close; (c) garbage first bytes (an Apache
    slave's unauthenticated handshake, an unknown message type) are closed at once, before any
    more is read. The master stays master, its real slave in the SyncStateSet, sends acknowledged."""
    master = world.master()
    slave = next(n for n in world.brokers if n != master)
    sid = world.ha(slave)["brokerControllerId"]
    token, port = ha_token(world, master), world.brokers[master].ha_port
    # (a) a whole session, byte by byte
    hs = SlaveHandshake(token, "broker-a", now_ms=0, timeout_ms=10_000)
    with socket.create_connection(("127.0.0.1", port), 3) as s:
        dribble(s, hs.start())
        proof = bytearray()
        recv_until(s, lambda d: bool(proof.extend(hs.receive_data(d, 0)) or proof or hs.error))
        assert hs.error is None and proof
        dribble(s, bytes(proof))
        recv_until(s, lambda d: bool(hs.receive_data(d, 0) or hs.done or hs.error))
        assert hs.done and hs.error is None and hs.keys is not None
        mac = hs.keys.for_slave()
        dribble(s, encode_slave_handshake(SlaveHandshakeFrame(9999), mac))  # an id no real slave has
        decoder, frames = MasterFrameDecoder(mac), []
        decoder.feed(hs.leftover)

        def frame(data: bytes) -> bool:
            decoder.feed(data)
            got = decoder.next_frame()
            if got is not None:
                frames.append(got)
            return got is not None
        if not frame(b""):  # unless the WELCOME's segment carried it already
            recv_until(s, frame)
        assert isinstance(frames[0], MasterHandshake) and frames[0].epoch == world.ha(master)["masterEpoch"]
        s.sendall(b"\x00\x00\x00\x02" + b"\x00" * 8 + b"\xee" * 16)  # an ack whose tag does not verify
        assert closed_by_peer(s), "a frame with a bad tag is dropped"
    # (b) half a HELLO, then close
    with socket.create_connection(("127.0.0.1", port), 3) as s:
        s.sendall(SlaveHandshake(token, "broker-a", now_ms=0, timeout_ms=10_000).start()[:20])
    # (c) garbage first bytes: closed without waiting for more
    for garbage in (b"\x00\x00\x00\x01", b"RMHA\x01\x09"):
        with socket.create_connection(("127.0.0.1", port), 3) as s:
            s.sendall(garbage)
            assert closed_by_peer(s), f"{garbage!r} is dropped at once"
    log = world.brokers[master]
    wait_until(lambda: log.log(400_000).count("are not an authenticated HA handshake") >= 1
               and "peer closed during the HA handshake" in log.log(400_000) or None, 3,
               "the master logged why it dropped the torn and garbage connections")
    assert world.brokers[master].alive() and world.master(3) == master
    wait_until(lambda: world.ha(master).get("connections") == 1 or None, 3, "only the real slave is connected")
    assert sid in world.ha(master)["syncStateSet"]
    with world.brokers[master].client() as c:
        ans = c.send(TOPIC, "after-ha-garbage")
        assert ans["status"] == "SEND_OK", ans  # allAckInSyncStateSet: the real slave acknowledged it
        ACKED.append(("after-ha-garbage", ans))


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

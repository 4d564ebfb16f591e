"""ReplicasManager end to end, in process: two brokers' state machines driven over our remoting
client against a real one-member ``ControllerProcess`` (DLedger group of one, its remoting door on a
free port): both apply for ids, write their brokerIdentity files, register, heartbeat; one is
elected master and the other follows it. The driver here is the smallest asyncio loop that runs the
machine's actions (calls awaited one at a time, files through ``metadata_file``)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

from broker.ha.autoswitch.metadata_file import BrokerMetadata, broker_metadata_file, temp_broker_metadata_file
from broker.ha.autoswitch.replicas_manager import ReplicasManager
from broker.ha.autoswitch.replicas_messages import (
    Action, Answered, CallFailed, ChangeToMaster, ChangeToSlave, ClearTempMetadata, ControllerCall, Event,
    FileDone, ReplicasConfig, SendHeartbeat, Start, State, Tick, WriteMetadata, WriteTempMetadata,
)
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from controller.cli import ControllerProcess
from controller.codes import ControllerRequestCode as Q
from controller.config import parse_config
from controller.headers import to_ext_fields
from tests.controller.proc_util import free_ports


class HA:
    def last_epoch(self) -> int:
        return 0

    def max_phy_offset(self) -> int:
        return 0

    def confirm_offset(self) -> int:
        return 0

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
        return frozenset()


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Driver:
    def __init__(self, address: str, door: str, store: Path) -> None:
        self.rm = ReplicasManager(ReplicasConfig(
            "c", "b", address, (door,), broker_heartbeat_interval_ms=100, sync_broker_metadata_period_ms=200,
            first_task_delay_ms=100, register_backoff_ms=100, retry_interval_ms=300, metadata_retry_ms=100), HA())
        self.meta = broker_metadata_file(store)
        self.temp = temp_broker_metadata_file(store)
        self.clients: dict[str, RemotingClient] = {}
        self.log: list[Action] = []

    async def client(self, address: str) -> RemotingClient:
        c = self.clients.get(address)
        if c is None or c.is_closed:
            host, _, port = address.rpartition(":")
            c = self.clients[address] = await RemotingClient.connect(host, int(port))
        return c

    async def feed(self, first: Event) -> None:
        queue = [first]
        while queue:
            for a in self.rm.handle(queue.pop(0)):
                self.log.append(a)
                nxt = await self.do(a)
                if nxt is not None:
                    queue.append(nxt)

    async def do(self, a: Action) -> Optional[Event]:
        if isinstance(a, ControllerCall):
            body = a.body.encode() if a.body is not None else b""
            try:
                c = await self.client(a.address)
                r = await c.request(a.code, to_ext_fields(a.header), body, timeout=3.0)
            except (OSError, ConnectionError, asyncio.TimeoutError) as exc:
                return CallFailed(a.rid, now_ms(), str(exc))
            return Answered(a.rid, now_ms(), r.code, r.remark, dict(r.ext_fields), r.body or None)
        if isinstance(a, SendHeartbeat):
            try:
                c = await self.client(a.address)
                await c.invoke_oneway(RemotingCommand.request(Q.BROKER_HEARTBEAT, to_ext_fields(a.header)))
            except (OSError, ConnectionError):
                pass
            return None
        if isinstance(a, WriteTempMetadata):
            self.temp.write(a.metadata)
        elif isinstance(a, WriteMetadata):
            self.meta.write(a.metadata)
        elif isinstance(a, ClearTempMetadata):
            self.temp.clear()
        else:
            return None
        return FileDone(now_ms())

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()


def test_two_brokers_register_and_one_becomes_master_the_other_its_slave(tmp_path: Path) -> None:
    asyncio.run(_two_brokers(tmp_path))


async def _two_brokers(tmp_path: Path) -> None:
    dport, door_port = free_ports(2)
    door = f"127.0.0.1:{door_port}"
    cfg = parse_config(
        f"controllerDLegerPeers=n0-127.0.0.1:{dport}\ncontrollerDLegerSelfId=n0\ncontrollerStorePath={tmp_path / 'ctl'}\n"
        f"mappedFileSize=1048576\ncontrollerDLegerAllowInsecure=true\ncontrollerAllowInsecure=true\n"
        f"listenPort={door_port}\ncontrollerRemotingPeers=n0-{door}\nbindAddress=127.0.0.1\n")
    proc = ControllerProcess(cfg, None)
    await proc.start()
    brokers = [Driver(f"127.0.0.1:{p}", door, tmp_path / f"broker{i}") for i, p in enumerate(free_ports(2))]
    try:
        deadline = time.monotonic() + 20.0
        while not proc.controller.is_leader_ready:
            assert time.monotonic() < deadline, "the controller never became leader"
            await asyncio.sleep(0.02)
        for b in brokers:
            await b.feed(Start(now_ms(), b.meta.read(), b.temp.read()))
        while not all(b.rm.state is State.RUNNING for b in brokers):
            assert time.monotonic() < deadline, [(b.rm.state, b.log[-3:]) for b in brokers]
            for b in brokers:
                await b.feed(Tick(now_ms()))
            await asyncio.sleep(0.05)
        for _ in range(4):  # a few more periods: nothing flips
            for b in brokers:
                await b.feed(Tick(now_ms()))
            await asyncio.sleep(0.1)
    finally:
        for b in brokers:
            await b.close()
        await proc.stop()
    ids = sorted(b.rm.broker_id for b in brokers if b.rm.broker_id is not None)
    assert ids == [1, 2]
    for b in brokers:
        meta = b.meta.read()
        assert meta == BrokerMetadata("c", "b", b.rm.broker_id or -1)
        assert b.temp.read() is None
    masters = [(b, a) for b in brokers for a in b.log if isinstance(a, ChangeToMaster)]
    slaves = [(b, a) for b in brokers for a in b.log if isinstance(a, ChangeToSlave)]
    assert len(masters) == 1 and len(slaves) == 1, ([a for _, a in masters], [a for _, a in slaves])
    (master, to_master), (slave, to_slave) = masters[0], slaves[0]
    assert master is not slave
    assert to_master.new_master_epoch == 1 and master.rm.broker_id in to_master.sync_state_set
    assert (to_slave.master_broker_id, to_slave.master_address, to_slave.master_epoch) == \
        (master.rm.broker_id, master.rm.config.broker_address, 1)
    replicas = proc.controller.replicas.replica_info_table["b"]
    assert {i: replicas.broker_address(i) for i in ids} == {b.rm.broker_id: b.rm.config.broker_address
                                                           for b in brokers}

"""ReplicasManager end to end, in process: two brokers' state machines driven over our remoting
client against a real one-member ``ControllerProcess`` (DLedger group of one, its remoting door on a
free port): both apply for ids, write their brokerIdentity files, register, heartbeat; one is
elected master and the other follows it; then the master, having let the slave into its
SyncStateSet, dies and the slave takes over in epoch 2. The driver here is the smallest asyncio loop that runs the
machine's actions (calls awaited one at a time, files through ``metadata_file``)."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable, Optional

from broker.ha.autoswitch.metadata_file import BrokerMetadata, broker_metadata_file, temp_broker_metadata_file
from broker.ha.autoswitch.replicas_manager import ReplicasManager
from broker.ha.autoswitch.replicas_messages import (
    Action, Answered, CallFailed, ChangeToMaster, ChangeToSlave, ClearTempMetadata, ControllerCall, Event,
    FileDone, ReplicasConfig, SendHeartbeat, Shutdown, Start, State, SyncStateSetProposed, Tick, WriteMetadata,
    WriteTempMetadata,
)
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from controller.cli import ControllerProcess
from controller.codes import ControllerRequestCode as Q
from controller.config import parse_config
from controller.headers import to_ext_fields
from tests.broker.ha.autoswitch.fakes import EmptyHA
from tests.controller.proc_util import free_ports


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Driver:
    def __init__(self, address: str, door: str, store: Path) -> None:
        self.rm = ReplicasManager(ReplicasConfig(
            "c", "b", address, (door,), broker_heartbeat_interval_ms=100, sync_broker_metadata_period_ms=200,
            first_task_delay_ms=100, register_backoff_ms=100, retry_interval_ms=300, metadata_retry_ms=100), EmptyHA())
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
        self.clients.clear()


async def run_until(brokers: list[Driver], what: str, done: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, (what, [(b.rm.state, b.log[-3:]) for b in brokers])
        for b in brokers:
            await b.feed(Tick(now_ms()))
        await asyncio.sleep(0.05)


class Setup:
    """A one-member controller with its door, and two broker drivers (not started)."""

    def __init__(self, tmp_path: Path) -> None:
        dport, door_port = free_ports(2)
        self.door = f"127.0.0.1:{door_port}"
        cfg = parse_config(
            f"controllerDLegerPeers=n0-127.0.0.1:{dport}\ncontrollerDLegerSelfId=n0\n"
            f"controllerStorePath={tmp_path / 'ctl'}\nmappedFileSize=1048576\ncontrollerDLegerAllowInsecure=true\n"
            f"controllerAllowInsecure=true\nlistenPort={door_port}\ncontrollerRemotingPeers=n0-{self.door}\n"
            "bindAddress=127.0.0.1\nscanNotActiveBrokerInterval=200\n")
        self.proc = ControllerProcess(cfg, None)
        self.brokers = [Driver(f"127.0.0.1:{p}", self.door, tmp_path / f"broker{i}")
                        for i, p in enumerate(free_ports(2))]

    async def start_all(self) -> None:
        await self.proc.start()
        await run_until([], "the controller leads", lambda: self.proc.controller.is_leader_ready)
        for b in self.brokers:
            await b.feed(Start(now_ms(), b.meta.read(), b.temp.read()))
        await run_until(self.brokers, "both RUNNING", lambda: all(b.rm.state is State.RUNNING for b in self.brokers))

    async def stop(self) -> None:
        for b in self.brokers:
            await b.close()
        await self.proc.stop()


def test_two_brokers_register_and_one_becomes_master_the_other_its_slave(tmp_path: Path) -> None:
    asyncio.run(_two_brokers(tmp_path))


async def _two_brokers(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    brokers, proc = setup.brokers, setup.proc
    try:
        await setup.start_all()
        for _ in range(4):  # a few more periods: nothing flips
            for b in brokers:
                await b.feed(Tick(now_ms()))
            await asyncio.sleep(0.1)
    finally:
        await setup.stop()
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


def test_the_slave_in_the_sync_state_set_takes_over_when_the_master_goes(tmp_path: Path) -> None:
    asyncio.run(_failover(tmp_path))


async def _failover(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        await setup.start_all()
        master = next(b for b in setup.brokers if b.rm.is_master)
        slave = next(b for b in setup.brokers if b is not master)
        assert master.rm.broker_id is not None and slave.rm.broker_id is not None
        both = frozenset({master.rm.broker_id, slave.rm.broker_id})
        # the HA service saw the slave catch up: the master asks the controller to let it in
        await master.feed(SyncStateSetProposed(now_ms(), both))
        await run_until(setup.brokers, "the slave joined the SyncStateSet", lambda: master.rm.sync_state_set == both)
        # the master dies: its connections close, it heartbeats no more
        await master.close()
        master.rm.handle(Shutdown(now_ms()))
        await run_until([slave], "the slave became master", lambda: slave.rm.is_master)
    finally:
        await setup.stop()
    promoted = [a for a in slave.log if isinstance(a, ChangeToMaster)]
    assert len(promoted) == 1 and promoted[0].new_master_epoch == 2
    assert slave.rm.master_broker_id == slave.rm.broker_id
    assert [a.master_epoch for a in slave.log if isinstance(a, ChangeToSlave)] == [1]

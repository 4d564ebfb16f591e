"""ControllerServer in process (a one-member DLedger group, a clock the test moves): what the
process tests cannot time exactly."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable

from controller.bodies import SyncStateSet
from controller.codes import ControllerResponseCode as RC
from controller.config import parse_config
from controller.headers import (AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, ElectMasterRequestHeader, GetReplicaInfoRequestHeader,
                                RegisterBrokerToControllerRequestHeader)
from controller.server import ControllerServer
from tests.controller.proc_util import free_ports


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def make(tmp: Path, clock: Clock, extra: str = "") -> ControllerServer:
    (port,) = free_ports(1)
    cfg = parse_config(f"controllerDLegerPeers=n0-127.0.0.1:{port}\ncontrollerDLegerSelfId=n0\n"
                       f"controllerStorePath={tmp}\nmappedFileSize=1048576\ncontrollerDLegerAllowInsecure=true\n"
                       "scanNotActiveBrokerInterval=50\nscanInactiveMasterInterval=100\n" + extra)
    return ControllerServer(cfg, clock=clock)


async def until(what: str, probe: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not probe():
        if loop.time() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.01)


async def with_server(tmp: Path, clock: Clock, body: Callable[[ControllerServer], Awaitable[Any]],
                      extra: str = "") -> None:
    s = make(tmp, clock, extra)
    await s.start()
    try:
        await until("leader ready", lambda: s.is_leader_ready)
        await body(s)
    finally:
        await s.shutdown()


async def set_with_master(s: ControllerServer, clock: Clock) -> None:
    """Broker set b: brokers 1 and 2, master 1, SyncStateSet {1}; both heartbeating."""
    for i in (1, 2):
        h = ApplyBrokerIdRequestHeader("c", "b", i, f"127.0.0.1:{i};0")
        assert (await s.submit("apply", lambda h=h: s.replicas.apply_broker_id(h), True)).code == RC.SUCCESS
        s.heartbeats.on_heartbeat("c", "b", f"127.0.0.1:{i}", i, clock(), timeout_ms=1000)
        r = RegisterBrokerToControllerRequestHeader("c", "b", i, f"127.0.0.1:{i}")
        assert (await s.submit("reg", lambda r=r: s.replicas.register_broker(r, s.live()), True)).code == RC.SUCCESS
    e = ElectMasterRequestHeader.of_broker_trigger("c", "b", 1)
    assert (await s.submit("elect", lambda: s.replicas.elect_master(e, s.live()), True)).code == RC.SUCCESS


def test_no_reelection_before_one_scan_interval_of_leadership(tmp_path: Path) -> None:
    clock = Clock()

    async def body(s: ControllerServer) -> None:
        await set_with_master(s, clock)
        s.heartbeats.rows.pop(("c", "b", 1))  # as if this new leader had not heard the master yet
        before = s.replicas.sync_state_set_info_table["b"].master_epoch
        await asyncio.sleep(0.4)  # several scan periods of wall time, but the clock has not moved
        assert s.replicas.sync_state_set_info_table["b"].master_epoch == before
        assert s.replicas.sync_state_set_info_table["b"].master_broker_id == 1
        clock.ms += 100  # one scanInactiveMasterInterval of leadership: now the scan acts
        s.heartbeats.on_heartbeat("c", "b", "127.0.0.1:2", 2, clock(), timeout_ms=1000)
        await until("the set re-elected", lambda: s.replicas.sync_state_set_info_table["b"].master_epoch > before)
        # SyncStateSet {1} has no live member: the master is gone (ElectMasterEvent(false)), nobody else elected
        assert s.replicas.sync_state_set_info_table["b"].master_broker_id is None
    asyncio.run(with_server(tmp_path, clock, body))


def test_expired_master_triggers_election_and_reads_append_when_process_read_event(tmp_path: Path) -> None:
    clock = Clock()

    async def body(s: ControllerServer) -> None:
        await set_with_master(s, clock)
        end = s.dledger.log_view.ledger_end_index
        q = GetReplicaInfoRequestHeader("b")
        assert (await s.submit("read", lambda: s.replicas.get_replica_info(q), False)).code == RC.SUCCESS
        assert s.dledger.log_view.ledger_end_index == end + 1  # isProcessReadEvent: an empty entry
        expired_before = s.counters["brokers_expired"]
        clock.ms += 5000  # both brokers silent past their 1 s timeout
        await until("both rows expired", lambda: s.counters["brokers_expired"] == expired_before + 2)
        await until("an election was triggered", lambda: s.counters["elections_triggered"] >= 1)
        await until("the master gone", lambda: s.replicas.sync_state_set_info_table["b"].master_broker_id is None)
    asyncio.run(with_server(tmp_path, clock, body, "isProcessReadEvent=true\n"))


def test_a_full_queue_answers_system_busy(tmp_path: Path) -> None:
    clock = Clock()

    async def body(s: ControllerServer) -> None:
        q = GetReplicaInfoRequestHeader("b")
        replies = await asyncio.gather(*(s.submit("read", lambda: s.replicas.get_replica_info(q), False)
                                         for _ in range(5)))
        codes = sorted(r.code for r in replies)
        assert codes.count(RC.SYSTEM_BUSY) >= 2, codes  # capacity 2: the rest are refused at once
        busy = next(r for r in replies if r.code == RC.SYSTEM_BUSY)
        assert busy.remark is not None and "controllerRequestThreadPoolQueueCapacity" in busy.remark
    asyncio.run(with_server(tmp_path, clock, body, "controllerRequestThreadPoolQueueCapacity=2\n"))


def test_a_closed_master_connection_triggers_election_a_replica_connection_does_not(tmp_path: Path) -> None:
    clock = Clock()

    async def body(s: ControllerServer) -> None:
        await set_with_master(s, clock)
        alter = AlterSyncStateSetRequestHeader("b", 1, 1)
        r = await s.submit("alter", lambda: s.replicas.alter_sync_state_set(alter, SyncStateSet((1, 2), 1), s.live()),
                           True)
        assert r.code == RC.SUCCESS, (r.code, r.remark)
        ch1, ch2 = object(), object()
        s.heartbeats.on_heartbeat("c", "b", "127.0.0.1:1", 1, clock(), channel=ch1, timeout_ms=1000)
        s.heartbeats.on_heartbeat("c", "b", "127.0.0.1:2", 2, clock(), channel=ch2, timeout_ms=1000)
        s.on_channel_close(ch2)  # a replica went: nothing to elect
        await asyncio.sleep(0.2)
        assert s.counters["elections_triggered"] == 0
        s.heartbeats.on_heartbeat("c", "b", "127.0.0.1:2", 2, clock(), channel=ch2, timeout_ms=1000)
        s.on_channel_close(ch1)  # the master went: 2, in the SyncStateSet and alive, takes over
        await until("master 2", lambda: s.replicas.sync_state_set_info_table["b"].master_broker_id == 2)
        assert s.counters["elections_triggered"] >= 1 and s.counters["channels_closed"] == 2
    asyncio.run(with_server(tmp_path, clock, body))

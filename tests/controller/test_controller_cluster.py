"""Three real controller processes (``python -m controller``) replicated on our dledger library.

One scenario, in order: a group forms; brokers apply for ids, register, heartbeat every controller
and elect a master; the state is the same on every controller; a follower answers
CONTROLLER_NOT_LEADER with the leader's door; kill -9 of the leader: a new leader answers with the
same state; the master stops heartbeating: the new leader elects a replica of the SyncStateSet
(never the one outside it, although that one reports the most data) and notifies the live brokers;
the killed controller comes back and catches up; all three restart and replay the same state.
Every wait is bounded; every process is stopped in ``finally``.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Callable, Optional

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.server import RemotingConnection, RemotingServer
from controller.bodies import SyncStateSet
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from tests.controller.proc_util import connect, find_leader, request
from tools.controller_cluster import ControllerGroup as Group

CLUSTER, NAME = "DefaultCluster", "broker-a"
# (epoch, maxOffset) each broker reports: broker 3 has the most data but stays outside the SyncStateSet
PROGRESS = {1: (1, 1000), 2: (1, 900), 3: (1, 50_000)}


class FakeBroker:
    """A broker's remoting port that records NOTIFY_BROKER_ROLE_CHANGED pushes."""

    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.server = RemotingServer(name=f"fake-broker-{broker_id}")
        self.notified: list[tuple[dict[str, str], bytes]] = []
        self.server.register(Q.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)

    async def _on_notify(self, cmd: RemotingCommand, conn: RemotingConnection) -> Optional[RemotingCommand]:
        self.notified.append((dict(cmd.ext_fields), bytes(cmd.body)))
        return None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"


class Heartbeater:
    """Every broker in ``beating`` heartbeats every controller every 0.2 s (timeout 3 s, so that a
    loaded machine does not fake a failure)."""

    def __init__(self, group: Group, brokers: dict[int, FakeBroker]) -> None:
        self.group, self.brokers = group, brokers
        self.beating: set[int] = set()
        self.clients: dict[str, RemotingClient] = {}
        self.task: Optional[asyncio.Task[None]] = None

    async def _beat_once(self) -> None:
        for pid in self.group.ids:
            c = self.clients.get(pid)
            if c is None or c.is_closed:
                try:
                    c = self.clients[pid] = await RemotingClient.connect("127.0.0.1", self.group.door[pid])
                except OSError:
                    continue
            for b in sorted(self.beating):
                epoch, offset = PROGRESS[b]
                try:
                    await c.request(Q.BROKER_HEARTBEAT, {
                        "clusterName": CLUSTER, "brokerName": NAME, "brokerAddr": self.brokers[b].addr,
                        "brokerId": b, "epoch": epoch, "maxOffset": offset, "confirmOffset": offset,
                        "heartbeatTimeoutMills": 3000}, timeout=1.0)
                except (OSError, ConnectionError, asyncio.TimeoutError):
                    break

    async def _run(self) -> None:
        while True:
            await self._beat_once()
            await asyncio.sleep(0.2)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait([self.task], timeout=5)
        for c in self.clients.values():
            await c.close()


async def eventually(what: str, probe: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def state_of(group: Group, pid: str) -> Optional[dict[str, Any]]:
    st = group.status(pid)
    if st is None:
        return None
    return {name: {k: v for k, v in s.items() if k != "aliveBrokers"} for name, s in st["brokerSets"].items()}


async def same_state_everywhere(group: Group, expected: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    def probe() -> Optional[dict[str, Any]]:
        states = [state_of(group, p) for p in group.ids]
        if any(s is None or not s for s in states):
            return None
        if all(s == states[0] for s in states) and (expected is None or states[0] == expected):
            return states[0]
        return None
    return await eventually("the same state on every controller", probe, 30.0)


async def replica_info(client: RemotingClient) -> RemotingCommand:
    return await client.request(Q.CONTROLLER_GET_REPLICA_INFO, {"brokerName": NAME}, timeout=5)


def test_three_controllers_failover_and_replay(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))


async def _scenario(tmp_path: Path) -> None:
    group = Group(tmp_path, 3, {"controllerAllowInsecure": "true", "scanNotActiveBrokerInterval": 300,
                                "scanInactiveMasterInterval": 1000})
    brokers = {i: FakeBroker(i) for i in (1, 2, 3)}
    beats = Heartbeater(group, brokers)
    clients: list[RemotingClient] = []
    try:
        for b in brokers.values():
            await b.server.start("127.0.0.1", 0)
        group.start_all()
        leader = await find_leader(group)
        c = await connect(group.door[leader])
        clients.append(c)
        # ---- ids, registration, heartbeats, first election
        for i, b in brokers.items():
            r = await c.invoke(request(Q.CONTROLLER_APPLY_BROKER_ID, {
                "clusterName": CLUSTER, "brokerName": NAME, "appliedBrokerId": i,
                "registerCheckCode": f"{b.addr};{1700000000000 + i}"}), 5)
            assert r.code == RC.SUCCESS, (i, r.code, r.remark)
            r = await c.invoke(request(Q.CONTROLLER_REGISTER_BROKER, {
                "clusterName": CLUSTER, "brokerName": NAME, "brokerId": i, "brokerAddress": b.addr}), 5)
            assert r.code == RC.SUCCESS, (i, r.code, r.remark)
        beats.beating.update(brokers)
        beats.start()
        await eventually("all three brokers alive on the leader",
                         lambda: (group.status(leader) or {}).get("brokerSets", {}).get(NAME, {})
                         .get("aliveBrokers") == [1, 2, 3])
        r = await c.invoke(request(Q.CONTROLLER_ELECT_MASTER, {"clusterName": CLUSTER, "brokerName": NAME,
                                                               "brokerId": 1, "designateElect": "false"}), 5)
        assert r.code == RC.SUCCESS and r.ext_fields["masterBrokerId"] == "1", (r.code, r.remark, r.ext_fields)
        assert r.ext_fields["masterEpoch"] == "1"
        r = await c.invoke(request(Q.CONTROLLER_ALTER_SYNC_STATE_SET,
                                   {"brokerName": NAME, "masterBrokerId": 1, "masterEpoch": 1},
                                   SyncStateSet((1, 2), 1).encode()), 5)
        assert r.code == RC.SUCCESS and r.ext_fields["newSyncStateSetEpoch"] == "2", (r.code, r.remark)
        state = await same_state_everywhere(group)
        assert state[NAME]["masterBrokerId"] == 1 and state[NAME]["syncStateSet"] == [1, 2]
        assert state[NAME]["brokers"] == {str(i): b.addr for i, b in brokers.items()}
        # ---- a follower refuses, naming the leader's door
        follower = next(p for p in group.ids if p != leader)
        fc = await connect(group.door[follower])
        clients.append(fc)
        r = await replica_info(fc)
        assert r.code == RC.CONTROLLER_NOT_LEADER and r.remark == "The controller is not in leader state"
        assert r.ext_fields.get("controllerLeaderAddress") == f"127.0.0.1:{group.door[leader]}"
        # ---- kill -9 the leader: a new leader answers with the same state
        t_kill = time.monotonic()
        group.kill9(leader)
        new_leader = await find_leader(group, exclude=(leader,))
        assert new_leader != leader
        nc = await connect(group.door[new_leader])
        clients.append(nc)
        r = await replica_info(nc)
        assert r.code == RC.SUCCESS and r.ext_fields["masterBrokerId"] == "1", (r.code, r.remark)
        assert SyncStateSet.decode(r.body).sync_state_set in ((1, 2), (2, 1))
        print(f"controller failover: kill -9 to the new leader's answer {time.monotonic() - t_kill:.2f} s")
        # ---- the master stops heartbeating: a SyncStateSet member (2) becomes master, never 3
        beats.beating.discard(1)
        t_silent = time.monotonic()
        seen: set[str] = set()

        async def master_moved() -> Optional[RemotingCommand]:
            rr = await replica_info(nc)
            seen.add(rr.ext_fields.get("masterBrokerId", "none"))
            return rr if rr.ext_fields.get("masterBrokerId") == "2" else None
        r = await eventually("a new master from the SyncStateSet", master_moved, 20.0)
        assert "3" not in seen, seen
        print(f"broker failover: last master heartbeat to master 2 {time.monotonic() - t_silent:.2f} s "
              "(heartbeat timeout 3 s, scan 0.3 s)")
        assert r.ext_fields["masterEpoch"] == "2"
        assert SyncStateSet.decode(r.body).sync_state_set == (2,)
        for b in (2, 3):  # the live brokers of the set are told
            await eventually(f"broker {b} notified of master 2",
                             lambda b=b: any(f.get("masterBrokerId") == "2" and f.get("masterEpoch") == "2"
                                             for f, _ in brokers[b].notified), 10.0)
        assert not any(f.get("masterBrokerId") == "2" for f, _ in brokers[1].notified)  # 1 is not alive
        # ---- the killed controller comes back and catches up
        group.start(leader)
        state = await same_state_everywhere(group)
        assert state[NAME]["masterBrokerId"] == 2 and state[NAME]["syncStateSet"] == [2]
        assert state[NAME]["masterEpoch"] == 2 and state[NAME]["syncStateSetEpoch"] == 3
        # ---- all three restart: the log replays to the same state
        for c_ in clients:
            await c_.close()
        clients.clear()
        group.stop_all()
        group.start_all()
        await find_leader(group)
        replayed = await same_state_everywhere(group, state)
        assert replayed == state
    finally:
        await beats.stop()
        for c_ in clients:
            await c_.close()
        group.stop_all()
        for b in brokers.values():
            await b.server.stop()
